// RUN: %mirax-opt %s -split-input-file --convert-mirax-to-linalg="target=gpu" | FileCheck %s
// RUN: %mirax-opt %s -split-input-file --mirax-gpu-pipeline="stage=gpu" | FileCheck %s --check-prefix=GPU

// The GPU's scan is blocked: 200 positions padded with the identity to 4 blocks of 64,
// each block a masked reduction over its 64 positions, the blocks' totals scanned
// exclusively (k < i) and each block's prefix added to it; no loop runs over the axis.
// The reduced position is each reduction's first loop: the GPU mapping gives each output
// a thread looping over it (a last reduction loop takes the row strategy: a workgroup
// per output).
// CHECK-DAG: #[[K:.+]] = affine_map<(d0, d1, d2, d3) -> (d0)>
// CHECK-DAG: #[[XK:.+]] = affine_map<(d0, d1, d2, d3) -> (d1, d2, d0)>
// CHECK-DAG: #[[OUT:.+]] = affine_map<(d0, d1, d2, d3) -> (d1, d2, d3)>
// CHECK-DAG: #[[XT:.+]] = affine_map<(d0, d1, d2) -> (d1, d2, d0)>
// CHECK-DAG: #[[T:.+]] = affine_map<(d0, d1, d2) -> (d1, d2)>
// CHECK-LABEL: func.func @cumsum_long
// CHECK: %[[FILL:.+]] = linalg.fill {{.*}} -> tensor<3x256xf32>
// CHECK: %[[PAD:.+]] = tensor.insert_slice %arg0 into %[[FILL]][0, 0] [3, 200] [1, 1]
// CHECK: %[[BLOCKS:.+]] = tensor.expand_shape %[[PAD]] {{\[}}[0], [1, 2]] output_shape [3, 4, 64]
// CHECK: %[[LOCAL:.+]] = linalg.generic {indexing_maps = [#[[K]], #[[XK]], #[[OUT]]], iterator_types = ["reduction", "parallel", "parallel", "parallel"]} ins(%{{.+}}, %[[BLOCKS]] : tensor<64xi32>, tensor<3x4x64xf32>)
// CHECK: %[[I:.+]] = linalg.index 3 : index
// CHECK: arith.cmpi ule, %{{.+}}, %[[I]]
// CHECK: %[[TOTALS:.+]] = linalg.generic {indexing_maps = [#[[XT]], #[[T]]], iterator_types = ["reduction", "parallel", "parallel"]} ins(%[[BLOCKS]] : tensor<3x4x64xf32>) outs(%{{.+}} : tensor<3x4xf32>)
// CHECK: %[[PREFIX:.+]] = linalg.generic {{.*}}ins(%{{.+}}, %[[TOTALS]] : tensor<4xi32>, tensor<3x4xf32>)
// CHECK: arith.cmpi ult
// CHECK: %[[SUM:.+]] = linalg.generic {{.*}}ins(%[[PREFIX]], %[[LOCAL]] : tensor<3x4xf32>, tensor<3x4x64xf32>)
// CHECK: %[[FLAT:.+]] = tensor.collapse_shape %[[SUM]] {{\[}}[0], [1, 2]] : tensor<3x4x64xf32> into tensor<3x256xf32>
// CHECK: tensor.extract_slice %[[FLAT]][0, 0] [3, 200] [1, 1] : tensor<3x256xf32> to tensor<3x200xf32>
// CHECK-NOT: scf.for
// On the GPU the 3x4x64 block scans are a thread each (64x4 threads, a block a row;
// each fills its own output first, one barrier), without workgroup memory.
// GPU-LABEL: func.func @cumsum_long
// GPU: gpu.launch_func @{{.+}} blocks in (%c3, %c1, %c1) threads in (%c64, %c4, %c1) args(%{{.+}} : memref<3x4x64xf32>, %{{.+}} : memref<64xi32>, %{{.+}} : memref<3x256xf32>)
// GPU-NOT: , 3>
// GPU-LABEL: func.func @cummax_reverse_exclusive
func.func @cumsum_long(%x: tensor<3x200xf32>) -> tensor<3x200xf32> {
  %0 = "mirax.cumsum"(%x) {axis = 1 : i64, reverse = false, inclusive = true} : (tensor<3x200xf32>) -> tensor<3x200xf32>
  return %0 : tensor<3x200xf32>
}

// -----

// A reversed exclusive running max along axis 0 of 4,096 (64 blocks of 64, no padding):
// the blocks reversed and exclusive (k > i), their prefixes reversed exclusive too.
// CHECK-LABEL: func.func @cummax_reverse_exclusive
// CHECK-NOT: tensor.insert_slice
// CHECK: tensor.expand_shape %arg0 {{\[}}[0, 1], [2]] output_shape [64, 64, 2]
// CHECK: arith.cmpi ugt
// CHECK: arith.maximumf
// CHECK: arith.cmpi ugt
// CHECK: tensor.collapse_shape
// CHECK-NOT: tensor.extract_slice
// CHECK: return
func.func @cummax_reverse_exclusive(%x: tensor<4096x2xf32>) -> tensor<4096x2xf32> {
  %0 = "mirax.cummax"(%x) {axis = 0 : i64, reverse = true, inclusive = false} : (tensor<4096x2xf32>) -> tensor<4096x2xf32>
  return %0 : tensor<4096x2xf32>
}

// -----

// Up to 64 positions: one masked reduction, as before.
// CHECK-LABEL: func.func @cumsum_short
// CHECK-NOT: tensor.expand_shape
// CHECK: linalg.generic {{.*}}iterator_types = ["reduction", "parallel", "parallel"]}
// CHECK: arith.cmpi ule
// CHECK-NOT: linalg.generic
// CHECK: return
func.func @cumsum_short(%x: tensor<3x64xi32>) -> tensor<3x64xi32> {
  %0 = "mirax.cumsum"(%x) {axis = 1 : i64, reverse = false, inclusive = true} : (tensor<3x64xi32>) -> tensor<3x64xi32>
  return %0 : tensor<3x64xi32>
}
