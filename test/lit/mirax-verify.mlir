// RUN: %mirax-opt %s -split-input-file --no-mirax-verify --mirax-verify -verify-diagnostics | FileCheck %s
// RUN: not %mirax-opt %s -split-input-file 2>&1 >/dev/null | FileCheck %s --check-prefix=ERR

// Well-typed ops pass through unchanged.
// CHECK-LABEL: func.func @ok
// CHECK: "mirax.matmul"
func.func @ok(%a: tensor<2x3xf32>, %b: tensor<3x4xf32>) -> tensor<2x4xf32> {
  %0 = "mirax.matmul"(%a, %b) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

// The pass reports each bad op at its own location.
// ERR: mirax-verify.mlir:[[# @LINE + 4]]:8: error: mirax.matmul
// ERR: mirax-verify.mlir:[[# @LINE + 5]]:8: error: 'mirax.exp' op result type tensor<3xf32> differs from the inferred type tensor<4xf32>
func.func @two_errors(%a: tensor<2x3xf32>, %x: tensor<4xf32>) -> (tensor<2x2xf32>, tensor<3xf32>) {
  // expected-error @+1 {{mirax.matmul}}
  %0 = "mirax.matmul"(%a, %a) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x2xf32>
  // expected-error @+1 {{'mirax.exp' op result type tensor<3xf32> differs from the inferred type tensor<4xf32>}}
  %1 = "mirax.exp"(%x) : (tensor<4xf32>) -> tensor<3xf32>
  return %0, %1 : tensor<2x2xf32>, tensor<3xf32>
}

// -----

func.func @arange_rank() -> tensor<2x3xf32> {
  // expected-error @+1 {{'mirax.arange' op result must be 1-d, got tensor<2x3xf32>}}
  %0 = "mirax.arange"() {start = 0.0 : f64, step = 1.0 : f64} : () -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}
