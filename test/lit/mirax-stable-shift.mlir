// RUN: %mirax-opt %s -split-input-file --convert-mirax-to-linalg --mirax-fuse --mirax-stable-shift | FileCheck %s
// RUN: %mirax-opt %s -split-input-file --convert-mirax-to-linalg --mirax-fuse --mirax-stable-shift --mirax-math-approx "--mirax-fuse-reductions=min-elements=1 threads=2" | FileCheck %s --check-prefix=ROWS

// logsumexp as `mr.logsumexp` traces it: the row max is used only as the shift of
// log(sum(exp(x - m))) + m (through where(isinf(m), 0, m)), so it is marked; the sum
// of exps is not.
// CHECK-LABEL: func.func @logsumexp
// CHECK: linalg.generic
// CHECK-SAME: iterator_types = ["parallel", "reduction"]
// CHECK-SAME: mirax.stable_shift = "log"
// CHECK: arith.maximumf
// CHECK: linalg.generic
// CHECK-NOT: mirax.stable_shift
// CHECK: math.exp
// CHECK-NOT: mirax.stable_shift
// CHECK: return
//
// In the row loop the sum runs first with the max of the row's first chunk as the shift
// (the only column loop outside the branch); the max and the sum over the whole row
// run again only on the branch taken when that sum is not in [0.5, inf).
// ROWS-LABEL: func.func @logsumexp
// ROWS: scf.forall (%[[I:.+]]) in (4)
// ROWS-NOT: scf.for
// ROWS: %[[FIRST:.+]] = vector.transfer_read %arg0[%[[I]], %c0], {{.*}} : tensor<4x2048xf32>, vector<[[W:[0-9]+]]xf32>
// ROWS-NEXT: vector.reduction <maximumf>, %[[FIRST]]
// ROWS-NOT: scf.if
// ROWS: scf.for {{.*}} -> (vector<1x[[W]]xf32>)
// ROWS: math.floor
// ROWS: %[[S:.+]] = vector.reduction <add>, {{.*}} fastmath<reassoc>
// ROWS: %[[LOW:.+]] = arith.cmpf oge, %[[S]], %{{.+}} : f32
// ROWS: %[[HIGH:.+]] = arith.cmpf olt, %[[S]], %{{.+}} : f32
// ROWS: %[[OK:.+]] = arith.andi %[[LOW]], %[[HIGH]] : i1
// ROWS: scf.if %[[OK]] -> (f32, f32) {
// ROWS-NEXT: scf.yield %{{.+}}, %[[S]] : f32, f32
// ROWS-NEXT: } else {
// ROWS: scf.for {{.*}} -> (vector<1x[[W]]xf32>)
// ROWS: arith.maximumf {{.*}} : vector<[[W]]xf32>
// ROWS: scf.for {{.*}} -> (vector<1x[[W]]xf32>)
// ROWS: vector.reduction <add>, {{.*}} fastmath<reassoc>
// ROWS: scf.yield
// ROWS: }
// ROWS-NOT: scf.for
// ROWS: scf.forall.in_parallel
// ROWS-NOT: mirax.
// ROWS: return
func.func @logsumexp(%arg0: tensor<4x2048xf32>) -> tensor<4xf32> {
  %0 = "mirax.max"(%arg0) {axes = array<i64: 1>, keepdims = true} : (tensor<4x2048xf32>) -> tensor<4x1xf32>
  %1 = "mirax.stop_gradient"(%0) : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %2 = "mirax.constant"() {value = dense<0.000000e+00> : tensor<4x1xf32>} : () -> tensor<4x1xf32>
  %3 = "mirax.constant"() {value = dense<0x7F800000> : tensor<4x1xf32>} : () -> tensor<4x1xf32>
  %4 = "mirax.abs"(%1) : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %5 = "mirax.equal"(%4, %3) : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<4x1xi1>
  %6 = "mirax.where"(%5, %2, %1) : (tensor<4x1xi1>, tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %7 = "mirax.broadcast_to"(%6) {shape = array<i64: 4, 2048>} : (tensor<4x1xf32>) -> tensor<4x2048xf32>
  %8 = "mirax.subtract"(%arg0, %7) : (tensor<4x2048xf32>, tensor<4x2048xf32>) -> tensor<4x2048xf32>
  %9 = "mirax.exp"(%8) : (tensor<4x2048xf32>) -> tensor<4x2048xf32>
  %10 = "mirax.sum"(%9) {axes = array<i64: 1>, keepdims = true} : (tensor<4x2048xf32>) -> tensor<4x1xf32>
  %11 = "mirax.log"(%10) : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %12 = "mirax.add"(%11, %6) : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %13 = "mirax.reshape"(%12) {shape = array<i64: 4>} : (tensor<4x1xf32>) -> tensor<4xf32>
  return %13 : tensor<4xf32>
}

// -----

// The sum of exps is also returned: it depends on the shift, so the max is not marked.
// CHECK-LABEL: func.func @sum_also_returned
// CHECK-NOT: mirax.stable_shift
// CHECK: return
// ROWS-LABEL: func.func @sum_also_returned
// ROWS-NOT: scf.if
// ROWS: return
func.func @sum_also_returned(%arg0: tensor<4x2048xf32>) -> (tensor<4x1xf32>, tensor<4x1xf32>) {
  %0 = "mirax.max"(%arg0) {axes = array<i64: 1>, keepdims = true} : (tensor<4x2048xf32>) -> tensor<4x1xf32>
  %1 = "mirax.broadcast_to"(%0) {shape = array<i64: 4, 2048>} : (tensor<4x1xf32>) -> tensor<4x2048xf32>
  %2 = "mirax.subtract"(%arg0, %1) : (tensor<4x2048xf32>, tensor<4x2048xf32>) -> tensor<4x2048xf32>
  %3 = "mirax.exp"(%2) : (tensor<4x2048xf32>) -> tensor<4x2048xf32>
  %4 = "mirax.sum"(%3) {axes = array<i64: 1>, keepdims = true} : (tensor<4x2048xf32>) -> tensor<4x1xf32>
  %5 = "mirax.log"(%4) : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %6 = "mirax.add"(%5, %0) : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  return %6, %4 : tensor<4x1xf32>, tensor<4x1xf32>
}

// -----

// softmax: exp(x - m) / sum(exp(x - m)) does not depend on m either: marked.
// CHECK-LABEL: func.func @softmax
// CHECK: mirax.stable_shift = "ratio"
// CHECK: return
//
// The exps with the first chunk's shift are written into the output's row and summed;
// the branch (a sum not in [0.5, inf)) finds the max and writes the exps and their sum
// again, over the first ones (one row buffer: the output's); the scaling reads the
// branch's row in place.
// ROWS-LABEL: func.func @softmax
// ROWS: scf.forall (%[[I:.+]]) in (4) shared_outs(%[[O:.+]] = %{{.+}})
// ROWS: %[[ROW:.+]] = tensor.extract_slice %[[O]][%[[I]], 0] [1, 2048]
// ROWS-NOT: scf.for
// ROWS: %[[FIRST:.+]] = vector.transfer_read %arg0[%[[I]], %c0], {{.*}} : tensor<4x2048xf32>, vector<[[W:[0-9]+]]xf32>
// ROWS-NEXT: vector.reduction <maximumf>, %[[FIRST]]
// ROWS: %[[E0:.+]] = scf.for {{.*}} iter_args(%{{.+}} = %[[ROW]]) -> (tensor<1x2048xf32>)
// ROWS: scf.for {{.*}} -> (vector<1x[[W]]xf32>)
// ROWS: %[[S:.+]] = vector.reduction <add>, {{.*}} fastmath<reassoc>
// ROWS: scf.if %{{.+}} -> (tensor<1x2048xf32>, f32) {
// ROWS-NEXT: scf.yield %[[E0]], %[[S]]
// ROWS-NEXT: } else {
// ROWS: arith.maximumf {{.*}} : vector<[[W]]xf32>
// ROWS: scf.for {{.*}} iter_args(%{{.+}} = %[[E0]]) -> (tensor<1x2048xf32>)
// ROWS: }
// ROWS-NOT: scf.forall.in_parallel
// ROWS: scf.for {{.*}} -> (tensor<1x2048xf32>)
// ROWS: arith.mulf {{.*}} : vector<[[W]]xf32>
// ROWS: scf.forall.in_parallel
// ROWS-NOT: mirax.
// ROWS: return
func.func @softmax(%arg0: tensor<4x2048xf32>) -> tensor<4x2048xf32> {
  %0 = "mirax.max"(%arg0) {axes = array<i64: 1>, keepdims = true} : (tensor<4x2048xf32>) -> tensor<4x1xf32>
  %1 = "mirax.broadcast_to"(%0) {shape = array<i64: 4, 2048>} : (tensor<4x1xf32>) -> tensor<4x2048xf32>
  %2 = "mirax.subtract"(%arg0, %1) : (tensor<4x2048xf32>, tensor<4x2048xf32>) -> tensor<4x2048xf32>
  %3 = "mirax.exp"(%2) : (tensor<4x2048xf32>) -> tensor<4x2048xf32>
  %4 = "mirax.sum"(%3) {axes = array<i64: 1>, keepdims = true} : (tensor<4x2048xf32>) -> tensor<4x1xf32>
  %5 = "mirax.broadcast_to"(%4) {shape = array<i64: 4, 2048>} : (tensor<4x1xf32>) -> tensor<4x2048xf32>
  %6 = "mirax.divide"(%3, %5) : (tensor<4x2048xf32>, tensor<4x2048xf32>) -> tensor<4x2048xf32>
  return %6 : tensor<4x2048xf32>
}

// -----

// A cross entropy's log-sum-exp minus the label's logit: log(s) + m, then anything.
// CHECK-LABEL: func.func @log_plus_then_more
// CHECK: mirax.stable_shift = "log"
// CHECK: return
func.func @log_plus_then_more(%arg0: tensor<4x2048xf32>, %arg1: tensor<4x1xf32>) -> tensor<4x1xf32> {
  %0 = "mirax.max"(%arg0) {axes = array<i64: 1>, keepdims = true} : (tensor<4x2048xf32>) -> tensor<4x1xf32>
  %1 = "mirax.broadcast_to"(%0) {shape = array<i64: 4, 2048>} : (tensor<4x1xf32>) -> tensor<4x2048xf32>
  %2 = "mirax.subtract"(%arg0, %1) : (tensor<4x2048xf32>, tensor<4x2048xf32>) -> tensor<4x2048xf32>
  %3 = "mirax.exp"(%2) : (tensor<4x2048xf32>) -> tensor<4x2048xf32>
  %4 = "mirax.sum"(%3) {axes = array<i64: 1>, keepdims = true} : (tensor<4x2048xf32>) -> tensor<4x1xf32>
  %5 = "mirax.log"(%4) : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %6 = "mirax.add"(%0, %5) : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %7 = "mirax.subtract"(%6, %arg1) : (tensor<4x1xf32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  return %7 : tensor<4x1xf32>
}

// -----

// The shifted exps are also returned: not marked.
// CHECK-LABEL: func.func @exps_also_returned
// CHECK-NOT: mirax.stable_shift
// CHECK: return
func.func @exps_also_returned(%arg0: tensor<4x2048xf32>) -> (tensor<4x2048xf32>, tensor<4x2048xf32>) {
  %0 = "mirax.max"(%arg0) {axes = array<i64: 1>, keepdims = true} : (tensor<4x2048xf32>) -> tensor<4x1xf32>
  %1 = "mirax.broadcast_to"(%0) {shape = array<i64: 4, 2048>} : (tensor<4x1xf32>) -> tensor<4x2048xf32>
  %2 = "mirax.subtract"(%arg0, %1) : (tensor<4x2048xf32>, tensor<4x2048xf32>) -> tensor<4x2048xf32>
  %3 = "mirax.exp"(%2) : (tensor<4x2048xf32>) -> tensor<4x2048xf32>
  %4 = "mirax.sum"(%3) {axes = array<i64: 1>, keepdims = true} : (tensor<4x2048xf32>) -> tensor<4x1xf32>
  %5 = "mirax.broadcast_to"(%4) {shape = array<i64: 4, 2048>} : (tensor<4x1xf32>) -> tensor<4x2048xf32>
  %6 = "mirax.divide"(%3, %5) : (tensor<4x2048xf32>, tensor<4x2048xf32>) -> tensor<4x2048xf32>
  return %6, %3 : tensor<4x2048xf32>, tensor<4x2048xf32>
}
