// RUN: %mirax-opt %s -split-input-file --convert-mirax-to-linalg --mirax-reshape-views | FileCheck %s
// RUN: %mirax-opt %s -split-input-file --mirax-cpu-pipeline | FileCheck %s --check-prefix=PIPE

// A static reshape: a collapse to one dim and an expand (views bufferization and
// mirax-results-in-place follow), so a returned reshape is computed in the caller's buffer.
// CHECK-LABEL: func.func @reshape
// CHECK-SAME:    (%[[X:.+]]: tensor<4x6xf32>)
// CHECK-NOT:     tensor.reshape
// CHECK:         %[[M:.+]] = linalg.generic {{.+}} ins(%[[X]], %[[X]] : tensor<4x6xf32>, tensor<4x6xf32>)
// CHECK:         %[[C:.+]] = tensor.collapse_shape %[[M]] {{\[\[}}0, 1]] : tensor<4x6xf32> into tensor<24xf32>
// CHECK:         %[[E:.+]] = tensor.expand_shape %[[C]] {{\[\[}}0, 1, 2]] output_shape [2, 3, 4] : tensor<24xf32> into tensor<2x3x4xf32>
// CHECK:         return %[[E]]
// The doubled values written straight into the out-parameter's view: no copy, no allocation.
// PIPE-LABEL:  llvm.func @reshape
// PIPE-NOT:      llvm.call @malloc
// PIPE-NOT:      memcpy
// PIPE:          llvm.return
func.func @reshape(%x: tensor<4x6xf32>) -> tensor<2x3x4xf32> {
  %0 = "mirax.multiply"(%x, %x) : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<4x6xf32>
  %1 = "mirax.reshape"(%0) {shape = array<i64: 2, 3, 4>} : (tensor<4x6xf32>) -> tensor<2x3x4xf32>
  return %1 : tensor<2x3x4xf32>
}

// -----

// To and from one dim: only the expand, or only the collapse.
// CHECK-LABEL: func.func @flatten
// CHECK:         tensor.collapse_shape %{{.+}} {{\[\[}}0, 1]] : tensor<4x6xf32> into tensor<24xf32>
// CHECK-NOT:     tensor.expand_shape
// CHECK-LABEL: func.func @unflatten
// CHECK-NOT:     tensor.collapse_shape
// CHECK:         tensor.expand_shape %{{.+}} {{\[\[}}0, 1]] output_shape [4, 6] : tensor<24xf32> into tensor<4x6xf32>
func.func @flatten(%x: tensor<4x6xf32>) -> tensor<24xf32> {
  %s = arith.constant dense<[24]> : tensor<1xi64>
  %0 = tensor.reshape %x(%s) : (tensor<4x6xf32>, tensor<1xi64>) -> tensor<24xf32>
  return %0 : tensor<24xf32>
}
func.func @unflatten(%x: tensor<24xf32>) -> tensor<4x6xf32> {
  %s = arith.constant dense<[4, 6]> : tensor<2xi64>
  %0 = tensor.reshape %x(%s) : (tensor<24xf32>, tensor<2xi64>) -> tensor<4x6xf32>
  return %0 : tensor<4x6xf32>
}

// -----

// 0-d and dynamic shapes stay reshapes.
// CHECK-LABEL: func.func @scalar
// CHECK:         tensor.reshape
// CHECK-LABEL: func.func @dynamic
// CHECK:         tensor.reshape
func.func @scalar(%x: tensor<1x1xf32>) -> tensor<f32> {
  %s = arith.constant dense<> : tensor<0xi64>
  %0 = tensor.reshape %x(%s) : (tensor<1x1xf32>, tensor<0xi64>) -> tensor<f32>
  return %0 : tensor<f32>
}
func.func @dynamic(%x: tensor<?xf32>, %s: tensor<2xi64>) -> tensor<?x?xf32> {
  %0 = tensor.reshape %x(%s) : (tensor<?xf32>, tensor<2xi64>) -> tensor<?x?xf32>
  return %0 : tensor<?x?xf32>
}
