// RUN: %mirax-opt %s -split-input-file --mirax-math-approx | FileCheck %s
// RUN: %mirax-opt %s -split-input-file --mirax-math-approx=target=cpu | FileCheck %s --check-prefix=CPU
// RUN: %mirax-opt %s -split-input-file --mirax-math-approx="ops=exp,log,erf" | FileCheck %s --check-prefix=OPS
// RUN: %mirax-opt %s -split-input-file --mirax-math-approx="target=gpu ops=sin,cos,tan" | FileCheck %s --check-prefix=TRIG
// RUN: not %mirax-opt %s -split-input-file --mirax-math-approx="ops=exp,asin" 2>&1 | FileCheck %s --check-prefix=BADOPS
// BADOPS: no approximation of asin (it has exp, log, erf, tanh, expm1, log1p, powf, sin, cos, tan)

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
// `ops` picks the rewritten ops (the GPU pipeline keeps the target's tanh): tanh stays.
// OPS-LABEL: func.func @in_generic
// OPS-NOT: math.log {{.*}} : f32
// OPS-NOT: math.erf {{.*}} : f32
// OPS: math.tanh {{.*}} : f32
// OPS: linalg.yield
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

// -----

// The affine maps around an erf fold into it (approx.erf_affine): gelu's + 1 becomes the
// last fma's addend, its / 2 (a power of two, moved exactly across the product with x) goes into
// the numerator's coefficients, and the product with x stays last. The denominator is
// monic: its first Horner step is an add.
// CHECK-LABEL: func.func @gelu_body
// CHECK: linalg.generic
// CHECK: ^bb0(%[[IN:.+]]: f32, %{{.+}}: f32):
// CHECK: %[[Z:.+]] = arith.mulf %[[IN]], %{{.+}} : f32
// CHECK: arith.cmpf olt, %[[Z]]
// CHECK: %[[T:.+]] = arith.mulf %[[ZC:.+]], %[[ZC]] : f32
// CHECK-COUNT-6: math.fma
// CHECK: arith.addf %[[T]], %{{.+}} : f32
// CHECK-COUNT-3: math.fma
// CHECK: %[[R:.+]] = arith.divf
// CHECK: %[[H:.+]] = math.fma %[[ZC]], %[[R]], %{{.+}} : f32
// CHECK: %[[G:.+]] = arith.mulf %[[H]], %[[IN]] : f32
// CHECK-NEXT: linalg.yield %[[G]]
// CHECK-NOT: math.erf
// An erf whose value is read twice keeps its own function; only what follows the last
// single use folds.
// CHECK-LABEL: func.func @erf_used_twice
// CHECK: arith.divf
// CHECK: %[[E2:.+]] = arith.mulf
// CHECK: arith.mulf %[[E2]], %[[E2]] : f32
func.func @gelu_body(%x: tensor<8xf32>) -> tensor<8xf32> {
  %e = tensor.empty() : tensor<8xf32>
  %c = arith.constant 0.707106769 : f32
  %one = arith.constant 1.0 : f32
  %half = arith.constant 0.5 : f32
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]} ins(%x : tensor<8xf32>) outs(%e : tensor<8xf32>) {
  ^bb0(%a: f32, %o: f32):
    %0 = arith.mulf %a, %c : f32
    %1 = math.erf %0 : f32
    %2 = arith.addf %1, %one : f32
    %3 = arith.mulf %a, %2 : f32
    %4 = arith.mulf %3, %half : f32
    linalg.yield %4 : f32
  } -> tensor<8xf32>
  return %r : tensor<8xf32>
}
func.func @erf_used_twice(%x: f32) -> f32 {
  %0 = math.erf %x : f32
  %1 = arith.mulf %0, %0 : f32
  return %1 : f32
}

// -----

