// RUN: %mirax-opt %s -split-input-file --convert-mirax-to-linalg --mirax-fuse "--mirax-fuse-reductions=min-elements=1 threads=2" | FileCheck %s
// RUN: %mirax-opt %s -split-input-file --convert-mirax-to-linalg --mirax-fuse --mirax-fuse-reductions | FileCheck %s --check-prefix=SMALL
// RUN: %mirax-opt %s -split-input-file --mirax-cpu-pipeline=threads=2 | FileCheck %s --check-prefix=OMP

// softmax as `mr.softmax` traces it: max, exp(x - max), sum, divide become ONE loop over
// the rows, vectorized in chunks of W columns (the tuning table's partial_sums): each
// reduction keeps W partial results as a vector carried through its column loop and
// ends in one tree reduction (reassociated); the exp is written into the output's row
// and the divide rewrites it there (its loop carries the exp's row, read and written in
// place).
// CHECK-LABEL: func.func @softmax
// CHECK: scf.forall (%[[I:.+]]) in (4) shared_outs(%[[O:.+]] = %{{.+}}) -> (tensor<4x2048xf32>)
// CHECK: scf.for {{.*}} -> (vector<1x[[W:[0-9]+]]xf32>)
// CHECK: vector.transfer_read %{{.+}}[%[[I]], %{{.+}}]
// CHECK: arith.maximumf {{.*}} : vector<[[W]]xf32>
// CHECK: vector.reduction <maximumf>
// CHECK: %[[E:.+]] = scf.for {{.*}} -> (tensor<1x2048xf32>)
// CHECK: math.exp {{.*}} : vector<[[W]]xf32>
// CHECK: vector.transfer_write
// CHECK: scf.for {{.*}} -> (vector<1x[[W]]xf32>)
// CHECK: arith.addf {{.*}} : vector<[[W]]xf32>
// CHECK: vector.reduction <add>, {{.*}} fastmath<reassoc>
// CHECK: %[[D:.+]] = scf.for %{{.+}} = {{.*}} iter_args(%[[A:.+]] = %[[E]]) -> (tensor<1x2048xf32>)
// CHECK: vector.transfer_read %[[A]]
// CHECK: arith.divf {{.*}} : vector<[[W]]xf32>
// CHECK: scf.forall.in_parallel
// CHECK-NEXT: tensor.parallel_insert_slice %[[D]] into %[[O]]
// CHECK-NOT: linalg.
// CHECK: return
// SMALL-LABEL: func.func @softmax
// SMALL-NOT: scf.forall
// SMALL: return
func.func @softmax(%arg0: tensor<4x2048xf32>) -> tensor<4x2048xf32> {
  %0 = "mirax.max"(%arg0) {axes = array<i64: 1>, keepdims = true} : (tensor<4x2048xf32>) -> tensor<4x1xf32>
  %1 = "mirax.stop_gradient"(%0) : (tensor<4x1xf32>) -> tensor<4x1xf32>
  %2 = "mirax.broadcast_to"(%1) {shape = array<i64: 4, 2048>} : (tensor<4x1xf32>) -> tensor<4x2048xf32>
  %3 = "mirax.subtract"(%arg0, %2) : (tensor<4x2048xf32>, tensor<4x2048xf32>) -> tensor<4x2048xf32>
  %4 = "mirax.exp"(%3) : (tensor<4x2048xf32>) -> tensor<4x2048xf32>
  %5 = "mirax.sum"(%4) {axes = array<i64: 1>, keepdims = true} : (tensor<4x2048xf32>) -> tensor<4x1xf32>
  %6 = "mirax.broadcast_to"(%5) {shape = array<i64: 4, 2048>} : (tensor<4x1xf32>) -> tensor<4x2048xf32>
  %7 = "mirax.divide"(%4, %6) : (tensor<4x2048xf32>, tensor<4x2048xf32>) -> tensor<4x2048xf32>
  return %7 : tensor<4x2048xf32>
}

// -----

