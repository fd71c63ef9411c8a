// RUN: %mirax-opt %s --mirax-jvp=function=sin | FileCheck %s --check-prefix=SIN
// RUN: %mirax-opt %s --mirax-jvp=function=exp | FileCheck %s --check-prefix=EXP
// RUN: %mirax-opt %s --mirax-jvp="function=mul argnums=0,1" | FileCheck %s --check-prefix=MUL
// RUN: %mirax-opt %s --mirax-jvp="function=mul argnums=1" | FileCheck %s --check-prefix=MUL1
// RUN: %mirax-opt %s --mirax-jvp=function=chain | FileCheck %s --check-prefix=CHAIN
// RUN: %mirax-opt %s --mirax-jvp=function=int_arg | FileCheck %s --check-prefix=INT
// RUN: %mirax-opt %s --mirax-jvp=function=sum | FileCheck %s --check-prefix=SUM
// RUN: %mirax-opt %s --mirax-jvp="function=mm argnums=0,1" | FileCheck %s --check-prefix=MM
// RUN: %mirax-opt %s --mirax-jvp="function=sin result=dsin" --mirax-jvp=function=sin --mirax-jvp=function=sin | FileCheck %s --check-prefix=NAMES
// RUN: %mirax-opt %s --pass-pipeline='builtin.module(mirax-jvp{function=sin},mirax-simplify)' | FileCheck %s --check-prefix=SIN
// RUN: not %mirax-opt %s --mirax-jvp=function=nope 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: not %mirax-opt %s --mirax-jvp="function=mul argnums=2" 2>&1 | FileCheck %s --check-prefix=RANGE
// RUN: not %mirax-opt %s --mirax-jvp 2>&1 | FileCheck %s --check-prefix=NOFUNC

// Each RUN line differentiates one function of this module (the passes take a function
// name, so the cases share one module instead of `// -----` chunks). The original
// function stays as it was; @<f>_jvp(x..., tx...) -> (y..., ty...) is appended.

