// RUN: %mirax-opt %s --mirax-vmap="function=f in-axes=0,none out-axes=1 batch-size=3" | FileCheck %s --check-prefix=NONE
// RUN: %mirax-opt %s --mirax-vmap="function=f batch-size=5" | FileCheck %s --check-prefix=BOTH
// RUN: %mirax-opt %s --mirax-vmap="function=f in-axes=1,0 batch-size=2" | FileCheck %s --check-prefix=AXIS1
// RUN: %mirax-opt %s --mirax-vmap="function=rowsum batch-size=5" | FileCheck %s --check-prefix=SUM
// RUN: %mirax-opt %s --mirax-vmap="function=rowsum in-axes=2 batch-size=5" | FileCheck %s --check-prefix=SUMLAST
// RUN: %mirax-opt %s --mirax-vmap="function=mv in-axes=none,0 batch-size=7" | FileCheck %s --check-prefix=MV
// RUN: %mirax-opt %s --mirax-vmap="function=two in-axes=0,none batch-size=3" | FileCheck %s --check-prefix=TWO
// RUN: %mirax-opt %s --mirax-vmap="function=mm batch-size=5" | FileCheck %s --check-prefix=MM
// RUN: %mirax-opt %s --mirax-vmap="function=tr in-axes=1 batch-size=5" | FileCheck %s --check-prefix=TR
// RUN: %mirax-opt %s --mirax-vmap="function=tk in-axes=none,0 batch-size=7" | FileCheck %s --check-prefix=TAKE
// RUN: %mirax-opt %s --pass-pipeline='builtin.module(mirax-vmap{function=f batch-size=5 result=g},mirax-simplify)' | FileCheck %s --check-prefix=PIPE
// RUN: not %mirax-opt %s --mirax-vmap=function=f 2>&1 | FileCheck %s --check-prefix=NOSIZE
// RUN: not %mirax-opt %s --mirax-vmap="function=f batch-size=0" 2>&1 | FileCheck %s --check-prefix=NOSIZE
// RUN: not %mirax-opt %s --mirax-vmap="function=f in-axes=0,0,0 batch-size=2" 2>&1 | FileCheck %s --check-prefix=COUNT
// RUN: not %mirax-opt %s --mirax-vmap="function=f in-axes=2,0 batch-size=2" 2>&1 | FileCheck %s --check-prefix=AXRANGE
// RUN: not %mirax-opt %s --mirax-vmap="function=nope batch-size=2" 2>&1 | FileCheck %s --check-prefix=UNKNOWN

// @<f>_vmap takes each argument with a batch axis of batch-size at its in-axis (or
// unchanged for `none`) and returns each result with the batch axis at its out-axis.
// Every op is batched by its primitive's rule: no per-example loop. Each RUN line maps
// one function; the original function stays as it was.

// in-axes=0,none out-axes=1: y is broadcast to the batch, the result transposed so the
// batch is its last axis.
// NONE-LABEL: func.func @f(
// NONE-SAME: %[[X:[^:]+]]: tensor<4xf32>, %[[Y:[^:]+]]: tensor<4xf32>) -> tensor<4xf32>
// NONE-NEXT: %[[S:.+]] = "mirax.sin"(%[[X]]) : (tensor<4xf32>) -> tensor<4xf32>
// NONE-NEXT: %[[M:.+]] = "mirax.multiply"(%[[S]], %[[Y]]) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// NONE-NEXT: return %[[M]]
// NONE-LABEL: func.func @f_vmap(
// NONE-SAME: %[[X:[^:]+]]: tensor<3x4xf32>, %[[Y:[^:]+]]: tensor<4xf32>) -> tensor<4x3xf32>
// NONE-DAG: %[[Y1:.+]] = "mirax.reshape"(%[[Y]]) {shape = array<i64: 1, 4>}
// NONE-DAG: %[[YB:.+]] = "mirax.broadcast_to"(%[[Y1]]) {shape = array<i64: 3, 4>} : (tensor<1x4xf32>) -> tensor<3x4xf32>
// NONE-DAG: %[[S:.+]] = "mirax.sin"(%[[X]]) : (tensor<3x4xf32>) -> tensor<3x4xf32>
// NONE-DAG: %[[M:.+]] = "mirax.multiply"(%[[S]], %[[YB]]) : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// NONE-DAG: %[[T:.+]] = "mirax.transpose"(%[[M]]) {permutation = array<i64: 1, 0>} : (tensor<3x4xf32>) -> tensor<4x3xf32>
// NONE: return %[[T]] : tensor<4x3xf32>

