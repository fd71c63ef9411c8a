// RUN: %mirax-opt %s --mirax-vjp="function=mul argnums=0,1" | FileCheck %s --check-prefix=MUL
// RUN: %mirax-opt %s --mirax-vjp="function=div argnums=0,1" | FileCheck %s --check-prefix=DIV
// RUN: %mirax-opt %s --mirax-vjp=function=exp | FileCheck %s --check-prefix=EXP
// RUN: %mirax-opt %s --mirax-vjp=function=two_outputs | FileCheck %s --check-prefix=TWO
// RUN: %mirax-opt %s --mirax-vjp=function=fanout | FileCheck %s --check-prefix=FANOUT
// RUN: %mirax-opt %s --mirax-vjp=function=sum | FileCheck %s --check-prefix=SUM
// RUN: %mirax-opt %s --mirax-vjp="function=mm argnums=0,1" | FileCheck %s --check-prefix=MM
// RUN: %mirax-opt %s --mirax-vjp="function=int_arg argnums=0" | FileCheck %s --check-prefix=INT
// RUN: %mirax-opt %s --mirax-vjp=function=transpose3 | FileCheck %s --check-prefix=TRANSPOSE
// RUN: %mirax-opt %s --mirax-vjp=function=reshape | FileCheck %s --check-prefix=RESHAPE
// RUN: %mirax-opt %s --mirax-vjp=function=broadcast | FileCheck %s --check-prefix=BROADCAST
// RUN: %mirax-opt %s --mirax-vjp=function=slice | FileCheck %s --check-prefix=SLICE
// RUN: %mirax-opt %s --mirax-vjp=function=take | FileCheck %s --check-prefix=TAKE
// RUN: %mirax-opt %s --mirax-vjp="function=concat argnums=0,1" | FileCheck %s --check-prefix=CONCAT
// RUN: not %mirax-opt %s --mirax-vjp="function=int_arg argnums=1" 2>&1 | FileCheck %s --check-prefix=INTERR
// RUN: not %mirax-opt %s --mirax-vjp=function=nope 2>&1 | FileCheck %s --check-prefix=UNKNOWN

// Each RUN line transforms one function: @<f>_vjp(x..., cy...) -> (y..., gx...) is
// appended, with cotangent arguments for every result and cotangent results for the
// arguments in argnums. The original function stays as it was.

