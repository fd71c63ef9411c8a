// RUN: %mirax-opt %s --convert-mirax-to-linalg=target=gpu --mirax-fuse --mirax-gpu-map | FileCheck %s

// A sort is a rank per element (a row reduction over the row) and a placing reduction
// that reads the ranks along its own reduced dim: a workgroup of the placing kernel needs
// all of its row's ranks, so the rank reduction is a kernel of its own (fused in, each of
// the 300 workgroups of a row computed all 300 ranks: 300 times the work, and 78,603 loop
// iterations a thread, refused on lavapipe).
// CHECK-LABEL: func.func @sort_rows
// CHECK: %[[RANK:.+]] = scf.forall (%{{.+}}, %{{.+}}) in (6, 300)
// CHECK: linalg.generic {{.*}} ins(%{{.+}}, %{{.+}}, %{{.+}} : tensor<1x?xf32>, tensor<1x1xf32>, tensor<?xi32>)
// CHECK: mirax.gpu_kernel = 2 : i64}
// CHECK: %[[PLACE:.+]] = scf.forall (%{{.+}}, %{{.+}}) in (6, 300) shared_outs
// CHECK-NOT: xf32>
// CHECK: linalg.generic {{.*}} ins(%{{.+}}, %{{.+}} : tensor<1x?xi32>, tensor<?xi32>)
// CHECK: mirax.gpu_kernel = 1 : i64}
// CHECK: scf.forall (%{{.+}}, %{{.+}}) in (6, 2) shared_outs
// CHECK: mirax.gpu_kernel = 0 : i64}
func.func @sort_rows(%x: tensor<6x300xf32>) -> tensor<6x300xf32> {
  %0 = "mirax.sort"(%x) {axis = 1 : i64} : (tensor<6x300xf32>) -> tensor<6x300xf32>
  return %0 : tensor<6x300xf32>
}
