// RUN: %mirax-opt %s -split-input-file --convert-mirax-to-linalg --mirax-fuse --mirax-gpu-map | FileCheck %s
// RUN: %mirax-opt %s -split-input-file --convert-mirax-to-linalg --mirax-fuse --mirax-gpu-map="subgroup=64" | FileCheck %s --check-prefix=SG64

// mirax-gpu-map picks a strategy per kernel and tiles with scf.forall mapped to GPU
// blocks and threads (still on tensors). Softmax is one row kernel: a block per row,
// each reduction split over 256 threads with its partials in workgroup memory
// (alloc_tensor in memory space 3), the elementwise producers recomputed inside.
// CHECK-LABEL: func.func @softmax
// CHECK: scf.forall (%{{.+}}) in (6) shared_outs
// CHECK: bufferization.alloc_tensor() {memory_space = 3 : i64} : tensor<1x256xf32>
// CHECK: scf.forall (%{{.+}}) in (256)
// CHECK: {mapping = [#gpu.thread<x>]}
// CHECK: linalg.reduce
// CHECK: bufferization.alloc_tensor() {memory_space = 3 : i64} : tensor<1x256xf32>
// CHECK: math.exp
// CHECK: linalg.reduce
// CHECK: } {mapping = [#gpu.block<linear_dim_0>], mirax.gpu_block = array<i64: 256, 1, 1>, mirax.gpu_kernel = 0 : i64}
// CHECK-NOT: scf.forall
// CHECK: return
func.func @softmax(%arg0: tensor<6x1000xf32>) -> tensor<6x1000xf32> {
  %0 = "mirax.max"(%arg0) {axes = array<i64: 1>, keepdims = true} : (tensor<6x1000xf32>) -> tensor<6x1xf32>
  %1 = "mirax.broadcast_to"(%0) {shape = array<i64: 6, 1000>} : (tensor<6x1xf32>) -> tensor<6x1000xf32>
  %2 = "mirax.subtract"(%arg0, %1) : (tensor<6x1000xf32>, tensor<6x1000xf32>) -> tensor<6x1000xf32>
  %3 = "mirax.exp"(%2) : (tensor<6x1000xf32>) -> tensor<6x1000xf32>
  %4 = "mirax.sum"(%3) {axes = array<i64: 1>, keepdims = true} : (tensor<6x1000xf32>) -> tensor<6x1xf32>
  %5 = "mirax.broadcast_to"(%4) {shape = array<i64: 6, 1000>} : (tensor<6x1xf32>) -> tensor<6x1000xf32>
  %6 = "mirax.divide"(%3, %5) : (tensor<6x1000xf32>, tensor<6x1000xf32>) -> tensor<6x1000xf32>
  return %6 : tensor<6x1000xf32>
}

// -----

// Short rows get a smaller workgroup: the longest row dim rounded up to a power of two,
// at least the device's subgroup size (`subgroup`, 32 by default: NVIDIA's warps, Apple's
// SIMD groups; an AMD wave is 64), so no thread combines partials that most threads never
// wrote.
// SG64-LABEL: func.func @softmax_short_rows
// SG64: mirax.gpu_block = array<i64: 64, 1, 1>
// CHECK-LABEL: func.func @softmax_short_rows
// CHECK: bufferization.alloc_tensor() {memory_space = 3 : i64} : tensor<1x32xf32>
// CHECK: scf.forall (%{{.+}}) in (32)
// CHECK: mirax.gpu_block = array<i64: 32, 1, 1>
func.func @softmax_short_rows(%arg0: tensor<64x24xf32>) -> tensor<64x24xf32> {
  %0 = "mirax.max"(%arg0) {axes = array<i64: 1>, keepdims = true} : (tensor<64x24xf32>) -> tensor<64x1xf32>
  %1 = "mirax.broadcast_to"(%0) {shape = array<i64: 64, 24>} : (tensor<64x1xf32>) -> tensor<64x24xf32>
  %2 = "mirax.subtract"(%arg0, %1) : (tensor<64x24xf32>, tensor<64x24xf32>) -> tensor<64x24xf32>
  %3 = "mirax.exp"(%2) : (tensor<64x24xf32>) -> tensor<64x24xf32>
  %4 = "mirax.sum"(%3) {axes = array<i64: 1>, keepdims = true} : (tensor<64x24xf32>) -> tensor<64x1xf32>
  %5 = "mirax.broadcast_to"(%4) {shape = array<i64: 64, 24>} : (tensor<64x1xf32>) -> tensor<64x24xf32>
  %6 = "mirax.divide"(%3, %5) : (tensor<64x24xf32>, tensor<64x24xf32>) -> tensor<64x24xf32>
  return %6 : tensor<64x24xf32>
}