// x*y: gx = cy*y, gy = cy*x.
// MUL-LABEL: func.func @mul(
// MUL-SAME: %[[X:[^:]+]]: tensor<4xf32>, %[[Y:[^:]+]]: tensor<4xf32>) -> tensor<4xf32>
// MUL-NEXT: %[[P:.+]] = "mirax.multiply"(%[[X]], %[[Y]])
// MUL-NEXT: return %[[P]]
// MUL-LABEL: func.func @mul_vjp(
// MUL-SAME: %[[X:[^:]+]]: tensor<4xf32>, %[[Y:[^:]+]]: tensor<4xf32>, %[[C:[^:]+]]: tensor<4xf32>)
// MUL-SAME: -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
// MUL-DAG: %[[GX:.+]] = "mirax.multiply"(%[[C]], %[[Y]])
// MUL-DAG: %[[GY:.+]] = "mirax.multiply"(%[[C]], %[[X]])
// MUL-DAG: %[[P:.+]] = "mirax.multiply"(%[[X]], %[[Y]])
// MUL: return %[[P]], %[[GX]], %[[GY]]
func.func @mul(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "mirax.multiply"(%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// x/y: gx = c/y, gy = -c * (x/y)/y, reusing the primal quotient.
// DIV-LABEL: func.func @div(
// DIV-NEXT: "mirax.divide"
// DIV-NEXT: return
// DIV-LABEL: func.func @div_vjp(
// DIV-SAME: %[[X:[^:]+]]: tensor<4xf32>, %[[Y:[^:]+]]: tensor<4xf32>, %[[C:[^:]+]]: tensor<4xf32>)
// DIV-DAG: %[[Q:.+]] = "mirax.divide"(%[[X]], %[[Y]])
// DIV-DAG: %[[QY:.+]] = "mirax.divide"(%[[Q]], %[[Y]])
// DIV-DAG: %[[N:.+]] = "mirax.negative"(%[[C]])
// DIV-DAG: %[[GY:.+]] = "mirax.multiply"(%[[N]], %[[QY]])
// DIV-DAG: %[[GX:.+]] = "mirax.divide"(%[[C]], %[[Y]])
// DIV: return %[[Q]], %[[GX]], %[[GY]]
func.func @div(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "mirax.divide"(%x, %y) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// exp: gx = c * exp(x), the primal result reused.
// EXP-LABEL: func.func @exp_vjp(
// EXP-SAME: %[[X:[^:]+]]: tensor<2x3xf32>, %[[C:[^:]+]]: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xf32>)
// EXP: %[[E:.+]] = "mirax.exp"(%[[X]])
// EXP-NOT: "mirax.exp"
// EXP: %[[G:.+]] = "mirax.multiply"(%[[C]], %[[E]])
// EXP: return %[[E]], %[[G]]
func.func @exp(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = "mirax.exp"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// Two results: one cotangent argument each; their contributions to gx are added.
// TWO-LABEL: func.func @two_outputs(
// TWO-NEXT: "mirax.sin"
// TWO-NEXT: "mirax.cos"
// TWO-NEXT: return
// TWO-LABEL: func.func @two_outputs_vjp(
// TWO-SAME: %[[X:[^:]+]]: tensor<4xf32>, %[[C0:[^:]+]]: tensor<4xf32>, %[[C1:[^:]+]]: tensor<4xf32>)
// TWO-SAME: -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
// TWO-DAG: %[[COS:.+]] = "mirax.cos"(%[[X]])
// TWO-DAG: %[[G0:.+]] = "mirax.multiply"(%[[C0]], %[[COS]])
// TWO-DAG: %[[SIN:.+]] = "mirax.sin"(%[[X]])
// TWO-DAG: %[[NSIN:.+]] = "mirax.negative"(%[[SIN]])
// TWO-DAG: %[[G1:.+]] = "mirax.multiply"(%[[C1]], %[[NSIN]])
// TWO-DAG: %[[G:.+]] = "mirax.add"(%[[G1]], %[[G0]])
// TWO: return %{{.+}}, %{{.+}}, %[[G]] : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
func.func @two_outputs(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = "mirax.sin"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "mirax.cos"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// A value used twice (x*x) gets the sum of both cotangents.
// FANOUT-LABEL: func.func @fanout_vjp(
// FANOUT-SAME: %[[X:[^:]+]]: tensor<4xf32>, %[[C:[^:]+]]: tensor<4xf32>)
// FANOUT-COUNT-2: "mirax.multiply"(%[[C]], %[[X]])
// FANOUT: %[[G:.+]] = "mirax.add"
// FANOUT: return %{{.+}}, %[[G]]
func.func @fanout(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "mirax.multiply"(%x, %x) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// sum over axis 0: the cotangent is broadcast back along the reduced axis.
// SUM-LABEL: func.func @sum(
// SUM-NEXT: "mirax.sum"
// SUM-NEXT: return
// SUM-LABEL: func.func @sum_vjp(
// SUM-SAME: %[[X:[^:]+]]: tensor<2x3xf32>, %[[C:[^:]+]]: tensor<3xf32>) -> (tensor<3xf32>, tensor<2x3xf32>)
// SUM-DAG: %[[R:.+]] = "mirax.reshape"(%[[C]]) {shape = array<i64: 1, 3>}
// SUM-DAG: %[[G:.+]] = "mirax.broadcast_to"(%[[R]]) {shape = array<i64: 2, 3>} : (tensor<1x3xf32>) -> tensor<2x3xf32>
// SUM-DAG: %[[Y:.+]] = "mirax.sum"(%[[X]]) {axes = array<i64: 0>, keepdims = false}
// SUM: return %[[Y]], %[[G]]
func.func @sum(%x: tensor<2x3xf32>) -> tensor<3xf32> {
  %0 = "mirax.sum"(%x) {axes = array<i64: 0>, keepdims = false} : (tensor<2x3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// a@b: ga = c @ b^T, gb = a^T @ c.
// MM-LABEL: func.func @mm(
// MM-NEXT: "mirax.matmul"
// MM-NEXT: return
// MM-LABEL: func.func @mm_vjp(
// MM-SAME: %[[A:[^:]+]]: tensor<2x3xf32>, %[[B:[^:]+]]: tensor<3x4xf32>, %[[C:[^:]+]]: tensor<2x4xf32>)
// MM-SAME: -> (tensor<2x4xf32>, tensor<2x3xf32>, tensor<3x4xf32>)
// MM-DAG: %[[BT:.+]] = "mirax.transpose"(%[[B]]) {permutation = array<i64: 1, 0>} : (tensor<3x4xf32>) -> tensor<4x3xf32>
// MM-DAG: %[[GA:.+]] = "mirax.matmul"(%[[C]], %[[BT]]) : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
// MM-DAG: %[[AT:.+]] = "mirax.transpose"(%[[A]]) {permutation = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
// MM-DAG: %[[GB:.+]] = "mirax.matmul"(%[[AT]], %[[C]]) : (tensor<3x2xf32>, tensor<2x4xf32>) -> tensor<3x4xf32>
// MM-DAG: %[[Y:.+]] = "mirax.matmul"(%[[A]], %[[B]])
// MM: return %[[Y]], %[[GA]], %[[GB]]
func.func @mm(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) -> tensor<2x4xf32> {
  %0 = "mirax.matmul"(%a, %b) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// An integer argument is carried through but gets no cotangent; an integer result
// still takes a cotangent argument (unused).
// INT-LABEL: func.func @int_arg_vjp(
// INT-SAME: %[[X:[^:]+]]: tensor<4xf32>, %[[N:[^:]+]]: tensor<4xi32>, %[[C:[^:]+]]: tensor<4xf32>, %{{[^:]+}}: tensor<4xi32>)
// INT-SAME: -> (tensor<4xf32>, tensor<4xi32>, tensor<4xf32>)
// INT-DAG: %[[F:.+]] = "mirax.astype"(%[[N]]) {dtype = f32}
// INT-DAG: %[[G:.+]] = "mirax.multiply"(%[[C]], %[[F]])
// INT: return %{{.+}}, %{{.+}}, %[[G]]
func.func @int_arg(%x: tensor<4xf32>, %n: tensor<4xi32>) -> (tensor<4xf32>, tensor<4xi32>) {
  %0 = "mirax.astype"(%n) {dtype = f32} : (tensor<4xi32>) -> tensor<4xf32>
  %1 = "mirax.multiply"(%x, %0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = "mirax.add"(%n, %n) : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  return %1, %2 : tensor<4xf32>, tensor<4xi32>
}

// transpose: the cotangent goes through the inverse permutation.
// TRANSPOSE-LABEL: func.func @transpose3_vjp(
// TRANSPOSE-SAME: %[[X:[^:]+]]: tensor<2x3x4xf32>, %[[C:[^:]+]]: tensor<4x2x3xf32>) -> (tensor<4x2x3xf32>, tensor<2x3x4xf32>)
// TRANSPOSE-DAG: %[[G:.+]] = "mirax.transpose"(%[[C]]) {permutation = array<i64: 1, 2, 0>} : (tensor<4x2x3xf32>) -> tensor<2x3x4xf32>
// TRANSPOSE-DAG: %[[Y:.+]] = "mirax.transpose"(%[[X]]) {permutation = array<i64: 2, 0, 1>}
// TRANSPOSE: return %[[Y]], %[[G]]
func.func @transpose3(%x: tensor<2x3x4xf32>) -> tensor<4x2x3xf32> {
  %0 = "mirax.transpose"(%x) {permutation = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  return %0 : tensor<4x2x3xf32>
}

// reshape: the cotangent is reshaped back.
// RESHAPE-LABEL: func.func @reshape_vjp(
// RESHAPE-SAME: %[[X:[^:]+]]: tensor<2x3xf32>, %[[C:[^:]+]]: tensor<6xf32>) -> (tensor<6xf32>, tensor<2x3xf32>)
// RESHAPE-DAG: %[[G:.+]] = "mirax.reshape"(%[[C]]) {shape = array<i64: 2, 3>} : (tensor<6xf32>) -> tensor<2x3xf32>
// RESHAPE: return %{{[^,]+}}, %[[G]]
func.func @reshape(%x: tensor<2x3xf32>) -> tensor<6xf32> {
  %0 = "mirax.reshape"(%x) {shape = array<i64: 6>} : (tensor<2x3xf32>) -> tensor<6xf32>
  return %0 : tensor<6xf32>
}

// broadcast_to: the cotangent is summed over the broadcast axes.
// BROADCAST-LABEL: func.func @broadcast_vjp(
// BROADCAST-SAME: %[[X:[^:]+]]: tensor<3xf32>, %[[C:[^:]+]]: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<3xf32>)
// BROADCAST-DAG: %[[G:.+]] = "mirax.sum"(%[[C]]) {axes = array<i64: 0>, keepdims = false} : (tensor<2x3xf32>) -> tensor<3xf32>
// BROADCAST: return %{{[^,]+}}, %[[G]]
func.func @broadcast(%x: tensor<3xf32>) -> tensor<2x3xf32> {
  %0 = "mirax.broadcast_to"(%x) {shape = array<i64: 2, 3>} : (tensor<3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// slice: the cotangent is padded with zeros back to the input's shape.
// SLICE-LABEL: func.func @slice_vjp(
// SLICE-SAME: %[[X:[^:]+]]: tensor<4x6xf32>, %[[C:[^:]+]]: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<4x6xf32>)
// SLICE: %[[G:.+]] = "mirax.pad"{{.*}} -> tensor<4x6xf32>
// SLICE: return %{{[^,]+}}, %[[G]]
func.func @slice(%x: tensor<4x6xf32>) -> tensor<2x3xf32> {
  %0 = "mirax.slice"(%x) {start = array<i64: 1, 0>, stop = array<i64: 3, 5>, strides = array<i64: 1, 2>} : (tensor<4x6xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// take: the cotangent is scatter-added into zeros; the indices get none.
// TAKE-LABEL: func.func @take_vjp(
// TAKE-SAME: %[[X:[^:]+]]: tensor<4x6xf32>, %[[I:[^:]+]]: tensor<2xi32>, %[[C:[^:]+]]: tensor<2x6xf32>) -> (tensor<2x6xf32>, tensor<4x6xf32>)
// The gather clamps out-of-range indices and the scatter drops them, so the cotangent
// goes through the indices as the gather read them: wrapped, then clamped to [0, 3].
// TAKE-DAG: %[[Y:.+]] = "mirax.take"(%[[X]], %[[I]]) {axis = 0 : i64}
// TAKE-DAG: %[[Z:.+]] = "mirax.broadcast_to"(%{{.+}}) {shape = array<i64: 4, 6>}
// TAKE-DAG: %[[W:.+]] = "mirax.astype"(%[[I]]) {dtype = i64}
// TAKE-DAG: %[[K:.+]] = "mirax.minimum"(%{{.+}}, %{{.+}}) : (tensor<2xi64>, tensor<2xi64>)
// TAKE-DAG: %[[J:.+]] = "mirax.astype"(%[[K]]) {dtype = i32}
// TAKE-DAG: %[[G:.+]] = "mirax.scatter_add"(%[[Z]], %[[J]], %[[C]]) {axis = 0 : i64}
// TAKE: return %[[Y]], %[[G]]
func.func @take(%x: tensor<4x6xf32>, %i: tensor<2xi32>) -> tensor<2x6xf32> {
  %0 = "mirax.take"(%x, %i) {axis = 0 : i64} : (tensor<4x6xf32>, tensor<2xi32>) -> tensor<2x6xf32>
  return %0 : tensor<2x6xf32>
}

// concatenate: each operand gets its slice of the cotangent.
// CONCAT-LABEL: func.func @concat_vjp(
// CONCAT-SAME: %[[A:[^:]+]]: tensor<4x2xf32>, %[[B:[^:]+]]: tensor<4x3xf32>, %[[C:[^:]+]]: tensor<4x5xf32>)
// CONCAT-DAG: %[[GA:.+]] = "mirax.slice"(%[[C]]) {start = array<i64: 0, 0>, stop = array<i64: 4, 2>, strides = array<i64: 1, 1>}
// CONCAT-DAG: %[[GB:.+]] = "mirax.slice"(%[[C]]) {start = array<i64: 0, 2>, stop = array<i64: 4, 5>, strides = array<i64: 1, 1>}
// CONCAT: return %{{[^,]+}}, %[[GA]], %[[GB]]
func.func @concat(%a: tensor<4x2xf32>, %b: tensor<4x3xf32>) -> tensor<4x5xf32> {
  %0 = "mirax.concatenate"(%a, %b) {axis = 1 : i64} : (tensor<4x2xf32>, tensor<4x3xf32>) -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}

// INTERR: error: {{.*}}mirax-vjp: argument 1 of @int_arg has dtype int32; only floating-point and complex arguments can be differentiated
// UNKNOWN: error: {{.*}}no function @nope in the module
