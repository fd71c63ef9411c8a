// RUN: %mirax-opt %s --mirax-shard-to-mpi | FileCheck %s
// RUN: %mirax-opt %s --mirax-shard-to-mpi --mirax-mpi-cpu-pipeline | FileCheck %s --check-prefix=LLVM

shard.grid @mesh(shape = 2)

// The collectives MLIR 22's convert-shard-to-mpi lacks become those it has: a gather is
// this process's block placed at its offset in zeros, summed over the grid.
// CHECK: module attributes {dlti.map = #dlti.map<"MPI:Implementation" = "OpenMPI">}
// CHECK-LABEL: func.func @gather
// CHECK-SAME: (%[[X:.+]]: tensor<2x5xf32>) -> tensor<4x5xf32>
// CHECK-DAG: %[[C2:.+]] = arith.constant 2 : index
// CHECK-DAG: %[[W:.+]] = mpi.comm_world : !mpi.comm
// CHECK: %{{.+}}, %[[RANK:.+]] = mpi.comm_rank(%[[W]])
// CHECK: %[[I:.+]] = arith.index_cast %[[RANK]] : i32 to index
// CHECK: %[[OFF:.+]] = arith.muli %[[I]], %[[C2]] : index
// CHECK: tensor.insert_slice %[[X]] into %{{.+}}[%[[OFF]], 0] [2, 5] [1, 1] : tensor<2x5xf32> into tensor<4x5xf32>
// CHECK-NOT: mpi.comm_split
// CHECK: mpi.allreduce(%[[B:.+]], %[[B]], MPI_SUM, %[[W]]) : memref<20xf32>, memref<20xf32>
// CHECK-NOT: shard.all
// CHECK: return
func.func @gather(%x: tensor<2x5xf32>) -> tensor<4x5xf32> {
  %0 = shard.all_gather %x on @mesh grid_axes = [0] gather_axis = 0 : tensor<2x5xf32> -> tensor<4x5xf32>
  return %0 : tensor<4x5xf32>
}

// A slice of a replicated value needs no communication: this process's rows.
// CHECK-LABEL: func.func @slice
// CHECK: %{{.+}}, %[[RANK:.+]] = mpi.comm_rank
// CHECK: %[[I:.+]] = arith.index_cast %[[RANK]] : i32 to index
// CHECK: %[[OFF:.+]] = arith.muli %[[I]], %{{.+}} : index
// CHECK: tensor.extract_slice %{{.+}}[0, %[[OFF]]] [4, 3] [1, 1] : tensor<4x6xf32> to tensor<4x3xf32>
// CHECK-NOT: mpi.allreduce
// CHECK: return
func.func @slice(%x: tensor<4x6xf32>) -> tensor<4x3xf32> {
  %0 = shard.all_slice %x on @mesh grid_axes = [0] slice_axis = 1 : tensor<4x6xf32> -> tensor<4x3xf32>
  return %0 : tensor<4x3xf32>
}

// Moving the split from rows to columns: gather the rows, keep this process's columns.
// CHECK-LABEL: func.func @move
// CHECK: tensor.insert_slice {{.+}} : tensor<2x4xi8> into tensor<4x4xi8>
// CHECK: mpi.allreduce({{.+}}, MPI_SUM, {{.+}}) : memref<16xi8>, memref<16xi8>
// CHECK: tensor.extract_slice {{.+}} : tensor<4x4xi8> to tensor<4x2xi8>
func.func @move(%x: tensor<2x4xi8>) -> tensor<4x2xi8> {
  %0 = shard.all_to_all %x on @mesh grid_axes = [0] split_axis = 1 concat_axis = 0 : tensor<2x4xi8> -> tensor<4x2xi8>
  return %0 : tensor<4x2xi8>
}

// A max over the grid; the MPI calls name Open MPI's own symbols (ompi_mpi_op_max, not
// the ompi_mpi_max MLIR 22 writes) and no communicator is split.
// CHECK-LABEL: func.func @maximum
// CHECK: mpi.allreduce({{.+}}, MPI_MAX, {{.+}}) : memref<3xf64>, memref<3xf64>
// LLVM-DAG: llvm.mlir.global external @ompi_mpi_op_max()
// LLVM-DAG: llvm.mlir.global external @ompi_mpi_op_sum()
// LLVM-DAG: llvm.mlir.global external @ompi_mpi_double()
// LLVM-DAG: llvm.mlir.global external @ompi_mpi_comm_world()
// LLVM-NOT: @ompi_mpi_max
// LLVM-NOT: MPI_Comm_split
// LLVM-LABEL: llvm.func @maximum
// LLVM: llvm.call @MPI_Allreduce
// LLVM-NOT: shard.
func.func @maximum(%x: tensor<3xf64>) -> tensor<3xf64> {
  %0 = shard.all_reduce %x on @mesh grid_axes = [0] reduction = max : tensor<3xf64> -> tensor<3xf64>
  return %0 : tensor<3xf64>
}