// -----

// A 100-wide row: 128 threads.
// SG64-LABEL: func.func @mean_rows
// SG64: mirax.gpu_block = array<i64: 128, 1, 1>
// CHECK-LABEL: func.func @mean_rows
// CHECK: scf.forall (%{{.+}}) in (128)
// CHECK: mirax.gpu_block = array<i64: 128, 1, 1>
func.func @mean_rows(%arg0: tensor<16x100xf32>) -> tensor<16x1xf32> {
  %0 = "mirax.sum"(%arg0) {axes = array<i64: 1>, keepdims = true} : (tensor<16x100xf32>) -> tensor<16x1xf32>
  return %0 : tensor<16x1xf32>
}

// -----

// Elementwise: the grid over the outer dim, threads over the inner one (256 at most).
// CHECK-LABEL: func.func @scale
// CHECK: scf.forall (%{{.+}}, %{{.+}}) in (8, 2)
// CHECK: scf.forall (%{{.+}}) in (256)
// CHECK: {mapping = [#gpu.thread<x>]}
// CHECK: {mapping = [#gpu.block<linear_dim_1>, #gpu.block<linear_dim_0>], mirax.gpu_block = array<i64: 256, 1, 1>
func.func @scale(%x: tensor<8x300xf32>) -> tensor<8x300xf32> {
  %0 = "mirax.add"(%x, %x) : (tensor<8x300xf32>, tensor<8x300xf32>) -> tensor<8x300xf32>
  return %0 : tensor<8x300xf32>
}

// -----

// Matmul with dims on the tiles: 32x32 blocks of C, the K loop (step 16) inside, A and
// B tiles promoted to workgroup memory, 16x16 threads.
// CHECK-LABEL: func.func @matmul
// CHECK: scf.forall (%{{.+}}, %{{.+}}) in (2, 3)
// CHECK: scf.for %{{.+}} = %c0 to %c32 step %c16
// CHECK-DAG: bufferization.alloc_tensor() {memory_space = 3 : i64} : tensor<32x16xf32>
// CHECK-DAG: bufferization.alloc_tensor() {memory_space = 3 : i64} : tensor<16x32xf32>
// CHECK: scf.forall (%{{.+}}, %{{.+}}) in (16, 16)
// CHECK: {mapping = [#gpu.thread<y>, #gpu.thread<x>]}
func.func @matmul(%a: tensor<64x32xf32>, %b: tensor<32x96xf32>) -> tensor<64x96xf32> {
  %0 = "mirax.matmul"(%a, %b) : (tensor<64x32xf32>, tensor<32x96xf32>) -> tensor<64x96xf32>
  return %0 : tensor<64x96xf32>
}

// -----

// A row kernel reads what another kernel writes when ops outside it read that too: the
// second softmax reads the first's result (also returned) instead of recomputing the
// first softmax inside its own rows (each a kernel: two exps each, the exp read twice).
// Recomputed, a network's residual stream of layer norms was fused whole into every
// layer's kernels.
// CHECK-LABEL: func.func @chained_softmax
// CHECK-COUNT-2: math.exp
// CHECK-NOT: math.exp
// CHECK: mirax.gpu_kernel = 1
// CHECK-COUNT-2: math.exp
// CHECK-NOT: math.exp
// CHECK: mirax.gpu_kernel = 0
func.func @chained_softmax(%arg0: tensor<6x1000xf32>) -> (tensor<6x1000xf32>, tensor<6x1000xf32>) {
  %0 = "mirax.max"(%arg0) {axes = array<i64: 1>, keepdims = true} : (tensor<6x1000xf32>) -> tensor<6x1xf32>
  %1 = "mirax.broadcast_to"(%0) {shape = array<i64: 6, 1000>} : (tensor<6x1xf32>) -> tensor<6x1000xf32>
  %2 = "mirax.subtract"(%arg0, %1) : (tensor<6x1000xf32>, tensor<6x1000xf32>) -> tensor<6x1000xf32>
  %3 = "mirax.exp"(%2) : (tensor<6x1000xf32>) -> tensor<6x1000xf32>
  %4 = "mirax.sum"(%3) {axes = array<i64: 1>, keepdims = true} : (tensor<6x1000xf32>) -> tensor<6x1xf32>
  %5 = "mirax.broadcast_to"(%4) {shape = array<i64: 6, 1000>} : (tensor<6x1xf32>) -> tensor<6x1000xf32>
  %6 = "mirax.divide"(%3, %5) : (tensor<6x1000xf32>, tensor<6x1000xf32>) -> tensor<6x1000xf32>
  %10 = "mirax.max"(%6) {axes = array<i64: 1>, keepdims = true} : (tensor<6x1000xf32>) -> tensor<6x1xf32>
  %11 = "mirax.broadcast_to"(%10) {shape = array<i64: 6, 1000>} : (tensor<6x1xf32>) -> tensor<6x1000xf32>
  %12 = "mirax.subtract"(%6, %11) : (tensor<6x1000xf32>, tensor<6x1000xf32>) -> tensor<6x1000xf32>
  %13 = "mirax.exp"(%12) : (tensor<6x1000xf32>) -> tensor<6x1000xf32>
  %14 = "mirax.sum"(%13) {axes = array<i64: 1>, keepdims = true} : (tensor<6x1000xf32>) -> tensor<6x1xf32>
  %15 = "mirax.broadcast_to"(%14) {shape = array<i64: 6, 1000>} : (tensor<6x1xf32>) -> tensor<6x1000xf32>
  %16 = "mirax.divide"(%13, %15) : (tensor<6x1000xf32>, tensor<6x1000xf32>) -> tensor<6x1000xf32>
  return %6, %16 : tensor<6x1000xf32>, tensor<6x1000xf32>
}

