// RUN: %mirax-opt %s -split-input-file --mirax-simplify | FileCheck %s
// RUN: %mirax-opt %s -split-input-file --mirax-simplify="max-iterations=1" | FileCheck %s --check-prefix=ONE

// CHECK-LABEL: func.func @cse
// CHECK-SAME: (%[[A:.+]]: tensor<4xf32>, %[[B:.+]]: tensor<4xf32>)
// CHECK: %[[S:.+]] = "mirax.add"(%[[A]], %[[B]])
// CHECK-NOT: "mirax.add"
// CHECK: %[[M:.+]] = "mirax.multiply"(%[[S]], %[[S]])
// CHECK: return %[[M]]
func.func @cse(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "mirax.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "mirax.add"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = "mirax.multiply"(%0, %1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}

// -----

// Operand order and attributes are part of an op's identity.
// CHECK-LABEL: func.func @no_cse_different
// CHECK-SAME: (%[[A:.+]]: tensor<2x2xf32>, %[[B:.+]]: tensor<2x2xf32>)
// CHECK: "mirax.subtract"(%[[A]], %[[B]])
// CHECK: "mirax.subtract"(%[[B]], %[[A]])
// CHECK: "mirax.sum"(%{{.+}}) {axes = array<i64: 0>
// CHECK: "mirax.sum"(%{{.+}}) {axes = array<i64: 1>
func.func @no_cse_different(%a: tensor<2x2xf32>, %b: tensor<2x2xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2xf32>, tensor<2xf32>) {
  %0 = "mirax.subtract"(%a, %b) : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %1 = "mirax.subtract"(%b, %a) : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %2 = "mirax.sum"(%a) {axes = array<i64: 0>, keepdims = false} : (tensor<2x2xf32>) -> tensor<2xf32>
  %3 = "mirax.sum"(%a) {axes = array<i64: 1>, keepdims = false} : (tensor<2x2xf32>) -> tensor<2xf32>
  return %0, %1, %2, %3 : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2xf32>, tensor<2xf32>
}

// -----

// CHECK-LABEL: func.func @dce
// CHECK-SAME: (%[[A:.+]]: tensor<4xf32>)
// CHECK-NOT: mirax.exp
// CHECK-NOT: mirax.log
// CHECK: return %[[A]]
func.func @dce(%a: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "mirax.exp"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "mirax.log"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %a : tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @same_type_identities
// CHECK-SAME: (%[[A:.+]]: tensor<2x3xf32>)
// CHECK-NOT: mirax.
// CHECK: return %[[A]], %[[A]], %[[A]], %[[A]]
func.func @same_type_identities(%a: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
  %0 = "mirax.reshape"(%a) {shape = array<i64: 2, 3>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %1 = "mirax.broadcast_to"(%a) {shape = array<i64: 2, 3>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %2 = "mirax.transpose"(%a) {permutation = array<i64: 0, 1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = "mirax.astype"(%a) {dtype = f32} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0, %1, %2, %3 : tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
}

// -----

// A transpose of a square matrix keeps its type but is not the identity.
// CHECK-LABEL: func.func @square_transpose_kept
// CHECK: "mirax.transpose"
func.func @square_transpose_kept(%a: tensor<2x2xf32>) -> tensor<2x2xf32> {
  %0 = "mirax.transpose"(%a) {permutation = array<i64: 1, 0>} : (tensor<2x2xf32>) -> tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}

// -----

// CHECK-LABEL: func.func @transpose_of_transpose
// CHECK-SAME: (%[[A:.+]]: tensor<2x3x4xf32>)
// CHECK: %[[T:.+]] = "mirax.transpose"(%[[A]]) {permutation = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
// CHECK-NOT: "mirax.transpose"
// CHECK: return %[[T]], %[[A]]
func.func @transpose_of_transpose(%a: tensor<2x3x4xf32>) -> (tensor<4x2x3xf32>, tensor<2x3x4xf32>) {
  %0 = "mirax.transpose"(%a) {permutation = array<i64: 1, 2, 0>} : (tensor<2x3x4xf32>) -> tensor<3x4x2xf32>
  %1 = "mirax.transpose"(%0) {permutation = array<i64: 1, 2, 0>} : (tensor<3x4x2xf32>) -> tensor<4x2x3xf32>
  %2 = "mirax.transpose"(%0) {permutation = array<i64: 2, 0, 1>} : (tensor<3x4x2xf32>) -> tensor<2x3x4xf32>
  return %1, %2 : tensor<4x2x3xf32>, tensor<2x3x4xf32>
}

// -----

// x + 0 and x * 1 for integers; for floats x * 1 and x + (-0.0), but not x + 0.0
// (-0.0 + 0.0 is +0.0).
// CHECK-LABEL: func.func @algebra
// CHECK-SAME: (%[[I:.+]]: tensor<4xi32>, %[[F:.+]]: tensor<4xf32>)
// CHECK: %[[Z:.+]] = "mirax.constant"() {value = dense<0.000000e+00> : tensor<4xf32>}
// CHECK: %[[K:.+]] = "mirax.add"(%[[F]], %[[Z]])
// CHECK: return %[[I]], %[[I]], %[[F]], %[[F]], %[[K]]
func.func @algebra(%i: tensor<4xi32>, %f: tensor<4xf32>) -> (tensor<4xi32>, tensor<4xi32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %zi = "mirax.constant"() {value = dense<0> : tensor<4xi32>} : () -> tensor<4xi32>
  %oi = "mirax.constant"() {value = dense<1> : tensor<4xi32>} : () -> tensor<4xi32>
  %of = "mirax.constant"() {value = dense<1.0> : tensor<4xf32>} : () -> tensor<4xf32>
  %nz = "mirax.constant"() {value = dense<-0.0> : tensor<4xf32>} : () -> tensor<4xf32>
  %pz = "mirax.constant"() {value = dense<0.0> : tensor<4xf32>} : () -> tensor<4xf32>
  %0 = "mirax.add"(%zi, %i) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %1 = "mirax.multiply"(%i, %oi) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  %2 = "mirax.multiply"(%of, %f) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %3 = "mirax.add"(%f, %nz) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %4 = "mirax.add"(%f, %pz) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0, %1, %2, %3, %4 : tensor<4xi32>, tensor<4xi32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// Constants fold: through the primitives' numpy references where those are exact
// (arange, multiply, add, greater, logical_and here), else mirax's own CPU kernels.
// CHECK-LABEL: func.func @fold
// CHECK-NEXT: %[[C:.+]] = "mirax.constant"() {value = dense<[2.000000e+00, 5.000000e+00, 1.000000e+01]> : tensor<3xf32>} : () -> tensor<3xf32>
// CHECK-NEXT: %[[B:.+]] = "mirax.constant"() {value = dense<[false, true, true]> : tensor<3xi1>} : () -> tensor<3xi1>
// CHECK-NEXT: return %[[C]], %[[B]]
func.func @fold() -> (tensor<3xf32>, tensor<3xi1>) {
  %0 = "mirax.arange"() {start = 1.0 : f64, step = 1.0 : f64} : () -> tensor<3xf32>
  %1 = "mirax.multiply"(%0, %0) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %one = "mirax.constant"() {value = dense<1.0> : tensor<3xf32>} : () -> tensor<3xf32>
  %2 = "mirax.add"(%1, %one) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %3 = "mirax.greater"(%2, %0) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xi1>
  %4 = "mirax.constant"() {value = dense<[false, true, true]> : tensor<3xi1>} : () -> tensor<3xi1>
  %5 = "mirax.logical_and"(%3, %4) : (tensor<3xi1>, tensor<3xi1>) -> tensor<3xi1>
  return %2, %5 : tensor<3xf32>, tensor<3xi1>
}

// -----

// Large results are not folded; stop_gradient is never removed.
// CHECK-LABEL: func.func @no_fold
// CHECK: "mirax.exp"
// CHECK: "mirax.stop_gradient"
func.func @no_fold() -> (tensor<2048xf32>, tensor<2xf32>) {
  %0 = "mirax.constant"() {value = dense<1.0> : tensor<2048xf32>} : () -> tensor<2048xf32>
  %1 = "mirax.exp"(%0) : (tensor<2048xf32>) -> tensor<2048xf32>
  %2 = "mirax.constant"() {value = dense<1.0> : tensor<2xf32>} : () -> tensor<2xf32>
  %3 = "mirax.stop_gradient"(%2) : (tensor<2xf32>) -> tensor<2xf32>
  return %1, %3 : tensor<2048xf32>, tensor<2xf32>
}

// -----

// Division by a float splat constant, or a broadcast of one, is multiplication by its
// reciprocal (XLA's rewrite: a vector division costs 8-16 multiplications on x86);
// division by 0 and reciprocals that are not normal numbers stay divisions.
// CHECK-LABEL: func.func @reciprocal
// CHECK-SAME: (%[[X:.+]]: tensor<2048xf32>)
// CHECK: %[[H:.+]] = "mirax.constant"() {value = dense<5.000000e-01> : tensor<2048xf32>}
// CHECK: "mirax.multiply"(%[[X]], %[[H]])
// CHECK: %[[T:.+]] = "mirax.constant"() {value = dense<0.333333343> : tensor<f32>}
// CHECK: %[[B:.+]] = "mirax.broadcast_to"(%[[T]]) {shape = array<i64: 2048>}
// CHECK: "mirax.multiply"(%[[X]], %[[B]])
// CHECK: "mirax.divide"
// CHECK: "mirax.divide"
// CHECK-NOT: "mirax.multiply"
// CHECK: return
func.func @reciprocal(%x: tensor<2048xf32>) -> (tensor<2048xf32>, tensor<2048xf32>, tensor<2048xf32>, tensor<2048xf32>) {
  %two = "mirax.constant"() {value = dense<2.0> : tensor<2048xf32>} : () -> tensor<2048xf32>
  %0 = "mirax.divide"(%x, %two) : (tensor<2048xf32>, tensor<2048xf32>) -> tensor<2048xf32>
  %three = "mirax.constant"() {value = dense<3.0> : tensor<f32>} : () -> tensor<f32>
  %b = "mirax.broadcast_to"(%three) {shape = array<i64: 2048>} : (tensor<f32>) -> tensor<2048xf32>
  %1 = "mirax.divide"(%x, %b) : (tensor<2048xf32>, tensor<2048xf32>) -> tensor<2048xf32>
  %zero = "mirax.constant"() {value = dense<0.0> : tensor<2048xf32>} : () -> tensor<2048xf32>
  %2 = "mirax.divide"(%x, %zero) : (tensor<2048xf32>, tensor<2048xf32>) -> tensor<2048xf32>
  %big = "mirax.constant"() {value = dense<1.0e38> : tensor<2048xf32>} : () -> tensor<2048xf32>
  %3 = "mirax.divide"(%x, %big) : (tensor<2048xf32>, tensor<2048xf32>) -> tensor<2048xf32>
  return %0, %1, %2, %3 : tensor<2048xf32>, tensor<2048xf32>, tensor<2048xf32>, tensor<2048xf32>
}

// -----

// x ** 2 is x * x and x ** 1 is x (both exact: XLA rewrites them alike); other exponents,
// and a power whose result is not the base's type, stay powers.
// CHECK-LABEL: func.func @power
// CHECK-SAME: (%[[X:.+]]: tensor<2048xf32>, %[[I:.+]]: tensor<8xi32>)
// CHECK: %[[SQ:.+]] = "mirax.multiply"(%[[X]], %[[X]])
// CHECK: %[[ISQ:.+]] = "mirax.multiply"(%[[I]], %[[I]])
// CHECK: %[[CUBE:.+]] = "mirax.power"(%[[X]], %{{.+}})
// CHECK: return %[[SQ]], %[[X]], %[[ISQ]], %[[CUBE]]
func.func @power(%x: tensor<2048xf32>, %i: tensor<8xi32>) -> (tensor<2048xf32>, tensor<2048xf32>, tensor<8xi32>, tensor<2048xf32>) {
  %two = "mirax.constant"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %b2 = "mirax.broadcast_to"(%two) {shape = array<i64: 2048>} : (tensor<f32>) -> tensor<2048xf32>
  %0 = "mirax.power"(%x, %b2) : (tensor<2048xf32>, tensor<2048xf32>) -> tensor<2048xf32>
  %one = "mirax.constant"() {value = dense<1.0> : tensor<2048xf32>} : () -> tensor<2048xf32>
  %1 = "mirax.power"(%x, %one) : (tensor<2048xf32>, tensor<2048xf32>) -> tensor<2048xf32>
  %itwo = "mirax.constant"() {value = dense<2> : tensor<8xi32>} : () -> tensor<8xi32>
  %2 = "mirax.power"(%i, %itwo) : (tensor<8xi32>, tensor<8xi32>) -> tensor<8xi32>
  %three = "mirax.constant"() {value = dense<3.0> : tensor<2048xf32>} : () -> tensor<2048xf32>
  %3 = "mirax.power"(%x, %three) : (tensor<2048xf32>, tensor<2048xf32>) -> tensor<2048xf32>
  return %0, %1, %2, %3 : tensor<2048xf32>, tensor<2048xf32>, tensor<8xi32>, tensor<2048xf32>
}

// -----

// A transposed product with a transposed operand, (x.T @ g).T (the weight gradient of
// x @ W.T), becomes g.T @ x: the product in the weight's layout, one transpose fewer.
// CHECK-LABEL: func.func @transposed_product
// CHECK-SAME: (%[[X:.+]]: tensor<4x3xf32>, %[[G:.+]]: tensor<4x5xf32>, %[[A:.+]]: tensor<2x3x4xf32>, %[[B:.+]]: tensor<2x5x4xf32>)
// CHECK-NEXT: %[[GT:.+]] = "mirax.transpose"(%[[G]]) {permutation = array<i64: 1, 0>} : (tensor<4x5xf32>) -> tensor<5x4xf32>
// CHECK-NEXT: %[[P:.+]] = "mirax.matmul"(%[[GT]], %[[X]]) : (tensor<5x4xf32>, tensor<4x3xf32>) -> tensor<5x3xf32>
// CHECK-NEXT: %[[AT:.+]] = "mirax.transpose"(%[[A]]) {permutation = array<i64: 0, 2, 1>} : (tensor<2x3x4xf32>) -> tensor<2x4x3xf32>
// CHECK-NEXT: %[[Q:.+]] = "mirax.matmul"(%[[B]], %[[AT]]) : (tensor<2x5x4xf32>, tensor<2x4x3xf32>) -> tensor<2x5x3xf32>
// CHECK-NEXT: return %[[P]], %[[Q]]
func.func @transposed_product(%x: tensor<4x3xf32>, %g: tensor<4x5xf32>, %a: tensor<2x3x4xf32>, %b: tensor<2x5x4xf32>) -> (tensor<5x3xf32>, tensor<2x5x3xf32>) {
  %0 = "mirax.transpose"(%x) {permutation = array<i64: 1, 0>} : (tensor<4x3xf32>) -> tensor<3x4xf32>
  %1 = "mirax.matmul"(%0, %g) : (tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
  %2 = "mirax.transpose"(%1) {permutation = array<i64: 1, 0>} : (tensor<3x5xf32>) -> tensor<5x3xf32>
  %3 = "mirax.transpose"(%b) {permutation = array<i64: 0, 2, 1>} : (tensor<2x5x4xf32>) -> tensor<2x4x5xf32>
  %4 = "mirax.matmul"(%a, %3) : (tensor<2x3x4xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>
  %5 = "mirax.transpose"(%4) {permutation = array<i64: 0, 2, 1>} : (tensor<2x3x5xf32>) -> tensor<2x5x3xf32>
  return %2, %5 : tensor<5x3xf32>, tensor<2x5x3xf32>
}

// -----

// Kept: a transposed product of plain operands (it would need two transposes for one),
// one whose product has another use, one transposed over a batch dim.
// CHECK-LABEL: func.func @transposed_product_kept
// CHECK-COUNT-3: "mirax.matmul"
// CHECK-NOT: "mirax.matmul"
func.func @transposed_product_kept(%x: tensor<3x4xf32>, %g: tensor<4x5xf32>, %y: tensor<4x3xf32>, %a: tensor<2x3x4xf32>, %b: tensor<2x3x5xf32>) -> (tensor<5x3xf32>, tensor<5x3xf32>, tensor<3x5xf32>, tensor<4x2x5xf32>) {
  %0 = "mirax.matmul"(%x, %g) : (tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
  %1 = "mirax.transpose"(%0) {permutation = array<i64: 1, 0>} : (tensor<3x5xf32>) -> tensor<5x3xf32>
  %2 = "mirax.transpose"(%y) {permutation = array<i64: 1, 0>} : (tensor<4x3xf32>) -> tensor<3x4xf32>
  %3 = "mirax.matmul"(%2, %g) : (tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
  %4 = "mirax.transpose"(%3) {permutation = array<i64: 1, 0>} : (tensor<3x5xf32>) -> tensor<5x3xf32>
  %5 = "mirax.transpose"(%a) {permutation = array<i64: 0, 2, 1>} : (tensor<2x3x4xf32>) -> tensor<2x4x3xf32>
  %6 = "mirax.matmul"(%5, %b) : (tensor<2x4x3xf32>, tensor<2x3x5xf32>) -> tensor<2x4x5xf32>
  %7 = "mirax.transpose"(%6) {permutation = array<i64: 1, 0, 2>} : (tensor<2x4x5xf32>) -> tensor<4x2x5xf32>
  return %1, %4, %3, %7 : tensor<5x3xf32>, tensor<5x3xf32>, tensor<3x5xf32>, tensor<4x2x5xf32>
}

// -----

// x > y beside maximum(x, y) reads the maximum (relu's gradient mask from relu's output);
// x < y likewise beside minimum(x, y); y > x is max(x, y) > x.
// CHECK-LABEL: func.func @won
// CHECK-SAME: (%[[X:.+]]: tensor<4xf32>, %[[Y:.+]]: tensor<4xf32>)
// CHECK-NEXT: %[[M:.+]] = "mirax.maximum"(%[[X]], %[[Y]])
// CHECK-NEXT: %[[G:.+]] = "mirax.greater"(%[[M]], %[[Y]])
// CHECK-NEXT: %[[N:.+]] = "mirax.minimum"(%[[Y]], %[[X]])
// CHECK-NEXT: %[[L:.+]] = "mirax.less"(%[[N]], %[[Y]])
// CHECK-NEXT: %[[K:.+]] = "mirax.greater"(%[[M]], %[[X]])
// CHECK-NEXT: return %[[M]], %[[G]], %[[N]], %[[L]], %[[K]]
func.func @won(%x: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xi1>, tensor<4xf32>, tensor<4xi1>, tensor<4xi1>) {
  %0 = "mirax.maximum"(%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "mirax.greater"(%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %2 = "mirax.minimum"(%y, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %3 = "mirax.less"(%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %4 = "mirax.greater"(%y, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  return %0, %1, %2, %3, %4 : tensor<4xf32>, tensor<4xi1>, tensor<4xf32>, tensor<4xi1>, tensor<4xi1>
}

// -----

// Kept: a comparison before its extreme, one beside the other extreme.
// CHECK-LABEL: func.func @won_kept
// CHECK-NEXT: "mirax.greater"(%arg0, %arg1)
// CHECK-NEXT: "mirax.maximum"(%arg0, %arg1)
// CHECK-NEXT: "mirax.less"(%arg0, %arg1)
func.func @won_kept(%x: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<4xi1>, tensor<4xf32>, tensor<4xi1>) {
  %0 = "mirax.greater"(%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %1 = "mirax.maximum"(%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = "mirax.less"(%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  return %0, %1, %2 : tensor<4xi1>, tensor<4xf32>, tensor<4xi1>
}

// -----

// Complex constants (attributes the Python bindings cannot wrap: compared by their text):
// equal ones merged, a different one kept.
// CHECK-LABEL: func.func @complex_constants
// CHECK-NEXT: %[[A:.+]] = "mirax.constant"() {value = dense<(1.000000e+00,2.000000e+00)> : tensor<2xcomplex<f32>>}
// CHECK-NEXT: %[[C:.+]] = "mirax.constant"() {value = dense<(3.000000e+00,2.000000e+00)> : tensor<2xcomplex<f32>>}
// CHECK-NEXT: %[[S0:.+]] = "mirax.add"(%arg0, %[[A]])
// CHECK-NEXT: %[[S1:.+]] = "mirax.add"(%[[S0]], %[[A]])
// CHECK-NEXT: "mirax.add"(%[[S1]], %[[C]])
func.func @complex_constants(%x: tensor<2xcomplex<f32>>) -> tensor<2xcomplex<f32>> {
  %a = "mirax.constant"() {value = dense<(1.000000e+00,2.000000e+00)> : tensor<2xcomplex<f32>>} : () -> tensor<2xcomplex<f32>>
  %b = "mirax.constant"() {value = dense<(1.000000e+00,2.000000e+00)> : tensor<2xcomplex<f32>>} : () -> tensor<2xcomplex<f32>>
  %c = "mirax.constant"() {value = dense<(3.000000e+00,2.000000e+00)> : tensor<2xcomplex<f32>>} : () -> tensor<2xcomplex<f32>>
  %0 = "mirax.add"(%x, %a) : (tensor<2xcomplex<f32>>, tensor<2xcomplex<f32>>) -> tensor<2xcomplex<f32>>
  %1 = "mirax.add"(%0, %b) : (tensor<2xcomplex<f32>>, tensor<2xcomplex<f32>>) -> tensor<2xcomplex<f32>>
  %2 = "mirax.add"(%1, %c) : (tensor<2xcomplex<f32>>, tensor<2xcomplex<f32>>) -> tensor<2xcomplex<f32>>
  return %2 : tensor<2xcomplex<f32>>
}

// -----

// A rule's new op is simplified at once: the constant a broadcast folds to merges with an
// equal one and the products reading them become one, in a single sweep.
// CHECK-LABEL: func.func @folds_settle_in_one_sweep
// ONE-LABEL: func.func @folds_settle_in_one_sweep
// ONE-NEXT: %[[C:.+]] = "mirax.constant"() {value = dense<2.000000e+00> : tensor<4xf32>}
// ONE-NEXT: %[[M:.+]] = "mirax.multiply"(%arg0, %[[C]])
// ONE-NEXT: return %[[M]], %[[M]]
func.func @folds_settle_in_one_sweep(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %c2 = "mirax.constant"() {value = dense<2.000000e+00> : tensor<4xf32>} : () -> tensor<4xf32>
  %s = "mirax.constant"() {value = dense<2.000000e+00> : tensor<f32>} : () -> tensor<f32>
  %b = "mirax.broadcast_to"(%s) {shape = array<i64: 4>} : (tensor<f32>) -> tensor<4xf32>
  %m1 = "mirax.multiply"(%x, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %m2 = "mirax.multiply"(%x, %c2) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %m1, %m2 : tensor<4xf32>, tensor<4xf32>
}