// Layer norm: both means and the normalization in one loop; the centred values are
// computed once a row, into the output's row, read by the variance and scaled in place.
// The row scalars (the mean's divisor, rsqrt of the variance) are computed once a row,
// outside the column loops.
// CHECK-LABEL: func.func @layer_norm
// CHECK: scf.forall (%{{.+}}) in (8)
// CHECK: scf.for {{.*}} -> (vector<1x[[W:[0-9]+]]xf32>)
// CHECK: vector.reduction <add>
// CHECK: %[[C:.+]] = scf.for {{.*}} -> (tensor<1x256xf32>)
// CHECK: arith.subf {{.*}} : vector<[[W]]xf32>
// CHECK: scf.for {{.*}} -> (vector<1x[[W]]xf32>)
// CHECK: vector.reduction <add>
// CHECK: math.rsqrt {{.*}} : vector<[[W]]xf32>
// CHECK-NEXT: scf.for %{{.+}} = {{.*}} iter_args(%{{.+}} = %[[C]]) -> (tensor<1x256xf32>)
// CHECK: arith.mulf
// CHECK: scf.forall.in_parallel
// CHECK-NOT: linalg.
// CHECK: return
func.func @layer_norm(%arg0: tensor<8x256xf32>) -> tensor<8x256xf32> {
  %0 = "mirax.sum"(%arg0) {axes = array<i64: 1>, keepdims = true} : (tensor<8x256xf32>) -> tensor<8x1xf32>
  %1 = "mirax.constant"() {value = dense<2.560000e+02> : tensor<f32>} : () -> tensor<f32>
  %2 = "mirax.broadcast_to"(%1) {shape = array<i64: 8, 1>} : (tensor<f32>) -> tensor<8x1xf32>
  %3 = "mirax.divide"(%0, %2) : (tensor<8x1xf32>, tensor<8x1xf32>) -> tensor<8x1xf32>
  %4 = "mirax.broadcast_to"(%3) {shape = array<i64: 8, 256>} : (tensor<8x1xf32>) -> tensor<8x256xf32>
  %5 = "mirax.subtract"(%arg0, %4) : (tensor<8x256xf32>, tensor<8x256xf32>) -> tensor<8x256xf32>
  %6 = "mirax.multiply"(%5, %5) : (tensor<8x256xf32>, tensor<8x256xf32>) -> tensor<8x256xf32>
  %7 = "mirax.sum"(%6) {axes = array<i64: 1>, keepdims = true} : (tensor<8x256xf32>) -> tensor<8x1xf32>
  %8 = "mirax.divide"(%7, %2) : (tensor<8x1xf32>, tensor<8x1xf32>) -> tensor<8x1xf32>
  %9 = "mirax.rsqrt"(%8) : (tensor<8x1xf32>) -> tensor<8x1xf32>
  %10 = "mirax.broadcast_to"(%9) {shape = array<i64: 8, 256>} : (tensor<8x1xf32>) -> tensor<8x256xf32>
  %11 = "mirax.multiply"(%5, %10) : (tensor<8x256xf32>, tensor<8x256xf32>) -> tensor<8x256xf32>
  return %11 : tensor<8x256xf32>
}

// -----

// A row length the chunk width does not divide: the last partial chunk of every
// column loop is peeled off and vectorized at its own width (2100 - 2048 = 52 here with
// 64-wide chunks; the checks only ask for a chunk narrower than W).
// CHECK-LABEL: func.func @softmax_odd
// CHECK: scf.forall
// CHECK: scf.for {{.*}} to %{{.+}} step %{{.+}} iter_args({{.*}}) -> (vector<1x[[W:[0-9]+]]xf32>)
// CHECK: arith.maximumf {{.*}} : vector<[[W]]xf32>
// CHECK: arith.maximumf {{.*}} : vector<{{[0-9]+}}xf32>
// CHECK: vector.reduction <maximumf>
// CHECK: math.exp {{.*}} : vector<[[W]]xf32>
// CHECK: math.exp {{.*}} : vector<{{[0-9]+}}xf32>
// CHECK: scf.forall.in_parallel
// CHECK-NOT: linalg.
// CHECK: return
// SMALL-LABEL: func.func @softmax_odd
// SMALL-NOT: scf.forall
// SMALL: return
func.func @softmax_odd(%arg0: tensor<4x2100xf32>) -> tensor<4x2100xf32> {
  %0 = "mirax.max"(%arg0) {axes = array<i64: 1>, keepdims = true} : (tensor<4x2100xf32>) -> tensor<4x1xf32>
  %2 = "mirax.broadcast_to"(%0) {shape = array<i64: 4, 2100>} : (tensor<4x1xf32>) -> tensor<4x2100xf32>
  %3 = "mirax.subtract"(%arg0, %2) : (tensor<4x2100xf32>, tensor<4x2100xf32>) -> tensor<4x2100xf32>
  %4 = "mirax.exp"(%3) : (tensor<4x2100xf32>) -> tensor<4x2100xf32>
  %5 = "mirax.sum"(%4) {axes = array<i64: 1>, keepdims = true} : (tensor<4x2100xf32>) -> tensor<4x1xf32>
  %6 = "mirax.broadcast_to"(%5) {shape = array<i64: 4, 2100>} : (tensor<4x1xf32>) -> tensor<4x2100xf32>
  %7 = "mirax.divide"(%4, %6) : (tensor<4x2100xf32>, tensor<4x2100xf32>) -> tensor<4x2100xf32>
  return %7 : tensor<4x2100xf32>
}

