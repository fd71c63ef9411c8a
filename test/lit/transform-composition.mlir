// RUN: %mirax-opt %s --mirax-grad=function=cube --mirax-grad=function=cube_grad | FileCheck %s --check-prefix=D2
// RUN: %mirax-opt %s --mirax-grad=function=cube --mirax-grad=function=cube_grad --mirax-simplify | FileCheck %s --check-prefix=D2SIMP
// RUN: %mirax-opt %s --pass-pipeline='builtin.module(mirax-grad{function=cube},mirax-grad{function=cube_grad},mirax-simplify)' | FileCheck %s --check-prefix=D2SIMP
// RUN: %mirax-opt %s --mirax-grad=function=loss --mirax-vmap="function=loss_grad in-axes=none,0 batch-size=8" --mirax-simplify | FileCheck %s --check-prefix=PEG
// RUN: %mirax-opt %s --mirax-grad=function=loss --mirax-jvp=function=loss_grad --mirax-simplify | FileCheck %s --check-prefix=HVP
// RUN: %mirax-opt %s --mirax-jvp=function=sinx --mirax-vmap="function=sinx_jvp batch-size=6" | FileCheck %s --check-prefix=VMAPJVP
// RUN: %mirax-opt %s --mirax-grad=function=outer --mirax-simplify | FileCheck %s --check-prefix=CALL
// RUN: %mirax-opt %s --mirax-grad=function=loss --mirax-vmap="function=loss_grad in-axes=none,0 batch-size=8" --mirax-cpu-pipeline | FileCheck %s --check-prefix=LLVM --implicit-check-not=mirax. --implicit-check-not=linalg.
// RUN: %mirax-opt %s --mirax-grad=function=cube --mirax-grad=function=cube_grad --mirax-jvp=function=cube_grad_grad --mirax-cpu-pipeline | FileCheck %s --check-prefix=LLVM3 --implicit-check-not=mirax. --implicit-check-not=func.func

// Transforms compose as passes: each adds a function the next one can transform.

// Second derivative of x^3: @cube_grad = 3x^2, @cube_grad_grad = 6x. The functions
// before it in the module are left as they were.
// D2-LABEL: func.func @cube(
// D2-SAME: %[[X:[^:]+]]: tensor<f32>) -> tensor<f32>
// D2-NEXT: %[[S:.+]] = "mirax.multiply"(%[[X]], %[[X]])
// D2-NEXT: %[[C:.+]] = "mirax.multiply"(%[[S]], %[[X]])
// D2-NEXT: return %[[C]] : tensor<f32>
// D2-LABEL: func.func @loss(
// D2-LABEL: func.func @cube_grad(
// D2-SAME: tensor<f32>) -> tensor<f32>
// D2: return
// D2-LABEL: func.func @cube_grad_grad(
// D2-SAME: tensor<f32>) -> tensor<f32>
// D2-NOT: call @
// D2: return %{{.+}} : tensor<f32>

