// RUN: mirax-opt %s --mirax-grad="function=main value=true" | FileCheck %s
// RUN: mirax-opt %s --mirax-grad=function=main --mirax-cpu-pipeline | FileCheck %s --check-prefix=LLVM

// A checkpointed block is a func.call of a private function marked mirax.checkpoint.
// Reverse mode keeps only its inputs and outputs and re-runs its body in the backward
// pass: the gradient function computes sin twice (forward, and recomputed on its input
// passed through an optimization barrier after the cotangent, which no CSE can merge).

func.func private @checkpoint_0(%arg0: tensor<3xf32>) -> tensor<3xf32> {
  %0 = "mirax.sin"(%arg0) : (tensor<3xf32>) -> tensor<3xf32>
  %1 = "mirax.multiply"(%0, %arg0) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return %1 : tensor<3xf32>
}

func.func @main(%arg0: tensor<3xf32>) -> tensor<f32> {
  %0 = call @checkpoint_0(%arg0) {mirax.checkpoint = "0", mirax.num_args = 1 : i64} : (tensor<3xf32>) -> tensor<3xf32>
  %1 = "mirax.sum"(%0) {axes = array<i64: 0>, keepdims = false} : (tensor<3xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// CHECK-LABEL: func.func @main(
// CHECK:         call @checkpoint_0
// CHECK-LABEL: func.func @main_grad(
// CHECK-SAME:      %[[X:.+]]: tensor<3xf32>) -> (tensor<f32>, tensor<3xf32>)
// CHECK-NOT:     call
// CHECK:         %[[D:.+]] = "mirax.depends"(%[[X]], %{{.+}})
// CHECK:         %[[B:.+]] = "mirax.optimization_barrier"(%[[D]])
// CHECK-DAG:     "mirax.sin"(%[[B]])
// CHECK-DAG:     "mirax.sin"(%[[X]])
// CHECK:         return

// Lowering inlines the wrapper, so no call of it survives.
// LLVM-NOT:      llvm.call @checkpoint_0
// LLVM:          llvm.func @main_grad(
