// RUN: not %mirax-translate --mirax-to-msl %s 2>&1 | FileCheck %s

// MSL has no double: a float64 kernel is refused at the op, with the dtype named.
// CHECK: error: {{.*}}float64 cannot run on this GPU
func.func @f64(%x: tensor<4xf64>) -> tensor<4xf64> {
  %0 = "mirax.add"(%x, %x) : (tensor<4xf64>, tensor<4xf64>) -> tensor<4xf64>
  return %0 : tensor<4xf64>
}
