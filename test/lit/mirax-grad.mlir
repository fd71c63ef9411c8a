// RUN: %mirax-opt %s --mirax-grad=function=loss | FileCheck %s --check-prefix=GRAD
// RUN: %mirax-opt %s --mirax-grad="function=loss argnums=0,1" | FileCheck %s --check-prefix=GRAD2
// RUN: %mirax-opt %s --mirax-grad="function=loss argnums=1 value=true" | FileCheck %s --check-prefix=VALUE
// RUN: %mirax-opt %s --mirax-grad="function=aux value=true" | FileCheck %s --check-prefix=AUX
// RUN: %mirax-opt %s --mirax-grad=function=aux | FileCheck %s --check-prefix=NOAUX
// RUN: %mirax-opt %s --mirax-grad="function=with_int argnums=0" | FileCheck %s --check-prefix=INT
// RUN: not %mirax-opt %s --mirax-grad=function=not_scalar 2>&1 | FileCheck %s --check-prefix=NONSCALAR
// RUN: not %mirax-opt %s --mirax-grad=function=int_result 2>&1 | FileCheck %s --check-prefix=INTRESULT
// RUN: not %mirax-opt %s --mirax-grad="function=with_int argnums=1" 2>&1 | FileCheck %s --check-prefix=INTARG
// RUN: not %mirax-opt %s --mirax-grad="function=loss argnums=2" 2>&1 | FileCheck %s --check-prefix=RANGE
// RUN: not %mirax-opt %s --mirax-grad=function=nope 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not %mirax-opt %s --mirax-grad 2>&1 | FileCheck %s --check-prefix=NOFUNC
// RUN: not %mirax-opt %s --mirax-grad="function=loss bogus=1" 2>&1 | FileCheck %s --check-prefix=BADOPT

// @<f>_grad(x...) -> (gx...) for the arguments in argnums: the gradient of @f's first
// result, a floating-point scalar. With value=true: -> (y..., gx...). Each RUN line
// transforms one function; the original function stays as it was.

// sum(sin(w*x)) wrt w: the seed 1.0 is broadcast back through the sum, then
// d sin = cos, then the product rule.
// GRAD-LABEL: func.func @loss(
// GRAD-SAME: %[[W:[^:]+]]: tensor<4xf32>, %[[X:[^:]+]]: tensor<4xf32>) -> tensor<f32>
// GRAD-NEXT: %[[M:.+]] = "mirax.multiply"(%[[W]], %[[X]])
// GRAD-NEXT: %[[S:.+]] = "mirax.sin"(%[[M]])
// GRAD-NEXT: %[[R:.+]] = "mirax.sum"(%[[S]]) {axes = array<i64: 0>, keepdims = false}
// GRAD-NEXT: return %[[R]] : tensor<f32>
// GRAD-LABEL: func.func @loss_grad(
// GRAD-SAME: %[[W:[^:]+]]: tensor<4xf32>, %[[X:[^:]+]]: tensor<4xf32>) -> tensor<4xf32>
// GRAD-DAG: %[[ONE:.+]] = "mirax.constant"() {value = dense<1.000000e+00> : tensor<f32>}
// GRAD-DAG: %[[ONE1:.+]] = "mirax.reshape"(%[[ONE]]) {shape = array<i64: 1>}
// GRAD-DAG: %[[SEED:.+]] = "mirax.broadcast_to"(%[[ONE1]]) {shape = array<i64: 4>}
// GRAD-DAG: %[[M:.+]] = "mirax.multiply"(%[[W]], %[[X]])
// GRAD-DAG: %[[C:.+]] = "mirax.cos"(%[[M]])
// GRAD-DAG: %[[GM:.+]] = "mirax.multiply"(%[[SEED]], %[[C]])
// GRAD-DAG: %[[GW:.+]] = "mirax.multiply"(%[[GM]], %[[X]])
// GRAD-NOT: "mirax.sin"
// GRAD: return %[[GW]] : tensor<4xf32>

// argnums=0,1: one gradient per argument, in argnums order.
// GRAD2-LABEL: func.func @loss_grad(
// GRAD2-SAME: %[[W:[^:]+]]: tensor<4xf32>, %[[X:[^:]+]]: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
// GRAD2-DAG: %[[C:.+]] = "mirax.cos"
// GRAD2-DAG: %[[GM:.+]] = "mirax.multiply"(%{{[^,]+}}, %[[C]])
// GRAD2-DAG: %[[GW:.+]] = "mirax.multiply"(%[[GM]], %[[X]])
// GRAD2-DAG: %[[GX:.+]] = "mirax.multiply"(%[[GM]], %[[W]])
// GRAD2: return %[[GW]], %[[GX]] : tensor<4xf32>, tensor<4xf32>

