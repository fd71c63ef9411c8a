// RUN: %mirax-opt %s --mirax-shard="function=rows in-shardings=0,- out-shardings=-" | FileCheck %s --check-prefix=ROWS
// RUN: %mirax-opt %s --mirax-shard="function=contract grid=4 in-shardings=1,0 out-shardings=-" | FileCheck %s --check-prefix=CONTRACT
// RUN: %mirax-opt %s --mirax-shard="function=loss in-shardings=0,- out-shardings=-" | FileCheck %s --check-prefix=LOSS

// A matmul with the rows of A split over 2 processes: each multiplies its block of
// rows, and the replicated result is gathered.
// ROWS: shard.grid @mesh(shape = 2)
// ROWS-LABEL: func.func @rows
// ROWS-SAME: (%[[A:.+]]: tensor<4x6xf32>, %[[B:.+]]: tensor<6x5xf32>) -> tensor<8x5xf32>
// ROWS: %[[M:.+]] = linalg.matmul ins(%[[A]], %[[B]] : tensor<4x6xf32>, tensor<6x5xf32>)
// ROWS: %[[G:.+]] = shard.all_gather %[[M]] on @mesh grid_axes = [0] gather_axis = 0 : tensor<4x5xf32> -> tensor<8x5xf32>
// ROWS: return %[[G]]
func.func @rows(%a: tensor<8x6xf32>, %b: tensor<6x5xf32>) -> tensor<8x5xf32> {
  %0 = "mirax.matmul"(%a, %b) : (tensor<8x6xf32>, tensor<6x5xf32>) -> tensor<8x5xf32>
  return %0 : tensor<8x5xf32>
}

// The contraction split over 4 processes: partial products (only process 0 keeps the
// accumulator's initial value), summed by one all_reduce.
// CONTRACT: shard.grid @mesh(shape = 4)
// CONTRACT-LABEL: func.func @contract
// CONTRACT-SAME: (%[[A:.+]]: tensor<3x2xf32>, %[[B:.+]]: tensor<2x5xf32>) -> tensor<3x5xf32>
// CONTRACT: shard.process_multi_index on @mesh
// CONTRACT: %[[M:.+]] = linalg.matmul ins(%[[A]], %[[B]] : tensor<3x2xf32>, tensor<2x5xf32>)
// CONTRACT: %[[R:.+]] = shard.all_reduce %[[M]] on @mesh grid_axes = [0] : tensor<3x5xf32> -> tensor<3x5xf32>
// CONTRACT: return %[[R]]
func.func @contract(%a: tensor<3x8xf32>, %b: tensor<8x5xf32>) -> tensor<3x5xf32> {
  %0 = "mirax.matmul"(%a, %b) : (tensor<3x8xf32>, tensor<8x5xf32>) -> tensor<3x5xf32>
  return %0 : tensor<3x5xf32>
}

// Data parallel: the batch split over 2 processes. The broadcast weight is sliced to
// this process's rows (no communication), the product and the sum run on the block, and
// the partial sums meet in one all_reduce before the division by the whole count (the
// splat constant becomes a fill the partitioner can place).
// LOSS-LABEL: func.func @loss
// LOSS-SAME: (%[[X:.+]]: tensor<2x3xf32>, %{{.+}}: tensor<3xf32>) -> tensor<f32>
// LOSS-NOT: shard.all_gather
// LOSS: %[[W:.+]] = shard.all_slice %{{.+}} on @mesh grid_axes = [0] slice_axis = 0 : tensor<4x3xf32> -> tensor<2x3xf32>
// LOSS: linalg.generic
// LOSS-SAME: ins(%[[X]], %[[W]] : tensor<2x3xf32>, tensor<2x3xf32>)
// LOSS: %[[S:.+]] = linalg.generic {{.+}} iterator_types = ["reduction", "reduction"]
// LOSS: %[[R:.+]] = shard.all_reduce %[[S]] on @mesh grid_axes = [0] : tensor<f32> -> tensor<f32>
// LOSS: arith.divf
// LOSS-NOT: shard.all
// LOSS: return
func.func @loss(%x: tensor<4x3xf32>, %w: tensor<3xf32>) -> tensor<f32> {
  %0 = "mirax.broadcast_to"(%w) {shape = array<i64: 4, 3>} : (tensor<3xf32>) -> tensor<4x3xf32>
  %1 = "mirax.multiply"(%x, %0) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %2 = "mirax.sum"(%1) {axes = array<i64: 0, 1>, keepdims = false} : (tensor<4x3xf32>) -> tensor<f32>
  %3 = "mirax.constant"() {value = dense<1.200000e+01> : tensor<f32>} : () -> tensor<f32>
  %4 = "mirax.divide"(%2, %3) : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %4 : tensor<f32>
}