// -----

// A row kernel binds at most max-buffers buffers (the device's limit): with 4, the two
// sums of products (a, b, c, d read) are kernels of their own and the row kernel reads
// their results; with the default (31), one kernel computes all.
// RUN: %mirax-opt %s -split-input-file --convert-mirax-to-linalg --mirax-fuse --mirax-gpu-map="max-buffers=4" | FileCheck %s --check-prefix=BUF
// BUF-LABEL: func.func @row_buffers
// BUF: linalg.reduce
// BUF: mirax.gpu_kernel = 2
// BUF: linalg.reduce
// BUF: mirax.gpu_kernel = 1
// BUF-NOT: linalg.reduce
// BUF: mirax.gpu_kernel = 0
// CHECK-LABEL: func.func @row_buffers
// CHECK-COUNT-2: linalg.reduce
// CHECK: mirax.gpu_kernel = 0
// CHECK-NOT: mirax.gpu_kernel
func.func @row_buffers(%a: tensor<8x64xf32>, %b: tensor<8x64xf32>, %c: tensor<8x64xf32>, %d: tensor<8x64xf32>) -> tensor<8x64xf32> {
  %0 = "mirax.multiply"(%a, %b) : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %1 = "mirax.sum"(%0) {axes = array<i64: 1>, keepdims = true} : (tensor<8x64xf32>) -> tensor<8x1xf32>
  %2 = "mirax.multiply"(%c, %d) : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %3 = "mirax.sum"(%2) {axes = array<i64: 1>, keepdims = true} : (tensor<8x64xf32>) -> tensor<8x1xf32>
  %4 = "mirax.add"(%1, %3) : (tensor<8x1xf32>, tensor<8x1xf32>) -> tensor<8x1xf32>
  %5 = "mirax.broadcast_to"(%4) {shape = array<i64: 8, 64>} : (tensor<8x1xf32>) -> tensor<8x64xf32>
  %6 = "mirax.subtract"(%a, %5) : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  return %6 : tensor<8x64xf32>
}

// -----

// Reductions a thread would loop over serially for long (more than 4,096 elements per
// output: several reduction dims, or one before a parallel dim) become row kernels: the
// loops reordered so that the reduction dims come last, then the innermost reduction
// dim reduced first into partials (a row kernel) and the partials by the combiner alone.
// Serially, `sum(axis=(1, 2))` of 2x300x300 looped 90,000 times on each of two threads
// (slow anywhere, and wrong on lavapipe: its shaders stop a loop after 65,535 iterations).
// CHECK-LABEL: func.func @long_serial_sums
// CHECK: scf.forall ({{.+}}) in (2, 300)
// CHECK: linalg.reduce
// CHECK: mirax.gpu_kernel = 2
// CHECK: scf.forall ({{.+}}) in (2)
// CHECK: linalg.reduce
// CHECK: mirax.gpu_kernel = 1
// CHECK: scf.forall ({{.+}}) in (2)
// CHECK: linalg.reduce
// CHECK: mirax.gpu_kernel = 0
// CHECK-NOT: scf.for %
func.func @long_serial_sums(%arg0: tensor<2x300x300xf32>, %arg1: tensor<70000x2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  %0 = "mirax.sum"(%arg0) {axes = array<i64: 1, 2>, keepdims = false} : (tensor<2x300x300xf32>) -> tensor<2xf32>
  %1 = "mirax.sum"(%arg1) {axes = array<i64: 0>, keepdims = false} : (tensor<70000x2xf32>) -> tensor<2xf32>
  return %0, %1 : tensor<2xf32>, tensor<2xf32>
}

