// RUN: mlir-opt --irdl-file=%irdl %s | FileCheck %s
// RUN: mlir-opt --irdl-file=%irdl %s | %mirax-opt | FileCheck %s

// Stock mlir-opt loads the mirax dialect from its IRDL file and parses mirax IR.
// CHECK-LABEL: func.func @stock
// CHECK-SAME: (%[[X:.+]]: tensor<4xf32>, %[[C:.+]]: tensor<4xi1>)
// CHECK: %[[E:.+]] = "mirax.exp"(%[[X]]) : (tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[W:.+]] = "mirax.where"(%[[C]], %[[E]], %[[X]])
// CHECK: "mirax.reshape"(%[[W]]) {shape = array<i64: 2, 2>}
func.func @stock(%x: tensor<4xf32>, %c: tensor<4xi1>) -> tensor<2x2xf32> {
  %0 = "mirax.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  %1 = "mirax.where"(%c, %0, %x) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = "mirax.reshape"(%1) {shape = array<i64: 2, 2>} : (tensor<4xf32>) -> tensor<2x2xf32>
  return %2 : tensor<2x2xf32>
}