// -----

// A softmax over the last axis of a 3-d array: its rows are both leading dims, so the
// row loop runs over both (one row an iteration) and the column loops are as in 2-d.
// CHECK-LABEL: func.func @softmax_3d
// CHECK: scf.forall (%[[I:.+]], %[[J:.+]]) in (4, 8)
// CHECK: scf.for {{.*}} -> (vector<1x1x[[W:[0-9]+]]xf32>)
// CHECK: vector.transfer_read %{{.+}}[%[[I]], %[[J]], %{{.+}}]
// CHECK: vector.reduction <maximumf>
// CHECK: math.exp {{.*}} : vector<[[W]]xf32>
// CHECK: vector.reduction <add>
// CHECK: arith.divf {{.*}} : vector<[[W]]xf32>
// CHECK: tensor.parallel_insert_slice %{{.+}} into %{{.+}}[%[[I]], %[[J]], 0] [1, 1, 512] [1, 1, 1]
// CHECK-NOT: linalg.
// CHECK: return
func.func @softmax_3d(%arg0: tensor<4x8x512xf32>) -> tensor<4x8x512xf32> {
  %0 = "mirax.max"(%arg0) {axes = array<i64: 2>, keepdims = true} : (tensor<4x8x512xf32>) -> tensor<4x8x1xf32>
  %2 = "mirax.broadcast_to"(%0) {shape = array<i64: 4, 8, 512>} : (tensor<4x8x1xf32>) -> tensor<4x8x512xf32>
  %3 = "mirax.subtract"(%arg0, %2) : (tensor<4x8x512xf32>, tensor<4x8x512xf32>) -> tensor<4x8x512xf32>
  %4 = "mirax.exp"(%3) : (tensor<4x8x512xf32>) -> tensor<4x8x512xf32>
  %5 = "mirax.sum"(%4) {axes = array<i64: 2>, keepdims = true} : (tensor<4x8x512xf32>) -> tensor<4x8x1xf32>
  %6 = "mirax.broadcast_to"(%5) {shape = array<i64: 4, 8, 512>} : (tensor<4x8x1xf32>) -> tensor<4x8x512xf32>
  %7 = "mirax.divide"(%4, %6) : (tensor<4x8x512xf32>, tensor<4x8x512xf32>) -> tensor<4x8x512xf32>
  return %7 : tensor<4x8x512xf32>
}

// -----

// A reduction over the leading (column) dim does not index the rows with its first
// loop: nothing to fuse by rows, the ops stay as mirax-fuse left them.
// CHECK-LABEL: func.func @column_sum
// CHECK-NOT: scf.forall
// CHECK: linalg.generic {{.*}}iterator_types = ["reduction", "parallel"]
// CHECK: return
func.func @column_sum(%arg0: tensor<8x256xf32>) -> tensor<8x256xf32> {
  %0 = "mirax.sum"(%arg0) {axes = array<i64: 0>, keepdims = true} : (tensor<8x256xf32>) -> tensor<1x256xf32>
  %1 = "mirax.broadcast_to"(%0) {shape = array<i64: 8, 256>} : (tensor<1x256xf32>) -> tensor<8x256xf32>
  %2 = "mirax.divide"(%arg0, %1) : (tensor<8x256xf32>, tensor<8x256xf32>) -> tensor<8x256xf32>
  return %2 : tensor<8x256xf32>
}

// -----