// -----

// A sum over alternating axes keeps unit dims in its output (and mirax-fuse's reshape
// propagation adds more): they take no thread dims. The three innermost dims of 4 get the
// threads (4x4x4), the fourth dim of 4 the grid; each thread reduces its 1,024 elements
// and loops over nothing else (it took 4 threads looping 87,380 times each, past
// lavapipe's loop limit).
// CHECK-LABEL: func.func @alternating_axes
// CHECK: scf.forall (%{{.+}}) in (4) shared_outs
// CHECK: scf.forall (%{{.+}}, %{{.+}}, %{{.+}}) in (4, 4, 4) shared_outs
// CHECK: linalg.generic
// CHECK: {mapping = [#gpu.thread<z>, #gpu.thread<y>, #gpu.thread<x>]}
// CHECK: {mapping = [#gpu.block<linear_dim_0>], mirax.gpu_block = array<i64: 4, 4, 4>, mirax.gpu_kernel = 0 : i64}
func.func @alternating_axes(%a: tensor<4x4x4x4x4x4x4x4x4xi32>) -> tensor<1x4x1x4x1x4x1x4x1xi32> {
  %0 = "mirax.sum"(%a) {axes = array<i64: 0, 2, 4, 6, 8>, keepdims = true} : (tensor<4x4x4x4x4x4x4x4x4xi32>) -> tensor<1x4x1x4x1x4x1x4x1xi32>
  return %0 : tensor<1x4x1x4x1x4x1x4x1xi32>
}

// -----

// A matmul off the tile with a long K (past 4,096) is generalized into a row reduction:
// a workgroup per output, K split over 256 threads (not a thread looping 70,000 times).
// CHECK-LABEL: func.func @long_k_matmul
// CHECK-NOT: linalg.matmul
// CHECK: scf.forall (%{{.+}}, %{{.+}}) in (4, 4) shared_outs
// CHECK: scf.forall (%{{.+}}) in (256)
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction"]
// CHECK: arith.mulf
// CHECK: arith.addf
// CHECK: {mapping = [#gpu.thread<x>]}
// CHECK: linalg.reduce
// CHECK: mirax.gpu_block = array<i64: 256, 1, 1>
func.func @long_k_matmul(%a: tensor<4x70000xf32>, %b: tensor<70000x4xf32>) -> tensor<4x4xf32> {
  %0 = "mirax.matmul"(%a, %b) : (tensor<4x70000xf32>, tensor<70000x4xf32>) -> tensor<4x4xf32>
  return %0 : tensor<4x4xf32>
}

// -----

// A dot product as a matmul: reshape propagation reduces it over (70000, 1); the unit
// reduction dim leaves the loops, and the one left is a row reduction as above.
// CHECK-LABEL: func.func @dot
// CHECK: scf.forall (%{{.+}}, %{{.+}}) in (1, 1) shared_outs
// CHECK: scf.forall (%{{.+}}) in (256)
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction"]} ins(%{{.+}}, %{{.+}} : tensor<1x1x?x1xf32>, tensor<?x1xf32>)
// CHECK: linalg.reduce
// CHECK: mirax.gpu_block = array<i64: 256, 1, 1>
func.func @dot(%a: tensor<1x70000xf32>, %b: tensor<70000x1xf32>) -> tensor<1x1xf32> {
  %0 = "mirax.matmul"(%a, %b) : (tensor<1x70000xf32>, tensor<70000x1xf32>) -> tensor<1x1xf32>
  return %0 : tensor<1x1xf32>
}

// -----

// A reduction over leading dims (the parallel strategy: a thread per output looping over
// the reduced dim) fills its own init: each thread zeroes the outputs it then reduces
// into (the fill tiled over the same threads), no fill kernel before it.
// CHECK-LABEL: func.func @column_sums
// CHECK: scf.forall (%{{.+}}) in (1) shared_outs
// CHECK: scf.forall (%{{.+}}) in (64) shared_outs
// CHECK: linalg.fill
// CHECK: {mapping = [#gpu.thread<x>]}
// CHECK: scf.forall (%{{.+}}) in (64) shared_outs
// CHECK: linalg.generic {{.*}}iterator_types = ["reduction", "parallel"]
// CHECK: {mapping = [#gpu.thread<x>]}
// CHECK: mirax.gpu_kernel = 0 : i64}
// CHECK-NOT: mirax.gpu_kernel = 1
func.func @column_sums(%x: tensor<300x64xf32>) -> tensor<64xf32> {
  %0 = "mirax.sum"(%x) {axes = array<i64: 0>, keepdims = false} : (tensor<300x64xf32>) -> tensor<64xf32>
  return %0 : tensor<64xf32>
}