// value=true: the value first, then the gradient (value_and_grad).
// VALUE-LABEL: func.func @loss_grad(
// VALUE-SAME: %[[W:[^:]+]]: tensor<4xf32>, %[[X:[^:]+]]: tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>)
// VALUE-DAG: %[[C:.+]] = "mirax.cos"
// VALUE-DAG: %[[GM:.+]] = "mirax.multiply"(%{{[^,]+}}, %[[C]])
// VALUE-DAG: %[[GX:.+]] = "mirax.multiply"(%[[GM]], %[[W]])
// VALUE-DAG: %[[M:.+]] = "mirax.multiply"(%[[W]], %[[X]])
// VALUE-DAG: %[[S:.+]] = "mirax.sin"(%[[M]])
// VALUE-DAG: %[[Y:.+]] = "mirax.sum"(%[[S]])
// VALUE: return %[[Y]], %[[GX]] : tensor<f32>, tensor<4xf32>
func.func @loss(%w: tensor<4xf32>, %x: tensor<4xf32>) -> tensor<f32> {
  %0 = "mirax.multiply"(%w, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = "mirax.sin"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "mirax.sum"(%1) {axes = array<i64: 0>, keepdims = false} : (tensor<4xf32>) -> tensor<f32>
  return %2 : tensor<f32>
}

// Results after the first are auxiliary: returned with value=true, never differentiated.
// AUX-LABEL: func.func @aux(
// AUX-NEXT: "mirax.exp"
// AUX-NEXT: "mirax.sum"
// AUX-NEXT: return
// AUX-LABEL: func.func @aux_grad(
// AUX-SAME: %[[X:[^:]+]]: tensor<3xf32>) -> (tensor<f32>, tensor<3xf32>, tensor<3xf32>)
// AUX-DAG: %[[E:.+]] = "mirax.exp"(%[[X]])
// AUX-DAG: %[[G:.+]] = "mirax.multiply"(%{{[^,]+}}, %[[E]])
// AUX-DAG: %[[Y:.+]] = "mirax.sum"(%[[E]])
// AUX: return %[[Y]], %[[E]], %[[G]] : tensor<f32>, tensor<3xf32>, tensor<3xf32>

// NOAUX-LABEL: func.func @aux_grad(
// NOAUX-SAME: %[[X:[^:]+]]: tensor<3xf32>) -> tensor<3xf32>
// NOAUX-NOT: "mirax.sum"
// NOAUX: return %{{[^,]+}} : tensor<3xf32>
func.func @aux(%x: tensor<3xf32>) -> (tensor<f32>, tensor<3xf32>) {
  %0 = "mirax.exp"(%x) : (tensor<3xf32>) -> tensor<3xf32>
  %1 = "mirax.sum"(%0) {axes = array<i64: 0>, keepdims = false} : (tensor<3xf32>) -> tensor<f32>
  return %1, %0 : tensor<f32>, tensor<3xf32>
}

// An integer argument is kept as an input, without a gradient.
// INT-LABEL: func.func @with_int_grad(
// INT-SAME: %[[X:[^:]+]]: tensor<f32>, %[[N:[^:]+]]: tensor<i32>) -> tensor<f32>
// INT-DAG: %[[F:.+]] = "mirax.astype"(%[[N]]) {dtype = f32}
// INT-DAG: %[[G:.+]] = "mirax.multiply"(%{{[^,]+}}, %[[F]])
// INT: return %[[G]] : tensor<f32>
func.func @with_int(%x: tensor<f32>, %n: tensor<i32>) -> tensor<f32> {
  %0 = "mirax.astype"(%n) {dtype = f32} : (tensor<i32>) -> tensor<f32>
  %1 = "mirax.multiply"(%x, %0) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %1 : tensor<f32>
}

func.func @not_scalar(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "mirax.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

func.func @int_result(%x: tensor<3xf32>) -> tensor<ui32> {
  %0 = "mirax.argmax"(%x) {axes = array<i64: 0>, keepdims = false} : (tensor<3xf32>) -> tensor<ui32>
  return %0 : tensor<ui32>
}

// Errors are diagnostics (no traceback, no output).
// NONSCALAR-NOT: Traceback
// NONSCALAR: error: {{.*}}mirax-grad: @not_scalar must return a floating-point scalar first, got float32[4]
// NONSCALAR-NOT: func.func
// INTRESULT: error: {{.*}}mirax-grad: @int_result must return a floating-point scalar first, got uint32[]
// INTARG: error: {{.*}}mirax-grad: argument 1 of @with_int has dtype int32; only floating-point and complex arguments can be differentiated
// RANGE: error: {{.*}}mirax-grad: argnum 2 out of range for @loss with 2 arguments
// UNKNOWN: error: {{.*}}no function @nope in the module
// NOFUNC: error: {{.*}}'mirax-grad' needs the option function=<name>
// BADOPT: mirax-opt: error: pass 'mirax-grad' has no option bogus