// expm1 and log1p keep their precision near 0 (MLIR's lowering writes exp(x) - 1 and
// log(1 + x)). f32 expm1: x P(x) for |x| < 1, exp(x) - 1 beyond (no log, no divide);
// Goldberg's log(u) * x / (u - 1) with u = 1 + x for log1p, and Kahan's
// (u - 1) * x / log(u) with u = exp(x) for f64 expm1, x itself where u is 1; in f32 on the
// polynomial exp and log, in f64 on math.exp and math.log (libm).
// CHECK-LABEL: func.func @small_x
// CHECK-NOT: math.expm1
// CHECK-NOT: math.log1p
// CHECK: %[[XP:.+]] = arith.mulf %arg0, %{{.+}} : f32
// CHECK: %[[EM1:.+]] = arith.subf %{{.+}}, %[[ONE:.+]] : f32
// CHECK: %[[AX:.+]] = math.absf %arg0 : f32
// CHECK: %[[NEAR:.+]] = arith.cmpf olt, %[[AX]], %[[ONE]] : f32
// CHECK: arith.select %[[NEAR]], %[[XP]], %[[EM1]] : f32
// CHECK: math.exp %{{.+}} : f64
// CHECK: math.log %{{.+}} : f64
// CHECK: arith.cmpf oeq
// CHECK: return
func.func @small_x(%x: f32, %y: f64) -> (f32, f32, f64) {
  %0 = math.expm1 %x : f32
  %1 = math.log1p %x : f32
  %2 = math.expm1 %y : f64
  return %0, %1, %2 : f32, f32, f64
}

// -----

// f32 pow with a varying exponent: computed in f64 (log2|x| from the bits of |x|, a
// polynomial, t = y log2|x| clamped, 2^t from the exponent field and a polynomial),
// rounded to f32 once, then C99's special cases as selects; no libm or library call is
// left. A constant exponent stays a math.powf: LLVM makes x^2 a multiply.
// CPU-LABEL: func.func @pow_f32
// CPU-NOT: math.powf %arg0, %arg1
// CPU: arith.extf %{{.+}} : f32 to f64
// CPU: arith.bitcast %{{.+}} : f64 to i64
// CPU: math.fma %{{.+}} : f64
// CPU: arith.truncf %{{.+}} : f64 to f32
// CPU: math.floor %{{.+}} : f32
// CPU: arith.select
// CPU: math.powf %arg0, %{{.+}} : f32
// CPU: return
// OPS-LABEL: func.func @pow_f32
// OPS: math.powf %arg0, %arg1 : f32
func.func @pow_f32(%x: f32, %y: f32) -> (f32, f32) {
  %0 = math.powf %x, %y : f32
  %c2 = arith.constant 2.0 : f32
  %1 = math.powf %x, %c2 : f32
  return %0, %1 : f32, f32
}

// -----

// sin, cos and tan are rewritten only when named (the GPU pipeline names them: the
// targets' own are inexact far from 0; the CPU's libm is exact): the argument reduced by
// Payne-Hanek's method in 32-bit integers (the mantissa times six words of 2/pi, from the
// least significant, the carries added), the quadrant's polynomial selected.
// CHECK-LABEL: func.func @trig
// CHECK: math.sin
// CHECK: math.cos
// CHECK: math.tan
// TRIG-LABEL: func.func @trig
// TRIG-NOT: math.sin
// TRIG: %[[AX:.+]] = math.absf %arg0 : f32
// TRIG: %[[BITS:.+]] = arith.bitcast %[[AX]] : f32 to i32
// TRIG: %[[M:.+]] = arith.ori
// TRIG: arith.mului_extended %[[M]], %c1011060801_i32 : i32
// TRIG-COUNT-5: arith.mului_extended %[[M]], %{{.+}} : i32
// TRIG-NOT: math.sin
// TRIG-NOT: math.cos
// TRIG-NOT: math.tan
// TRIG: return
func.func @trig(%x: f32) -> (f32, f32, f32) {
  %0 = math.sin %x : f32
  %1 = math.cos %x : f32
  %2 = math.tan %x : f32
  return %0, %1, %2 : f32, f32, f32
}