// d sin = cos(x) * tx.
// SIN-LABEL: func.func @sin(
// SIN-SAME: %[[X:.+]]: tensor<4xf32>) -> tensor<4xf32>
// SIN-NEXT: %[[Y:.+]] = "mirax.sin"(%[[X]])
// SIN-NEXT: return %[[Y]]
// SIN-LABEL: func.func @sin_jvp(
// SIN-SAME: %[[X:[^:]+]]: tensor<4xf32>, %[[T:[^:]+]]: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
// SIN-DAG: %[[C:.+]] = "mirax.cos"(%[[X]])
// SIN-DAG: %[[TY:.+]] = "mirax.multiply"(%[[T]], %[[C]])
// SIN-DAG: %[[Y:.+]] = "mirax.sin"(%[[X]])
// SIN: return %[[Y]], %[[TY]] : tensor<4xf32>, tensor<4xf32>
func.func @sin(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "mirax.sin"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// d exp = exp(x) * tx: the primal result is reused, not recomputed.
// EXP-LABEL: func.func @exp(
// EXP-NEXT: "mirax.exp"
// EXP-NEXT: return
// EXP-LABEL: func.func @exp_jvp(
// EXP-SAME: %[[X:[^:]+]]: tensor<2x3xf32>, %[[T:[^:]+]]: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>)
// EXP: %[[E:.+]] = "mirax.exp"(%[[X]])
// EXP-NOT: "mirax.exp"
// EXP: %[[TY:.+]] = "mirax.multiply"(%[[T]], %[[E]])
// EXP: return %[[E]], %[[TY]]
func.func @exp(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "mirax.exp"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// Product rule: d(x*y) = tx*y + x*ty.
// MUL-LABEL: func.func @mul(
// MUL-NEXT: "mirax.multiply"
// MUL-NEXT: return
// MUL-LABEL: func.func @mul_jvp(
// MUL-SAME: %[[X:[^:]+]]: tensor<4xf32>, %[[Y:[^:]+]]: tensor<4xf32>, %[[TX:[^:]+]]: tensor<4xf32>, %[[TY:[^:]+]]: tensor<4xf32>)
// MUL-SAME: -> (tensor<4xf32>, tensor<4xf32>)
// MUL-DAG: %[[A:.+]] = "mirax.multiply"(%[[TX]], %[[Y]])
// MUL-DAG: %[[B:.+]] = "mirax.multiply"(%[[X]], %[[TY]])
// MUL-DAG: %[[S:.+]] = "mirax.add"(%[[A]], %[[B]])
// MUL-DAG: %[[P:.+]] = "mirax.multiply"(%[[X]], %[[Y]])
// MUL: return %[[P]], %[[S]]

// argnums=1: a tangent for y only, so d(x*y) = x*ty and no add.
// MUL1-LABEL: func.func @mul_jvp(
// MUL1-SAME: %[[X:[^:]+]]: tensor<4xf32>, %[[Y:[^:]+]]: tensor<4xf32>, %[[TY:[^:]+]]: tensor<4xf32>)
// MUL1-SAME: -> (tensor<4xf32>, tensor<4xf32>)
// MUL1-NOT: "mirax.add"
// MUL1-DAG: %[[D:.+]] = "mirax.multiply"(%[[X]], %[[TY]])
// MUL1-DAG: %[[P:.+]] = "mirax.multiply"(%[[X]], %[[Y]])
// MUL1: return %[[P]], %[[D]]
func.func @mul(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "mirax.multiply"(%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// Chain rule: d sin(exp x) = tx * exp(x) * cos(exp(x)).
// CHAIN-LABEL: func.func @chain_jvp(
// CHAIN-SAME: %[[X:[^:]+]]: tensor<4xf32>, %[[T:[^:]+]]: tensor<4xf32>)
// CHAIN-DAG: %[[E:.+]] = "mirax.exp"(%[[X]])
// CHAIN-DAG: %[[C:.+]] = "mirax.cos"(%[[E]])
// CHAIN-DAG: %[[TE:.+]] = "mirax.multiply"(%[[T]], %[[E]])
// CHAIN-DAG: %[[TY:.+]] = "mirax.multiply"(%[[TE]], %[[C]])
// CHAIN-DAG: %[[Y:.+]] = "mirax.sin"(%[[E]])
// CHAIN: return %[[Y]], %[[TY]]
func.func @chain(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "mirax.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "mirax.sin"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}

// An integer argument gets no tangent argument (argnums=0 only) and an integer result
// gets a zero tangent of its own dtype.
// INT-LABEL: func.func @int_arg(
// INT-NEXT: "mirax.astype"
// INT-NEXT: "mirax.multiply"
// INT-NEXT: "mirax.add"
// INT-NEXT: return
// INT-LABEL: func.func @int_arg_jvp(
// INT-SAME: %[[X:[^:]+]]: tensor<4xf32>, %[[N:[^:]+]]: tensor<4xi32>, %[[T:[^:]+]]: tensor<4xf32>)
// INT-SAME: -> (tensor<4xf32>, tensor<4xi32>, tensor<4xf32>, tensor<4xi32>)
// INT-DAG: %[[Z0:.+]] = "mirax.constant"() {value = dense<0> : tensor<i32>}
// INT-DAG: %[[Z:.+]] = "mirax.broadcast_to"(%[[Z0]]) {shape = array<i64: 4>}
// INT-DAG: %[[F:.+]] = "mirax.astype"(%[[N]])
// INT-DAG: %[[TY:.+]] = "mirax.multiply"(%[[T]], %[[F]])
// INT-DAG: %[[Y:.+]] = "mirax.multiply"(%[[X]], %[[F]])
// INT-DAG: %[[M:.+]] = "mirax.add"(%[[N]], %[[N]])
// INT: return %[[Y]], %[[M]], %[[TY]], %[[Z]]
func.func @int_arg(%x: tensor<4xf32>, %n: tensor<4xi32>) -> (tensor<4xf32>, tensor<4xi32>) {
  %0 = "mirax.astype"(%n) {dtype = f32} : (tensor<4xi32>) -> tensor<4xf32>
  %1 = "mirax.multiply"(%x, %0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = "mirax.add"(%n, %n) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  return %1, %2 : tensor<4xf32>, tensor<4xi32>
}

// sum is linear: its tangent is the sum of the tangent.
// SUM-LABEL: func.func @sum_jvp(
// SUM-SAME: %[[X:[^:]+]]: tensor<2x3xf32>, %[[T:[^:]+]]: tensor<2x3xf32>) -> (tensor<3xf32>, tensor<3xf32>)
// SUM-DAG: %[[TY:.+]] = "mirax.sum"(%[[T]]) {axes = array<i64: 0>, keepdims = false}
// SUM-DAG: %[[Y:.+]] = "mirax.sum"(%[[X]]) {axes = array<i64: 0>, keepdims = false}
// SUM: return %[[Y]], %[[TY]]
func.func @sum(%x: tensor<2x3xf32>) -> tensor<3xf32> {
  %0 = "mirax.sum"(%x) {axes = array<i64: 0>, keepdims = false} : (tensor<2x3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// d(a@b) = ta@b + a@tb.
// MM-LABEL: func.func @mm_jvp(
// MM-SAME: %[[A:[^:]+]]: tensor<2x3xf32>, %[[B:[^:]+]]: tensor<3x4xf32>, %[[TA:[^:]+]]: tensor<2x3xf32>, %[[TB:[^:]+]]: tensor<3x4xf32>)
// MM-DAG: %[[L:.+]] = "mirax.matmul"(%[[TA]], %[[B]])
// MM-DAG: %[[R:.+]] = "mirax.matmul"(%[[A]], %[[TB]])
// MM-DAG: %[[S:.+]] = "mirax.add"(%[[L]], %[[R]])
// MM-DAG: %[[Y:.+]] = "mirax.matmul"(%[[A]], %[[B]])
// MM: return %[[Y]], %[[S]]
func.func @mm(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) -> tensor<2x4xf32> {
  %0 = "mirax.matmul"(%a, %b) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// result= names the new function; without it a taken name gets a numeric suffix.
// NAMES-LABEL: func.func @sin(
// NAMES-LABEL: func.func @dsin(
// NAMES-LABEL: func.func @sin_jvp(
// NAMES-LABEL: func.func @sin_jvp_1(

// UNKNOWN: error: {{.*}}no function @nope in the module
// RANGE: error: {{.*}}mirax-jvp: argnum 2 out of range for @mul with 2 arguments
// NOFUNC: error: {{.*}}'mirax-jvp' needs the option function=<name>