// Default in-axes=0 applies to every argument, default out-axes=0: the same ops on
// bigger tensors.
// BOTH-LABEL: func.func @f_vmap(
// BOTH-SAME: %[[X:[^:]+]]: tensor<5x4xf32>, %[[Y:[^:]+]]: tensor<5x4xf32>) -> tensor<5x4xf32>
// BOTH-NEXT: %[[S:.+]] = "mirax.sin"(%[[X]]) : (tensor<5x4xf32>) -> tensor<5x4xf32>
// BOTH-NEXT: %[[M:.+]] = "mirax.multiply"(%[[S]], %[[Y]]) : (tensor<5x4xf32>, tensor<5x4xf32>) -> tensor<5x4xf32>
// BOTH-NEXT: return %[[M]] : tensor<5x4xf32>

// in-axes=1,0: the batch axes are aligned (to the front) before the multiply.
// AXIS1-LABEL: func.func @f_vmap(
// AXIS1-SAME: %[[X:[^:]+]]: tensor<4x2xf32>, %[[Y:[^:]+]]: tensor<2x4xf32>) -> tensor<2x4xf32>
// AXIS1-DAG: %[[XT:.+]] = "mirax.transpose"(%[[X]]) {permutation = array<i64: 1, 0>} : (tensor<4x2xf32>) -> tensor<2x4xf32>
// AXIS1-DAG: %[[S:.+]] = "mirax.sin"(%[[XT]])
// AXIS1-DAG: %[[M:.+]] = "mirax.multiply"(%[[S]], %[[Y]])
// AXIS1: return %[[M]] : tensor<2x4xf32>
func.func @f(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "mirax.sin"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "mirax.multiply"(%0, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}

// A reduction's axes shift past the batch axis.
// SUM-LABEL: func.func @rowsum_vmap(
// SUM-SAME: %[[X:[^:]+]]: tensor<5x2x3xf32>) -> tensor<5x3xf32>
// SUM-NEXT: %[[R:.+]] = "mirax.sum"(%[[X]]) {axes = array<i64: 1>, keepdims = false} : (tensor<5x2x3xf32>) -> tensor<5x3xf32>
// SUM-NEXT: return %[[R]]

// SUMLAST-LABEL: func.func @rowsum_vmap(
// SUMLAST-SAME: %[[X:[^:]+]]: tensor<2x3x5xf32>) -> tensor<5x3xf32>
// SUMLAST: "mirax.sum"
// SUMLAST-SAME: -> tensor<5x3xf32>
// SUMLAST: return %{{.+}} : tensor<5x3xf32>
func.func @rowsum(%x: tensor<2x3xf32>) -> tensor<3xf32> {
  %0 = "mirax.sum"(%x) {axes = array<i64: 0>, keepdims = false} : (tensor<2x3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// A shared matrix times a batch of vectors stays one matmul.
// MV-LABEL: func.func @mv_vmap(
// MV-SAME: %[[M:[^:]+]]: tensor<2x3xf32>, %[[V:[^:]+]]: tensor<7x3x1xf32>) -> tensor<7x2x1xf32>
// MV-COUNT-1: "mirax.matmul"
// MV-NOT: "mirax.matmul"
// MV: return %{{.+}} : tensor<7x2x1xf32>
func.func @mv(%m: tensor<2x3xf32>, %v: tensor<3x1xf32>) -> tensor<2x1xf32> {
  %0 = "mirax.matmul"(%m, %v) : (tensor<2x3xf32>, tensor<3x1xf32>) -> tensor<2x1xf32>
  return %0 : tensor<2x1xf32>
}

// Both matmul operands batched: one batched matmul.
// MM-LABEL: func.func @mm_vmap(
// MM-SAME: %[[A:[^:]+]]: tensor<5x2x3xf32>, %[[B:[^:]+]]: tensor<5x3x4xf32>) -> tensor<5x2x4xf32>
// MM-NEXT: %[[Y:.+]] = "mirax.matmul"(%[[A]], %[[B]]) : (tensor<5x2x3xf32>, tensor<5x3x4xf32>) -> tensor<5x2x4xf32>
// MM-NEXT: return %[[Y]]
func.func @mm(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) -> tensor<2x4xf32> {
  %0 = "mirax.matmul"(%a, %b) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// A transpose keeps the batch axis in front; in-axes=1 first moves it there.
// TR-LABEL: func.func @tr_vmap(
// TR-SAME: %[[X:[^:]+]]: tensor<2x5x3x4xf32>) -> tensor<5x4x2x3xf32>
// TR: "mirax.transpose"{{.*}} -> tensor<5x4x2x3xf32>
// TR-NEXT: return
func.func @tr(%x: tensor<2x3x4xf32>) -> tensor<4x2x3xf32> {
  %0 = "mirax.transpose"(%x) {permutation = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  return %0 : tensor<4x2x3xf32>
}

// Batched indices into a shared table: one take with a batched index tensor.
// TAKE-LABEL: func.func @tk_vmap(
// TAKE-SAME: %[[X:[^:]+]]: tensor<4x6xf32>, %[[I:[^:]+]]: tensor<7x2xi32>) -> tensor<7x2x6xf32>
// TAKE-NEXT: %[[Y:.+]] = "mirax.take"(%[[X]], %[[I]]) {axis = 0 : i64} : (tensor<4x6xf32>, tensor<7x2xi32>) -> tensor<7x2x6xf32>
// TAKE-NEXT: return %[[Y]]
func.func @tk(%x: tensor<4x6xf32>, %i: tensor<2xi32>) -> tensor<2x6xf32> {
  %0 = "mirax.take"(%x, %i) {axis = 0 : i64} : (tensor<4x6xf32>, tensor<2xi32>) -> tensor<2x6xf32>
  return %0 : tensor<2x6xf32>
}

// A result that depends only on unbatched arguments is broadcast to the batch.
// TWO-LABEL: func.func @two_vmap(
// TWO-SAME: %[[X:[^:]+]]: tensor<3x4xf32>, %[[Y:[^:]+]]: tensor<4xf32>) -> (tensor<3x4xf32>, tensor<3x4xf32>)
// TWO-DAG: %[[EY:.+]] = "mirax.exp"(%[[Y]]) : (tensor<4xf32>) -> tensor<4xf32>
// TWO-DAG: %[[EY1:.+]] = "mirax.reshape"(%[[EY]])
// TWO-DAG: %[[EYB:.+]] = "mirax.broadcast_to"(%[[EY1]]) {shape = array<i64: 3, 4>}
// TWO-DAG: %[[EX:.+]] = "mirax.exp"(%[[X]]) : (tensor<3x4xf32>) -> tensor<3x4xf32>
// TWO: return %[[EX]], %[[EYB]]
func.func @two(%x: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = "mirax.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "mirax.exp"(%y) : (tensor<4xf32>) -> tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// result= names the new function; it composes with other passes in a pipeline.
// PIPE-LABEL: func.func @f(
// PIPE-LABEL: func.func @g(
// PIPE-SAME: tensor<5x4xf32>, %{{[^:]+}}: tensor<5x4xf32>) -> tensor<5x4xf32>

// NOSIZE: error: {{.*}}mirax-vmap: needs batch-size=<n> (a positive size)
// COUNT: error: {{.*}}mirax-vmap: 3 in-axes for @f with 2 arguments
// AXRANGE: error: {{.*}}mirax-vmap: in-axis 2 out of range for an argument of shape (4,)
// UNKNOWN: error: {{.*}}no function @nope in the module
