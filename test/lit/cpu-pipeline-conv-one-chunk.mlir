// RUN: %mirax-opt %s --mirax-cpu-pipeline --mlir-print-ir-after-all 2>&1 >/dev/null | FileCheck %s

// A convolution whose whole window copy is one chunk (dialect/conv.py): its product is
// reshaped to the output at once, and a barrier keeps reshape propagation from folding
// that reshape into it. Without it the product became a generic contraction that
// mirax-fuse-reductions ran as one dot product per output element, reading the weights a
// lane at a time (60x slower); here it is still a linalg.matmul when the matmul code
// generation runs, after the fusions.
// CHECK-LABEL: IR Dump After mirax-fuse-reductions
// CHECK-NOT:     vector.reduction
// CHECK:         linalg.matmul ins(%{{.+}}, %{{.+}} : tensor<3136x72xf32>, tensor<72x16xf32>)
// CHECK:       IR Dump After
func.func @main(%x: tensor<1x56x56x8xf32>, %w: tensor<16x3x3x8xf32>) -> tensor<1x56x56x16xf32> attributes {llvm.emit_c_interface} {
  %0 = "mirax.conv"(%x, %w) {stride = array<i64: 1, 1>, padding_lo = array<i64: 1, 1>, padding_hi = array<i64: 1, 1>, kernel_dilation = array<i64: 1, 1>, input_dilation = array<i64: 1, 1>, groups = 1 : i64, flip = false} : (tensor<1x56x56x8xf32>, tensor<16x3x3x8xf32>) -> tensor<1x56x56x16xf32>
  return %0 : tensor<1x56x56x16xf32>
}
