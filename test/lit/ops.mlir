// RUN: %mirax-opt %s -split-input-file | %mirax-opt -split-input-file | FileCheck %s

// CHECK-LABEL: func.func @constant
// CHECK: %[[C:.+]] = "mirax.constant"() {value = dense<{{\[}}[1.000000e+00, 2.000000e+00], [3.000000e+00, 4.000000e+00]]> : tensor<2x2xf32>} : () -> tensor<2x2xf32>
// CHECK: "mirax.constant"() {value = dense<true> : tensor<3xi1>} : () -> tensor<3xi1>
// CHECK: "mirax.constant"() {value = dense<7> : tensor<ui8>} : () -> tensor<ui8>
// CHECK: return %[[C]]
func.func @constant() -> tensor<2x2xf32> {
  %0 = "mirax.constant"() {value = dense<[[1.0, 2.0], [3.0, 4.0]]> : tensor<2x2xf32>} : () -> tensor<2x2xf32>
  %1 = "mirax.constant"() {value = dense<true> : tensor<3xi1>} : () -> tensor<3xi1>
  %2 = "mirax.constant"() {value = dense<7> : tensor<ui8>} : () -> tensor<ui8>
  return %0 : tensor<2x2xf32>
}

// -----

// CHECK-LABEL: func.func @arange
// CHECK: "mirax.arange"() {start = 1.000000e+00 : f64, step = 5.000000e-01 : f64} : () -> tensor<6xf32>
func.func @arange() -> tensor<6xf32> {
  %0 = "mirax.arange"() {start = 1.0 : f64, step = 0.5 : f64} : () -> tensor<6xf32>
  return %0 : tensor<6xf32>
}

// -----

