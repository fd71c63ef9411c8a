// RUN: %mirax-opt %s -split-input-file --convert-mirax-to-linalg --mirax-parallelize=threads=2 | FileCheck %s
// RUN: %mirax-opt %s -split-input-file --mirax-cpu-pipeline=threads=2 | FileCheck %s --check-prefix=OMP
// RUN: %mirax-opt %s -split-input-file --mirax-cpu-pipeline=threads=1 | FileCheck %s --check-prefix=SERIAL

// A large elementwise op is split over its outermost loop between the two threads;
// the CPU pipeline makes the forall an OpenMP parallel loop.
// CHECK-LABEL: func.func @big
// CHECK: scf.forall (%{{.+}}) in (2)
// CHECK: linalg.generic {{.*}} ins(%{{.+}} : tensor<16x256x256xf32>)
// CHECK: scf.forall.in_parallel
// OMP-LABEL: llvm.func @big
// OMP: omp.parallel
// OMP: omp.wsloop
// SERIAL-LABEL: llvm.func @big
// SERIAL-NOT: omp.
// SERIAL: llvm.return
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

// A row reduction splits its rows (the parallel loop), never the reduced one.
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