// After simplification 6x is a sum of six x's (the seeds 1.0 fold away).
// D2SIMP-LABEL: func.func @cube_grad_grad(
// D2SIMP-SAME: %[[X:[^:]+]]: tensor<f32>) -> tensor<f32>
// D2SIMP-NOT: "mirax.constant"
// D2SIMP-NOT: "mirax.multiply"
// D2SIMP: "mirax.add"
// D2SIMP: return
func.func @cube(%x: tensor<f32>) -> tensor<f32> {
  %0 = "mirax.multiply"(%x, %x) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %1 = "mirax.multiply"(%0, %x) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// Per-example gradients: vmap of grad over the examples x, the weights w shared.
// d/dw sum(sin(w*x)) = cos(w*x) * x, computed on the whole batch at once.
// PEG-LABEL: func.func @loss(
// PEG-NEXT: "mirax.multiply"
// PEG-NEXT: "mirax.sin"
// PEG-NEXT: "mirax.sum"
// PEG-NEXT: return
// PEG-LABEL: func.func @loss_grad(
// PEG-SAME: -> tensor<4xf32>
// PEG-LABEL: func.func @loss_grad_vmap(
// PEG-SAME: %[[W:[^:]+]]: tensor<4xf32>, %[[X:[^:]+]]: tensor<8x4xf32>) -> tensor<8x4xf32>
// PEG-DAG: %[[W1:.+]] = "mirax.reshape"(%[[W]]) {shape = array<i64: 1, 4>}
// PEG-DAG: %[[WB:.+]] = "mirax.broadcast_to"(%[[W1]]) {shape = array<i64: 8, 4>}
// PEG-DAG: %[[WX:.+]] = "mirax.multiply"(%[[WB]], %[[X]]) : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
// PEG-DAG: %[[C:.+]] = "mirax.cos"(%[[WX]]) : (tensor<8x4xf32>) -> tensor<8x4xf32>
// PEG-DAG: %[[G:.+]] = "mirax.multiply"(%[[C]], %[[X]]) : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
// PEG-NOT: "mirax.sin"
// PEG: return %[[G]] : tensor<8x4xf32>

// jvp of grad: a Hessian-vector product, -sin(w*x) * (tw*x) * x.
// HVP-LABEL: func.func @loss_grad_jvp(
// HVP-SAME: %[[W:[^:]+]]: tensor<4xf32>, %[[X:[^:]+]]: tensor<4xf32>, %[[T:[^:]+]]: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
// HVP-DAG: %[[WX:.+]] = "mirax.multiply"(%[[W]], %[[X]])
// HVP-DAG: %[[S:.+]] = "mirax.sin"(%[[WX]])
// HVP-DAG: %[[NS:.+]] = "mirax.negative"(%[[S]])
// HVP-DAG: %[[TX:.+]] = "mirax.multiply"(%[[T]], %[[X]])
// HVP-DAG: %[[A:.+]] = "mirax.multiply"(%[[TX]], %[[NS]])
// HVP-DAG: %[[HV:.+]] = "mirax.multiply"(%[[A]], %[[X]])
// HVP-DAG: %[[C:.+]] = "mirax.cos"(%[[WX]])
// HVP-DAG: %[[G:.+]] = "mirax.multiply"(%[[C]], %[[X]])
// HVP: return %[[G]], %[[HV]] : tensor<4xf32>, tensor<4xf32>
func.func @loss(%w: tensor<4xf32>, %x: tensor<4xf32>) -> tensor<f32> {
  %0 = "mirax.multiply"(%w, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "mirax.sin"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "mirax.sum"(%1) {axes = array<i64: 0>, keepdims = false} : (tensor<4xf32>) -> tensor<f32>
  return %2 : tensor<f32>
}

// vmap of jvp: primals and tangents both batched.
// VMAPJVP-LABEL: func.func @sinx_jvp_vmap(
// VMAPJVP-SAME: %[[X:[^:]+]]: tensor<6x3xf32>, %[[T:[^:]+]]: tensor<6x3xf32>) -> (tensor<6x3xf32>, tensor<6x3xf32>)
// VMAPJVP-DAG: %[[C:.+]] = "mirax.cos"(%[[X]]) : (tensor<6x3xf32>) -> tensor<6x3xf32>
// VMAPJVP-DAG: %[[TY:.+]] = "mirax.multiply"(%[[T]], %[[C]]) : (tensor<6x3xf32>, tensor<6x3xf32>) -> tensor<6x3xf32>
// VMAPJVP-DAG: %[[Y:.+]] = "mirax.sin"(%[[X]]) : (tensor<6x3xf32>) -> tensor<6x3xf32>
// VMAPJVP: return %[[Y]], %[[TY]]
func.func @sinx(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = "mirax.sin"(%x) : (tensor<3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// Calls are differentiated through: the gradient is one flat function; the caller
// keeps its call.
// CALL-LABEL: func.func @outer(
// CALL: call @inner(
// CALL-LABEL: func.func @inner(
// CALL-LABEL: func.func @outer_grad(
// CALL-SAME: %[[X:[^:]+]]: tensor<4xf32>) -> tensor<4xf32>
// CALL-NOT: call @
// CALL-DAG: %[[E:.+]] = "mirax.exp"(%[[X]])
// CALL-DAG: %[[C:.+]] = "mirax.cos"(%[[E]])
// CALL-DAG: %[[G:.+]] = "mirax.multiply"(%[[C]], %[[E]])
// CALL: return %[[G]] : tensor<4xf32>
func.func @outer(%x: tensor<4xf32>) -> tensor<f32> {
  %0 = "mirax.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = func.call @inner(%0) : (tensor<4xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}
func.func @inner(%y: tensor<4xf32>) -> tensor<f32> {
  %0 = "mirax.sin"(%y) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "mirax.sum"(%0) {axes = array<i64: 0>, keepdims = false} : (tensor<4xf32>) -> tensor<f32>
  return %1 : tensor<f32>
}

// Transformed functions lower to LLVM like any other.
// LLVM-DAG: llvm.func @loss(
// LLVM-DAG: llvm.func @loss_grad(
// LLVM-DAG: llvm.func @loss_grad_vmap(

// LLVM3-DAG: llvm.func @cube_grad(
// LLVM3-DAG: llvm.func @cube_grad_grad(
// LLVM3-DAG: llvm.func @cube_grad_grad_jvp(
