// RUN: mirax-opt %s --mirax-grad="function=main value=true" --mirax-simplify --cse --canonicalize | FileCheck %s --check-prefix=SIMPLIFY
// RUN: mirax-opt %s --mirax-grad="function=main value=true" --mirax-simplify --convert-mirax-to-linalg --cse --canonicalize | FileCheck %s --check-prefix=LINALG
// RUN: mirax-opt %s --mirax-grad="function=main value=true" --mirax-simplify --convert-mirax-to-linalg --cse --canonicalize --mirax-lower-barriers | FileCheck %s --check-prefix=LOWERED

// Reverse mode re-runs a checkpointed body on its inputs passed through
// optimization barriers, ordered after the cotangent by `depends`. The barrier keeps
// the recomputed matmul and tanh apart from the forward ones through mirax-simplify,
// upstream cse/canonicalize and the lowering to linalg (which keeps the barrier);
// mirax-lower-barriers, run by the pipelines just before bufferization, drops it.

func.func private @checkpoint_0(%arg0: tensor<4x8xf32>, %arg1: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %0 = "mirax.matmul"(%arg0, %arg1) : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %1 = "mirax.tanh"(%0) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

func.func @main(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<f32> {
  %0 = call @checkpoint_0(%x, %w) {mirax.checkpoint = "0", mirax.num_args = 2 : i64} : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %1 = "mirax.sum"(%0) {axes = array<i64: 0, 1>, keepdims = false} : (tensor<4x8xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// SIMPLIFY-LABEL: func.func @main_grad(
// SIMPLIFY-SAME:      %[[X:[^:]+]]: tensor<4x8xf32>, %[[W:[^:]+]]: tensor<8x8xf32>)
// SIMPLIFY-DAG:     %[[DW:.+]] = "mirax.depends"(%[[W]], %[[CT:[^)]+]])
// SIMPLIFY-DAG:     %[[BW:.+]] = "mirax.optimization_barrier"(%[[DW]])
// SIMPLIFY-DAG:     %[[DX:.+]] = "mirax.depends"(%[[X]], %[[CT]])
// SIMPLIFY-DAG:     %[[BX:.+]] = "mirax.optimization_barrier"(%[[DX]])
// SIMPLIFY-DAG:     %[[RM:.+]] = "mirax.matmul"(%[[BX]], %[[BW]])
// SIMPLIFY-DAG:     "mirax.tanh"(%[[RM]])
// SIMPLIFY-DAG:     %[[FM:.+]] = "mirax.matmul"(%[[X]], %[[W]])
// SIMPLIFY-DAG:     "mirax.tanh"(%[[FM]])
// SIMPLIFY:         return

// LINALG-LABEL: func.func @main_grad(
// LINALG-SAME:      %[[X:[^:]+]]: tensor<4x8xf32>, %[[W:[^:]+]]: tensor<8x8xf32>)
// LINALG:         %[[BW:.+]] = "mirax.optimization_barrier"(%[[W]]) : (tensor<8x8xf32>) -> tensor<8x8xf32>
// LINALG:         %[[BX:.+]] = "mirax.optimization_barrier"(%[[X]]) : (tensor<4x8xf32>) -> tensor<4x8xf32>
// LINALG:         linalg.matmul ins(%[[BX]], %[[BW]] :
// LINALG:         math.tanh
// LINALG:         linalg.matmul ins(%[[X]], %[[W]] :
// LINALG:         math.tanh
// LINALG:         return

// LOWERED-LABEL: func.func @main_grad(
// LOWERED-SAME:      %[[X:[^:]+]]: tensor<4x8xf32>, %[[W:[^:]+]]: tensor<8x8xf32>)
// LOWERED-NOT:     mirax.optimization_barrier
// LOWERED-COUNT-2: linalg.matmul ins(%[[X]], %[[W]] :
// LOWERED:         return
