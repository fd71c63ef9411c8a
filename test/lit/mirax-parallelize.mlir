// RUN: %mirax-opt %s -split-input-file --convert-mirax-to-linalg --mirax-parallelize=threads=2 | FileCheck %s
// RUN: %mirax-opt %s -split-input-file --mirax-cpu-pipeline=threads=2 | FileCheck %s --check-prefix=OMP
// RUN: %mirax-opt %s -split-input-file --mirax-cpu-pipeline=threads=1 | FileCheck %s --check-prefix=SERIAL
// RUN: %mirax-opt %s -split-input-file --convert-mirax-to-linalg --mirax-parallelize="threads=2 stream-bytes=1048576 stream-tasks=8" | FileCheck %s --check-prefix=TASKS
// RUN: %mirax-opt %s -split-input-file --mirax-cpu-pipeline="threads=2 stream-bytes=1048576" | FileCheck %s --check-prefix=DYN

// A large elementwise op is split over its outermost loop between the two threads;
// the CPU pipeline makes the forall an OpenMP parallel region whose threads take their
// share by thread number (mirax-static-partition: no __kmpc_for_static_init).
// CHECK-LABEL: func.func @big
// CHECK: scf.forall (%{{.+}}) in (2)
// CHECK: linalg.generic {{.*}} ins(%{{.+}} : tensor<16x256x256xf32>)
// CHECK: scf.forall.in_parallel
// OMP-LABEL: llvm.func @big
// OMP: omp.parallel
// OMP-NEXT: llvm.call @omp_get_thread_num()
// OMP-NOT: omp.wsloop
// OMP: omp.terminator
// SERIAL-LABEL: llvm.func @big
// SERIAL-NOT: omp.
// SERIAL: llvm.return
// An output streamed to memory (8 MiB, over `stream-bytes`) is split into up to 8 tasks a
// thread, as many as divide its outermost dim (32: 16 tasks of 2x256x256), and the CPU
// pipeline hands them out dynamically (mirax-task-counter: each thread takes the next
// task by an atomic add on a counter): a thread whose core another process holds takes
// fewer. Below that size (the default: the last-level cache) the split and the static
// schedule stay as above.
// TASKS-LABEL: func.func @big
// TASKS: scf.forall (%{{.+}}) in (16)
// TASKS: linalg.generic {{.*}} ins(%{{.+}} : tensor<2x256x256xf32>)
// DYN-LABEL: llvm.func @big
// DYN: %[[NT:.+]] = llvm.mlir.constant(16 : index) : i64
// DYN: omp.parallel {
// DYN-NOT: omp.wsloop
// DYN: %[[K:.+]] = llvm.atomicrmw add
// DYN-NEXT: llvm.icmp "slt" %[[K]], %[[NT]] : i64
// DYN: llvm.intr.masked.store
// DYN: llvm.store {{.*}}nontemporal
func.func @big(%x: tensor<32x256x256xf32>) -> tensor<32x256x256xf32> attributes {llvm.emit_c_interface} {
  %0 = "mirax.exp"(%x) : (tensor<32x256x256xf32>) -> tensor<32x256x256xf32>
  return %0 : tensor<32x256x256xf32>
}

// -----

// Below the tuning table's threshold (1M iterations) kernels stay serial.
// CHECK-LABEL: func.func @small
// CHECK-NOT: scf.forall
// CHECK: linalg.generic
// OMP-LABEL: llvm.func @small
// OMP-NOT: omp.parallel
// OMP: llvm.return
// SERIAL-LABEL: llvm.func @small
func.func @small(%x: tensor<64x64xf32>) -> tensor<64x64xf32> attributes {llvm.emit_c_interface} {
  %0 = "mirax.exp"(%x) : (tensor<64x64xf32>) -> tensor<64x64xf32>
  return %0 : tensor<64x64xf32>
}

// -----

// A streamed output whose outermost dim is divided by no multiple of the threads (2 x 2..8)
// keeps one task a thread; one whose outermost dim is shorter than the threads is split
// (in two) on the next, which would make its tasks strided: not into more tasks.
// TASKS-LABEL: func.func @odd
// TASKS: scf.forall (%{{.+}}) in (2)
// TASKS: linalg.generic {{.*}} ins(%{{.+}} : tensor<1x512x1024xf32>)
// TASKS: scf.forall (%{{.+}}) in (2)
// TASKS: linalg.generic {{.*}} ins(%{{.+}} : tensor<1x1024x1024xf32>)
// TASKS: scf.forall (%{{.+}}) in (6)
// TASKS: linalg.generic {{.*}} ins(%{{.+}} : tensor<1x512x1024xf32>)
func.func @odd(%x: tensor<2x512x1024xf32>, %y: tensor<1x2048x1024xf32>, %z: tensor<6x512x1024xf32>)
    -> (tensor<2x512x1024xf32>, tensor<1x2048x1024xf32>, tensor<6x512x1024xf32>) {
  %0 = "mirax.exp"(%x) : (tensor<2x512x1024xf32>) -> tensor<2x512x1024xf32>
  %1 = "mirax.exp"(%y) : (tensor<1x2048x1024xf32>) -> tensor<1x2048x1024xf32>
  %2 = "mirax.exp"(%z) : (tensor<6x512x1024xf32>) -> tensor<6x512x1024xf32>
  return %0, %1, %2 : tensor<2x512x1024xf32>, tensor<1x2048x1024xf32>, tensor<6x512x1024xf32>
}

// -----

// A row reduction splits its rows (the parallel loop), never the reduced one.
// Reductions keep one task a thread whatever their size.
// TASKS-LABEL: func.func @rows
// TASKS: scf.forall (%{{.+}}) in (2)
// CHECK-LABEL: func.func @rows
// CHECK: scf.forall (%{{.+}}) in (2)
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]{{.*}} ins(%{{.+}} : tensor<1024x2048xf32>)
func.func @rows(%x: tensor<2048x2048xf32>) -> tensor<2048xf32> {
  %0 = "mirax.sum"(%x) {axes = array<i64: 1>, keepdims = false} : (tensor<2048x2048xf32>) -> tensor<2048xf32>
  return %0 : tensor<2048xf32>
}

// -----

// An op marked `mirax.parallel` (the matmul code generator's repacking of B and zero fill
// of C) is split whatever its size, a transpose over its outermost loop; the mark is
// dropped. Unmarked, the same small transpose stays serial.
// CHECK-LABEL: func.func @marked
// CHECK: scf.forall (%{{.+}}) in (2)
// CHECK: linalg.transpose ins(%{{.+}} : tensor<64x2x32xf32>) outs(%{{.+}} : tensor<2x64x32xf32>)
// CHECK-NOT: mirax.parallel
// CHECK: linalg.transpose ins(%{{.+}} : tensor<64x4x32xf32>) outs(%{{.+}} : tensor<4x64x32xf32>)
// CHECK-NEXT: return
func.func @marked(%b: tensor<64x4x32xf32>) -> (tensor<4x64x32xf32>, tensor<4x64x32xf32>) {
  %e = tensor.empty() : tensor<4x64x32xf32>
  %0 = linalg.transpose ins(%b : tensor<64x4x32xf32>) outs(%e : tensor<4x64x32xf32>) permutation = [1, 0, 2] {mirax.parallel}
  %1 = linalg.transpose ins(%b : tensor<64x4x32xf32>) outs(%e : tensor<4x64x32xf32>) permutation = [1, 0, 2]
  return %0, %1 : tensor<4x64x32xf32>, tensor<4x64x32xf32>
}
