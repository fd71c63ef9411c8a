// RUN: %mirax-opt %s -split-input-file --convert-mirax-to-linalg --mirax-fuse | FileCheck %s

// gelu as `mr.trace` writes it: the constants' broadcasts, the divisions and erf fuse
// into ONE linalg.generic that reads x once.
// CHECK-LABEL: func.func @gelu
// CHECK-SAME: (%[[X:.+]]: tensor<4x8xf32>)
// CHECK: %[[G:.+]] = linalg.generic
// CHECK-SAME: ins(%[[X]] : tensor<4x8xf32>)
// CHECK: math.erf
// CHECK: linalg.yield
// CHECK-NOT: linalg.generic
// CHECK: return %[[G]]
func.func @gelu(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = "mirax.constant"() {value = dense<2.000000e+00> : tensor<f32>} : () -> tensor<f32>
  %1 = "mirax.broadcast_to"(%0) {shape = array<i64: 4, 8>} : (tensor<f32>) -> tensor<4x8xf32>
  %2 = "mirax.constant"() {value = dense<1.41421354> : tensor<f32>} : () -> tensor<f32>
  %3 = "mirax.broadcast_to"(%2) {shape = array<i64: 4, 8>} : (tensor<f32>) -> tensor<4x8xf32>
  %4 = "mirax.divide"(%arg0, %3) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %5 = "mirax.erf"(%4) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %6 = "mirax.constant"() {value = dense<1.000000e+00> : tensor<f32>} : () -> tensor<f32>
  %7 = "mirax.broadcast_to"(%6) {shape = array<i64: 4, 8>} : (tensor<f32>) -> tensor<4x8xf32>
  %8 = "mirax.add"(%7, %5) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %9 = "mirax.multiply"(%arg0, %8) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %10 = "mirax.divide"(%9, %1) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %10 : tensor<4x8xf32>
}

// -----

// A row broadcast fuses too: x - max(x) keeps the reduction, then one generic for the
// broadcast subtraction and exp reading the row maxima through a projected map.
// CHECK-LABEL: func.func @sub_max_exp
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]
// CHECK: %[[E:.+]] = linalg.generic {indexing_maps = [#{{.+}}, #{{.+}}, #{{.+}}], iterator_types = ["parallel", "parallel"]}
// CHECK: math.exp
// CHECK-NOT: linalg.generic
// CHECK: return %[[E]]
func.func @sub_max_exp(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = "mirax.max"(%arg0) {axes = array<i64: 1>, keepdims = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %2 = "mirax.broadcast_to"(%0) {shape = array<i64: 4, 8>} : (tensor<4x1xf32>) -> tensor<4x8xf32>
  %3 = "mirax.subtract"(%arg0, %2) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = "mirax.exp"(%3) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %4 : tensor<4x8xf32>
}

// -----

// Fused bodies stay bounded (max-fused-ops; 256 by default): upstream fusion copies the
// growing body at every step, so one kernel for a chain of n ops would cost O(n^2) to
// build. Here, at most 4 body ops: the chain of six exps (each body: exp + yield) is cut
// into kernels of one or two exps; the cut value is materialized between them.
// RUN: %mirax-opt %s -split-input-file --convert-mirax-to-linalg --mirax-fuse="max-fused-ops=4" | FileCheck %s --check-prefix=BOUND
// BOUND-LABEL: func.func @long_chain
// BOUND-COUNT-3: linalg.generic
// BOUND-NOT: linalg.generic
// BOUND-NOT: tensor.cast
// BOUND: return
func.func @long_chain(%arg0: tensor<16xf32>) -> tensor<16xf32> {
  %0 = "mirax.exp"(%arg0) : (tensor<16xf32>) -> tensor<16xf32>
  %1 = "mirax.exp"(%0) : (tensor<16xf32>) -> tensor<16xf32>
  %2 = "mirax.exp"(%1) : (tensor<16xf32>) -> tensor<16xf32>
  %3 = "mirax.exp"(%2) : (tensor<16xf32>) -> tensor<16xf32>
  %4 = "mirax.exp"(%3) : (tensor<16xf32>) -> tensor<16xf32>
  %5 = "mirax.exp"(%4) : (tensor<16xf32>) -> tensor<16xf32>
  return %5 : tensor<16xf32>
}