// CHECK-LABEL: func.func @shape_ops
// CHECK-SAME: (%[[X:.+]]: tensor<2x3xf32>)
// CHECK: %[[R:.+]] = "mirax.reshape"(%[[X]]) {shape = array<i64: 3, 2>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
// CHECK: %[[B:.+]] = "mirax.broadcast_to"(%[[R]]) {shape = array<i64: 4, 3, 2>} : (tensor<3x2xf32>) -> tensor<4x3x2xf32>
// CHECK: %[[T:.+]] = "mirax.transpose"(%[[B]]) {permutation = array<i64: 2, 0, 1>} : (tensor<4x3x2xf32>) -> tensor<2x4x3xf32>
// CHECK: %[[A:.+]] = "mirax.astype"(%[[T]]) {dtype = f16} : (tensor<2x4x3xf32>) -> tensor<2x4x3xf16>
// CHECK: return %[[A]]
func.func @shape_ops(%x: tensor<2x3xf32>) -> tensor<2x4x3xf16> {
  %0 = "mirax.reshape"(%x) {shape = array<i64: 3, 2>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %1 = "mirax.broadcast_to"(%0) {shape = array<i64: 4, 3, 2>} : (tensor<3x2xf32>) -> tensor<4x3x2xf32>
  %2 = "mirax.transpose"(%1) {permutation = array<i64: 2, 0, 1>} : (tensor<4x3x2xf32>) -> tensor<2x4x3xf32>
  %3 = "mirax.astype"(%2) {dtype = f16} : (tensor<2x4x3xf32>) -> tensor<2x4x3xf16>
  return %3 : tensor<2x4x3xf16>
}

// -----

// CHECK-LABEL: func.func @unary
// CHECK-SAME: (%[[X:.+]]: tensor<4xf32>)
// CHECK: %[[E:.+]] = "mirax.exp"(%[[X]]) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[L:.+]] = "mirax.log"(%[[E]])
// CHECK: %[[T:.+]] = "mirax.tanh"(%[[L]])
// CHECK: %[[N:.+]] = "mirax.negative"(%[[T]])
// CHECK: %[[S:.+]] = "mirax.sqrt"(%[[N]])
// CHECK: %[[F:.+]] = "mirax.erf"(%[[S]])
// CHECK: %[[G:.+]] = "mirax.stop_gradient"(%[[F]])
// CHECK: return %[[G]]
func.func @unary(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "mirax.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "mirax.log"(%0) : (tensor<4xf32>) -> tensor<4xf32>
  %2 = "mirax.tanh"(%1) : (tensor<4xf32>) -> tensor<4xf32>
  %3 = "mirax.negative"(%2) : (tensor<4xf32>) -> tensor<4xf32>
  %4 = "mirax.sqrt"(%3) : (tensor<4xf32>) -> tensor<4xf32>
  %5 = "mirax.erf"(%4) : (tensor<4xf32>) -> tensor<4xf32>
  %6 = "mirax.stop_gradient"(%5) : (tensor<4xf32>) -> tensor<4xf32>
  return %6 : tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @binary
// CHECK-SAME: (%[[A:.+]]: tensor<2x3xi32>, %[[B:.+]]: tensor<2x3xi32>)
// CHECK: %[[S:.+]] = "mirax.add"(%[[A]], %[[B]]) : (tensor<2x3xi32>, tensor<2x3xi32>) -> tensor<2x3xi32>
// CHECK: %[[D:.+]] = "mirax.subtract"(%[[S]], %[[B]])
// CHECK: %[[M:.+]] = "mirax.multiply"(%[[D]], %[[A]])
// CHECK: %[[X:.+]] = "mirax.maximum"(%[[M]], %[[B]])
// CHECK: %[[R:.+]] = "mirax.remainder"(%[[X]], %[[B]])
// CHECK: return %[[R]]
func.func @binary(%a: tensor<2x3xi32>, %b: tensor<2x3xi32>) -> tensor<2x3xi32> {
  %0 = "mirax.add"(%a, %b) : (tensor<2x3xi32>, tensor<2x3xi32>) -> tensor<2x3xi32>
  %1 = "mirax.subtract"(%0, %b) : (tensor<2x3xi32>, tensor<2x3xi32>) -> tensor<2x3xi32>
  %2 = "mirax.multiply"(%1, %a) : (tensor<2x3xi32>, tensor<2x3xi32>) -> tensor<2x3xi32>
  %3 = "mirax.maximum"(%2, %b) : (tensor<2x3xi32>, tensor<2x3xi32>) -> tensor<2x3xi32>
  %4 = "mirax.remainder"(%3, %b) : (tensor<2x3xi32>, tensor<2x3xi32>) -> tensor<2x3xi32>
  return %4 : tensor<2x3xi32>
}

// -----

// CHECK-LABEL: func.func @compare_and_where
// CHECK-SAME: (%[[A:.+]]: tensor<4xf32>, %[[B:.+]]: tensor<4xf32>)
// CHECK: %[[LT:.+]] = "mirax.less"(%[[A]], %[[B]]) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
// CHECK: %[[GE:.+]] = "mirax.greater_equal"(%[[A]], %[[B]]) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
// CHECK: %[[EQ:.+]] = "mirax.equal"(%[[A]], %[[B]]) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
// CHECK: %[[OR:.+]] = "mirax.logical_or"(%[[LT]], %[[EQ]]) : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
// CHECK: %[[NOT:.+]] = "mirax.logical_not"(%[[GE]]) : (tensor<4xi1>) -> tensor<4xi1>
// CHECK: %[[W:.+]] = "mirax.where"(%[[OR]], %[[A]], %[[B]]) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK: return %[[W]], %[[NOT]]
func.func @compare_and_where(%a: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xi1>) {
  %0 = "mirax.less"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %1 = "mirax.greater_equal"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %2 = "mirax.equal"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %3 = "mirax.logical_or"(%0, %2) : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  %4 = "mirax.logical_not"(%1) : (tensor<4xi1>) -> tensor<4xi1>
  %5 = "mirax.where"(%3, %a, %b) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %5, %4 : tensor<4xf32>, tensor<4xi1>
}

// -----

// CHECK-LABEL: func.func @unsigned
// CHECK: "mirax.add"(%{{.+}}, %{{.+}}) : (tensor<4xui8>, tensor<4xui8>) -> tensor<4xui8>
// CHECK: "mirax.astype"(%{{.+}}) {dtype = f32} : (tensor<4xui8>) -> tensor<4xf32>
func.func @unsigned(%a: tensor<4xui8>) -> tensor<4xf32> {
  %0 = "mirax.add"(%a, %a) : (tensor<4xui8>, tensor<4xui8>) -> tensor<4xui8>
  %1 = "mirax.astype"(%0) {dtype = f32} : (tensor<4xui8>) -> tensor<4xf32>
  return %1 : tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @reductions
// CHECK: "mirax.sum"(%{{.+}}) {axes = array<i64: 1>, keepdims = false} : (tensor<2x3xf32>) -> tensor<2xf32>
// CHECK: "mirax.max"(%{{.+}}) {axes = array<i64: 0, 1>, keepdims = true} : (tensor<2x3xf32>) -> tensor<1x1xf32>
// CHECK: "mirax.argmax"(%{{.+}}) {axes = array<i64: 1>, keepdims = false} : (tensor<2x3xf32>) -> tensor<2xui32>
func.func @reductions(%x: tensor<2x3xf32>) -> (tensor<2xf32>, tensor<1x1xf32>, tensor<2xui32>) {
  %0 = "mirax.sum"(%x) {axes = array<i64: 1>, keepdims = false} : (tensor<2x3xf32>) -> tensor<2xf32>
  %1 = "mirax.max"(%x) {axes = array<i64: 0, 1>, keepdims = true} : (tensor<2x3xf32>) -> tensor<1x1xf32>
  %2 = "mirax.argmax"(%x) {axes = array<i64: 1>, keepdims = false} : (tensor<2x3xf32>) -> tensor<2xui32>
  return %0, %1, %2 : tensor<2xf32>, tensor<1x1xf32>, tensor<2xui32>
}

// -----

// CHECK-LABEL: func.func @matmul
// CHECK: "mirax.matmul"(%{{.+}}, %{{.+}}) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
func.func @matmul(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) -> tensor<2x4xf32> {
  %0 = "mirax.matmul"(%a, %b) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

// CHECK-LABEL: func.func @indexing
// CHECK: "mirax.slice"(%{{.+}}) {start = array<i64: 0, 1>, stop = array<i64: 4, 3>, strides = array<i64: 2, 1>} : (tensor<4x3xf32>) -> tensor<2x2xf32>
// CHECK: "mirax.concatenate"(%{{.+}}, %{{.+}}) {axis = 0 : i64} : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<8x3xf32>
// CHECK: "mirax.pad"(%{{.+}}, %{{.+}}) {high = array<i64: 0, 2>, low = array<i64: 1, 0>} : (tensor<4x3xf32>, tensor<f32>) -> tensor<5x5xf32>
// CHECK: "mirax.take"(%{{.+}}, %{{.+}}) {axis = 0 : i64} : (tensor<4x3xf32>, tensor<2xi32>) -> tensor<2x3xf32>
// CHECK: "mirax.scatter_add"(%{{.+}}, %{{.+}}, %{{.+}}) {axis = 0 : i64} : (tensor<4x3xf32>, tensor<2xi32>, tensor<2x3xf32>) -> tensor<4x3xf32>
func.func @indexing(%x: tensor<4x3xf32>, %v: tensor<f32>, %i: tensor<2xi32>, %u: tensor<2x3xf32>) -> (tensor<2x2xf32>, tensor<8x3xf32>, tensor<5x5xf32>, tensor<2x3xf32>, tensor<4x3xf32>) {
  %0 = "mirax.slice"(%x) {start = array<i64: 0, 1>, stop = array<i64: 4, 3>, strides = array<i64: 2, 1>} : (tensor<4x3xf32>) -> tensor<2x2xf32>
  %1 = "mirax.concatenate"(%x, %x) {axis = 0 : i64} : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<8x3xf32>
  %2 = "mirax.pad"(%x, %v) {low = array<i64: 1, 0>, high = array<i64: 0, 2>} : (tensor<4x3xf32>, tensor<f32>) -> tensor<5x5xf32>
  %3 = "mirax.take"(%x, %i) {axis = 0 : i64} : (tensor<4x3xf32>, tensor<2xi32>) -> tensor<2x3xf32>
  %4 = "mirax.scatter_add"(%x, %i, %u) {axis = 0 : i64} : (tensor<4x3xf32>, tensor<2xi32>, tensor<2x3xf32>) -> tensor<4x3xf32>
  return %0, %1, %2, %3, %4 : tensor<2x2xf32>, tensor<8x3xf32>, tensor<5x5xf32>, tensor<2x3xf32>, tensor<4x3xf32>
}
