// RUN: %mirax-opt %s -split-input-file -verify-diagnostics

func.func @add_shape_mismatch(%a: tensor<4xf32>, %b: tensor<3xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{mirax.add: operand shapes differ: (4,), (3,)}}
  %0 = "mirax.add"(%a, %b) : (tensor<4xf32>, tensor<3xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @add_dtype_mismatch(%a: tensor<4xf32>, %b: tensor<4xi32>) -> tensor<4xf32> {
  // expected-error @below {{mirax.add: operand dtypes differ: float32, int32}}
  %0 = "mirax.add"(%a, %b) : (tensor<4xf32>, tensor<4xi32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @add_wrong_result(%a: tensor<4xf32>) -> tensor<4xf64> {
  %0 = "mirax.add"(%a, %a) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf64>
  // expected-error @above {{result type tensor<4xf64> differs from the inferred type tensor<4xf32>}}
  return %0 : tensor<4xf64>
}

// -----

func.func @bad_permutation(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %0 = "mirax.transpose"(%a) {permutation = array<i64: 0, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32> // expected-error {{(0, 0) is not a permutation of the 2 axes}}
  return %0 : tensor<3x2xf32>
}

// -----

func.func @where_needs_bool(%c: tensor<4xf32>, %x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{mirax.where: the condition must be bool, got float32}}
  %0 = "mirax.where"(%c, %x, %x) : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @wrong_operand_count(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{op expects exactly 2 operands, but got 1}}
  %0 = "mirax.add"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @unknown_op(%a: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{unregistered operation 'mirax.frobnicate'}}
  %0 = "mirax.frobnicate"(%a) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @non_tensor_operand(%a: f32) -> tensor<f32> {
  // expected-error @+1 {{expected base type 'builtin.tensor' but got 'builtin.f32'}}
  %0 = "mirax.exp"(%a) : (f32) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

func.func @dynamic_shape(%a: tensor<?xf32>) -> tensor<?xf32> {
  // expected-error @+1 {{operand #0 must have a static shape, got tensor<?xf32>}}
  %0 = "mirax.exp"(%a) : (tensor<?xf32>) -> tensor<?xf32>
  return %0 : tensor<?xf32>
}

// -----

func.func @not_a_mirax_dtype(%a: tensor<4xi3>) -> tensor<4xi3> {
  // expected-error @+1 {{mirax has no dtype for MLIR element type 'i3'}}
  %0 = "mirax.negative"(%a) : (tensor<4xi3>) -> tensor<4xi3>
  return %0 : tensor<4xi3>
}

// -----

func.func @bad_reshape(%a: tensor<2x3xf32>) -> tensor<5xf32> {
  // expected-error @+1 {{cannot reshape array of shape (2, 3) into (5,)}}
  %0 = "mirax.reshape"(%a) {shape = array<i64: 5>} : (tensor<2x3xf32>) -> tensor<5xf32>
  return %0 : tensor<5xf32>
}

// -----

func.func @missing_attribute(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {
  // expected-error @+1 {{attribute "permutation" is expected but not provided}}
  %0 = "mirax.transpose"(%a) : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// -----

func.func @constant_type(%a: tensor<2xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{value type tensor<2xf32> differs from result type tensor<3xf32>}}
  %0 = "mirax.constant"() {value = dense<1.0> : tensor<2xf32>} : () -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @complex_constant_type(%a: tensor<2xcomplex<f32>>) -> tensor<3xcomplex<f32>> {
  // expected-error @+1 {{value type tensor<2xcomplex<f32>> differs from result type tensor<3xcomplex<f32>>}}
  %1 = "mirax.constant"() {value = dense<(1.000000e+00,2.000000e+00)> : tensor<2xcomplex<f32>>} : () -> tensor<3xcomplex<f32>>
  return %1 : tensor<3xcomplex<f32>>
}

// -----

// A dense array of `index` aborts MLIR's own parser (an assertion in these wheels):
// mirax-opt refuses it before parsing, with a diagnostic (found by the .mlir fuzzer).
func.func @index_array(%x: tensor<2x3xf32>) -> tensor<3xf32> {
  // expected-error@+1 {{dense array element type must be an integer or float type, got 'index'}}
  %0 = "mirax.sum"(%x) {axes = array<index: 0>, keepdims = false} : (tensor<2x3xf32>) -> tensor<3xf32>
  return %0 : tensor<3xf32>
}
