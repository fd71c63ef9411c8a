// RUN: %mirax-opt %s -split-input-file --mirax-math-approx | FileCheck %s
// RUN: %mirax-opt %s -split-input-file --mirax-math-approx=target=cpu | FileCheck %s --check-prefix=CPU

// f32 exp becomes arithmetic: range reduction with floor and fmas, a polynomial, and
// the 2^m scaling built in the exponent bits; no math.exp (a libm call per lane) is left.
// CHECK-LABEL: func.func @exp_f32
// CHECK: math.floor
// CHECK: math.fma
// CHECK: arith.shli
// CHECK: arith.bitcast {{.*}} : i32 to f32
// CHECK-NOT: math.exp
// CHECK: return
// CHECK-NOT: func.func private @__mirax_approx
// For the CPU (whose LLVM code generation keeps IEEE adds as written) m = round(x log2(e))
// comes from one fma with 1.5 * 2^23: no floor, no float-to-int conversion, no NaN select.
// CPU-LABEL: func.func @exp_f32
// CPU-NOT: math.floor
// CPU: math.fma %{{.+}}, %{{.+}}, %[[MAGIC:.+]] : f32
// CPU-NEXT: arith.subf %{{.+}}, %[[MAGIC]] : f32
// CPU: arith.bitcast {{.*}} : f32 to i32
// CPU-NOT: arith.fptosi
// CPU-NOT: arith.select {{.*}} : f32
// CPU: return
func.func @exp_f32(%x: f32) -> f32 {
  %0 = math.exp %x : f32
  return %0 : f32
}

// -----

// Inside a linalg.generic body, as convert-mirax-to-linalg writes it: log, erf and
// tanh are rewritten there too; f64 stays on libm.
// CHECK-LABEL: func.func @in_generic
// CHECK: linalg.generic
// CHECK-NOT: math.log {{.*}} : f32
// CHECK-NOT: math.erf {{.*}} : f32
// CHECK-NOT: math.tanh {{.*}} : f32
// CHECK: linalg.yield
// CHECK-LABEL: func.func @f64_stays
// CHECK: math.exp {{.*}} : f64
func.func @in_generic(%x: tensor<8xf32>) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]} ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %0 = math.log %a : f32
    %1 = math.erf %0 : f32
    %2 = math.tanh %1 : f32
    linalg.yield %2 : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}
func.func @f64_stays(%x: f64) -> f64 {
  %0 = math.exp %x : f64
  return %0 : f64
}
