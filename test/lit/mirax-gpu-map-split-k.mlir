// RUN: %mirax-opt %s -split-input-file --convert-mirax-to-linalg --mirax-fuse --mirax-gpu-map | FileCheck %s

// A tiled matmul with K past 512 is split: K's 8 pieces of 512 become a batch (A's
// pieces moved next to the batch by a transpose kernel, B's by a reshape), the batched
// product is tiled as any (8 x 2 x 2 workgroups of 16x16 threads, each walking 512 of K
// instead of 4 workgroups walking 4096), and a reduction sums the 8 partial products
// into C's init.
// CHECK-LABEL: func.func @split_k
// CHECK: tensor.expand_shape %arg0 {{\[}}[0], [1, 2]] output_shape [64, 8, 512]
// CHECK: linalg.transpose {{.*}} permutation = [1, 0, 2]
// CHECK: tensor.expand_shape %arg1 {{\[}}[0, 1], [2]] output_shape [8, 512, 64]
// CHECK: scf.forall (%{{.+}}, %{{.+}}, %{{.+}}) in (8, 2, 2)
// CHECK: linalg.batch_matmul
// CHECK: mirax.gpu_block = array<i64: 16, 16, 1>
// CHECK: tensor.expand_shape %{{.+}} {{\[}}[0, 1], [2], [3]] output_shape [1, 8, 64, 64]
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "reduction", "parallel", "parallel"]} ins(%{{.+}} : tensor<1x8x1x1xf32>)
// CHECK: arith.addf
// CHECK: tensor.collapse_shape %{{.+}} {{\[}}[0, 1], [2]] : tensor<1x64x64xf32> into tensor<64x64xf32>
func.func @split_k(%a: tensor<64x4096xf32>, %b: tensor<4096x64xf32>) -> tensor<64x64xf32> {
  %0 = "mirax.matmul"(%a, %b) : (tensor<64x4096xf32>, tensor<4096x64xf32>) -> tensor<64x64xf32>
  return %0 : tensor<64x64xf32>
}

// -----

// K of 512 or less: one tiled matmul, as before.
// CHECK-LABEL: func.func @short_k
// CHECK-NOT: linalg.transpose
// CHECK: linalg.matmul
// CHECK-NOT: linalg.batch_matmul
func.func @short_k(%a: tensor<64x512xf32>, %b: tensor<512x64xf32>) -> tensor<64x64xf32> {
  %0 = "mirax.matmul"(%a, %b) : (tensor<64x512xf32>, tensor<512x64xf32>) -> tensor<64x64xf32>
  return %0 : tensor<64x64xf32>
}