// In the CPU pipeline (with the tuning table's thresholds) a 256x1024 softmax is one
// OpenMP loop over row blocks.
// OMP-LABEL: llvm.func @softmax_big
// OMP: omp.parallel
// OMP: llvm.call @omp_get_thread_num()
// OMP-NOT: omp.parallel
// OMP: llvm.return
func.func @softmax_big(%arg0: tensor<256x1024xf32>) -> tensor<256x1024xf32> {
  %0 = "mirax.max"(%arg0) {axes = array<i64: 1>, keepdims = true} : (tensor<256x1024xf32>) -> tensor<256x1xf32>
  %2 = "mirax.broadcast_to"(%0) {shape = array<i64: 256, 1024>} : (tensor<256x1xf32>) -> tensor<256x1024xf32>
  %3 = "mirax.subtract"(%arg0, %2) : (tensor<256x1024xf32>, tensor<256x1024xf32>) -> tensor<256x1024xf32>
  %4 = "mirax.exp"(%3) : (tensor<256x1024xf32>) -> tensor<256x1024xf32>
  %5 = "mirax.sum"(%4) {axes = array<i64: 1>, keepdims = true} : (tensor<256x1024xf32>) -> tensor<256x1xf32>
  %6 = "mirax.broadcast_to"(%5) {shape = array<i64: 256, 1024>} : (tensor<256x1xf32>) -> tensor<256x1024xf32>
  %7 = "mirax.divide"(%4, %6) : (tensor<256x1024xf32>, tensor<256x1024xf32>) -> tensor<256x1024xf32>
  return %7 : tensor<256x1024xf32>
}

// -----

// A row group with two roots (a training step's layer norm: the centred rows also go on
// to the backward pass, here `%5 * %arg1`): each root takes its producers, latest root
// first. The layer norm is one vectorized loop that also yields the centred rows (computed
// once, in the loop) to the later elementwise op; before, neither part was fused.
// CHECK-LABEL: func.func @two_roots
// CHECK: %[[L:.+]]:2 = scf.forall (%{{.+}}) in (8) shared_outs({{.*}}) -> (tensor<8x256xf32>, tensor<8x256xf32>)
// CHECK: arith.subf {{.*}} : vector<[[W:[0-9]+]]xf32>
// CHECK: vector.reduction <add>
// CHECK: math.rsqrt {{.*}} : vector<[[W]]xf32>
// CHECK: scf.forall.in_parallel
// CHECK-COUNT-2: tensor.parallel_insert_slice
// CHECK-NOT: linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]
// CHECK: %[[E:.+]] = linalg.generic {{.*}} ins(%[[L]]#1, %arg1 : tensor<8x256xf32>, tensor<8x256xf32>)
// CHECK: return %[[L]]#0, %[[E]]
func.func @two_roots(%arg0: tensor<8x256xf32>, %arg1: tensor<8x256xf32>) -> (tensor<8x256xf32>, tensor<8x256xf32>) {
  %0 = "mirax.sum"(%arg0) {axes = array<i64: 1>, keepdims = true} : (tensor<8x256xf32>) -> tensor<8x1xf32>
  %1 = "mirax.constant"() {value = dense<2.560000e+02> : tensor<f32>} : () -> tensor<f32>
  %2 = "mirax.broadcast_to"(%1) {shape = array<i64: 8, 1>} : (tensor<f32>) -> tensor<8x1xf32>
  %3 = "mirax.divide"(%0, %2) : (tensor<8x1xf32>, tensor<8x1xf32>) -> tensor<8x1xf32>
  %4 = "mirax.broadcast_to"(%3) {shape = array<i64: 8, 256>} : (tensor<8x1xf32>) -> tensor<8x256xf32>
  %5 = "mirax.subtract"(%arg0, %4) : (tensor<8x256xf32>, tensor<8x256xf32>) -> tensor<8x256xf32>
  %6 = "mirax.multiply"(%5, %5) : (tensor<8x256xf32>, tensor<8x256xf32>) -> tensor<8x256xf32>
  %7 = "mirax.sum"(%6) {axes = array<i64: 1>, keepdims = true} : (tensor<8x256xf32>) -> tensor<8x1xf32>
  %8 = "mirax.divide"(%7, %2) : (tensor<8x1xf32>, tensor<8x1xf32>) -> tensor<8x1xf32>
  %9 = "mirax.rsqrt"(%8) : (tensor<8x1xf32>) -> tensor<8x1xf32>
  %10 = "mirax.broadcast_to"(%9) {shape = array<i64: 8, 256>} : (tensor<8x1xf32>) -> tensor<8x256xf32>
  %11 = "mirax.multiply"(%5, %10) : (tensor<8x256xf32>, tensor<8x256xf32>) -> tensor<8x256xf32>
  %12 = "mirax.multiply"(%5, %arg1) : (tensor<8x256xf32>, tensor<8x256xf32>) -> tensor<8x256xf32>
  return %11, %12 : tensor<8x256xf32>, tensor<8x256xf32>
}

// -----

// Rows shorter than two chunks of the host's width (48 attention scores) keep fewer
// partial sums, down to one vector: still one vectorized row loop (before, its
// reductions were not split and the loop was left to LLVM's vectorizer).
// CHECK-LABEL: func.func @short_rows
// CHECK: scf.forall (%{{.+}}) in (64)
// CHECK: scf.for {{.*}} -> (vector<1x[[W:[0-9]+]]xf32>)
// CHECK: arith.maximumf {{.*}} : vector<[[W]]xf32>
// CHECK: vector.reduction <maximumf>
// CHECK: math.exp {{.*}} : vector<[[W]]xf32>
// CHECK: scf.forall.in_parallel
// CHECK-NOT: linalg.
// CHECK: return
func.func @short_rows(%arg0: tensor<64x48xf32>) -> tensor<64x48xf32> {
  %0 = "mirax.max"(%arg0) {axes = array<i64: 1>, keepdims = true} : (tensor<64x48xf32>) -> tensor<64x1xf32>
  %1 = "mirax.stop_gradient"(%0) : (tensor<64x1xf32>) -> tensor<64x1xf32>
  %2 = "mirax.broadcast_to"(%1) {shape = array<i64: 64, 48>} : (tensor<64x1xf32>) -> tensor<64x48xf32>
  %3 = "mirax.subtract"(%arg0, %2) : (tensor<64x48xf32>, tensor<64x48xf32>) -> tensor<64x48xf32>
  %4 = "mirax.exp"(%3) : (tensor<64x48xf32>) -> tensor<64x48xf32>
  %5 = "mirax.sum"(%4) {axes = array<i64: 1>, keepdims = true} : (tensor<64x48xf32>) -> tensor<64x1xf32>
  %6 = "mirax.broadcast_to"(%5) {shape = array<i64: 64, 48>} : (tensor<64x1xf32>) -> tensor<64x48xf32>
  %7 = "mirax.divide"(%4, %6) : (tensor<64x48xf32>, tensor<64x48xf32>) -> tensor<64x48xf32>
  return %7 : tensor<64x48xf32>
}

// -----

// A matrix times a (K, 1) column: the product is a reduction over 4 loops, two of them
// of extent 1; they go first (the operands collapsed: the matrix's expand_shape folds
// away, the column becomes a (K,) vector; the result expanded back), and the row
// reduction is then vectorized like `x @ v` with v 1-d (it was left scalar: 4096^2 in
// 6.5 ms, numpy 1.4).
// CHECK-LABEL: func.func @column
// CHECK-SAME: (%[[X:.+]]: tensor<16x1024xf32>, %[[V:.+]]: tensor<1024x1xf32>)
// CHECK: %[[VEC:.+]] = tensor.collapse_shape %[[V]] {{\[\[}}0, 1]] : tensor<1024x1xf32> into tensor<1024xf32>
// CHECK: scf.forall (%[[I:.+]]) in
// CHECK: scf.for {{.*}} -> (vector<1x[[W:[0-9]+]]xf32>)
// CHECK: vector.transfer_read %[[X]][%[[I]], %{{.+}}]
// CHECK: vector.transfer_read %[[VEC]][%{{.+}}]
// CHECK: vector.reduction <add>
// CHECK: tensor.expand_shape {{.+}} into tensor<16x1xf32>
// SMALL-LABEL: func.func @column
// SMALL: linalg.generic {{.+}} iterator_types = ["parallel", "reduction"]} ins(%arg0, %{{.+}} : tensor<16x1024xf32>, tensor<1024xf32>)
func.func @column(%arg0: tensor<16x1024xf32>, %arg1: tensor<1024x1xf32>) -> tensor<16x1xf32> {
  %0 = "mirax.matmul"(%arg0, %arg1) : (tensor<16x1024xf32>, tensor<1024x1xf32>) -> tensor<16x1xf32>
  return %0 : tensor<16x1xf32>
}
