// RUN: %PYTHON -m mirax.lowering.matmul_codegen %s -split-input-file --parallel-min=65536 --tiles=mr=8,nr=32,kc=256,nc=512,forall_m=64,min_flops=524288,pack_b=0,split=0,threads=2 | FileCheck %s
// RUN: %PYTHON -m mirax.lowering.matmul_codegen %s -split-input-file --parallel-min=65536 --tiles=mr=8,nr=32,kc=256,nc=512,forall_m=64,min_flops=524288,pack_b=0,split=0,threads=1 | FileCheck %s --check-prefix=SERIAL
// RUN: %PYTHON -m mirax.lowering.matmul_codegen %s -split-input-file --parallel-min=65536 --tiles=mr=8,nr=32,kc=256,nc=512,forall_m=64,min_flops=524288,pack_b=0,split=0,threads=2 --script | FileCheck %s --check-prefix=SCRIPT
// split=1: a shape the tile does not divide is cut into the part it divides, a product of
// slices computed in place, and remainders padded to their own tiles (SPLIT, on @ragged).
// RUN: %PYTHON -m mirax.lowering.matmul_codegen %s -split-input-file --parallel-min=65536 --tiles=mr=8,nr=32,kc=256,nc=512,forall_m=64,min_flops=524288,pack_b=0,split=1,threads=2 | FileCheck %s --check-prefix=SPLIT
// With B repacked (pack_b): B becomes nr-wide panels [N/nr][K][nr] (a transpose of its
// expanded form) and C is read as [M][N/nr][nr]; GotoBLAS's loop order: for each block of
// panels and slice of K, the threads split C's rows.
// RUN: %PYTHON -m mirax.lowering.matmul_codegen %s -split-input-file --parallel-min=65536 --tiles=mr=8,nr=32,kc=256,nc=512,forall_m=64,min_flops=524288,pack_b=1,threads=2 | FileCheck %s --check-prefix=PACKED
// Repacked and split (SHARED, on @ragged_packed): the rows the tile does not divide read the
// B panels the divisible part repacked (one transpose of B), the threads splitting the
// panels, each zero-filling its columns of C.
// RUN: %PYTHON -m mirax.lowering.matmul_codegen %s -split-input-file --parallel-min=65536 --host=avx512 --tiles=mr=8,nr=32,kc=256,nc=512,forall_m=64,min_flops=524288,pack_b=1,split=1,threads=2 | FileCheck %s --check-prefix=SHARED
// PACKED-LABEL: func.func @square
// PACKED: tensor.expand_shape %arg1 {{.+}} into tensor<1024x32x32xf32>
// PACKED: linalg.transpose ins(%{{.+}} : tensor<1024x32x32xf32>) outs(%{{.+}} : tensor<32x1024x32xf32>) permutation = [1, 0, 2]
// PACKED: scf.for
// PACKED: scf.for
// PACKED: scf.forall (%{{.+}}) in (16)
// PACKED: vector.transfer_read %{{.+}} : tensor<32x1024x32xf32>, vector<32xf32>
// PACKED-COUNT-8: vector.fma {{.+}} : vector<32xf32>
// PACKED: tensor.collapse_shape {{.+}} into tensor<1024x1024xf32>
// PACKED-NOT: linalg.contract
// The tiles each ISA family's host derives (lowering/tuning.py) from its vector registers
// and caches: AVX2 (16 ymm) 6x16, AVX-512 (32 zmm) 14x32, NEON (32 q registers) 14x8,
// with kc from L1d and nc from L2 (a cache tile covering its whole dim is not tiled).
// RUN: %PYTHON -m mirax.lowering.matmul_codegen %s -split-input-file --parallel-min=65536 --host=avx2 --tiles=split=0 --script | FileCheck %s --check-prefix=AVX2
// RUN: %PYTHON -m mirax.lowering.matmul_codegen %s -split-input-file --parallel-min=65536 --host=avx512 --tiles=split=0 --script | FileCheck %s --check-prefix=AVX512
// RUN: %PYTHON -m mirax.lowering.matmul_codegen %s -split-input-file --parallel-min=65536 --host=neon --tiles=split=0 --script | FileCheck %s --check-prefix=NEON
// RUN: %PYTHON -m mirax.lowering.matmul_codegen %s -split-input-file --parallel-min=65536 --host=avx2 --tiles=split=0 | FileCheck %s --check-prefix=AVX2-IR
// AVX2: transform.structured.pad {{.+}} pad_to_multiple_of [6, 16, 1]
// AVX2: tile_using_for {{.+}} tile_sizes [0, 256, 256]
// AVX2: tile_using_for {{.+}} tile_sizes [6, 16, 1]
// AVX512: transform.structured.pad {{.+}} pad_to_multiple_of [14, 32, 1]
// AVX512: tile_using_for {{.+}} tile_sizes [0, 0, 128]
// AVX512: tile_using_for {{.+}} tile_sizes [14, 32, 1]
// NEON: tile_using_for {{.+}} tile_sizes [0, 512, 512]
// NEON: tile_using_for {{.+}} tile_sizes [14, 8, 1]
// AVX2-IR-LABEL: func.func @square
// AVX2-IR: vector.transfer_read {{.+}} vector<6x16xf32>
// AVX2-IR-COUNT-6: vector.fma {{.+}} : vector<16xf32>

// optimize_matmuls: f32 matmuls with large static shapes become a two-thread scf.forall
// of cache-tiled loops around an 8x32 register tile updated by outer products
// (vector.fma), with C's tile written after the k loop; it starts from zeros in K's
// first slice (C's zero fill is gone) and from C's tile, as the earlier slices left it,
// in the others.

// CHECK-LABEL: func.func @square
// CHECK: %[[ZERO:.+]] = arith.constant dense<0.000000e+00> : vector<8x32xf32>
// CHECK: scf.forall (%{{.+}}) in (16) shared_outs
// CHECK-NOT: linalg.fill
// CHECK: scf.for %[[KK:.+]] = %[[C0:.+]] to %{{.+}} step %c256
// CHECK: %[[FIRST:.+]] = arith.cmpi eq, %[[KK]], %[[C0]] : index
// CHECK: %[[ACC:.+]] = scf.if %[[FIRST]] -> (vector<8x32xf32>) {
// CHECK-NEXT: scf.yield %[[ZERO]] : vector<8x32xf32>
// CHECK-NEXT: } else {
// CHECK-NEXT: vector.transfer_read {{.+}} vector<8x32xf32>
// CHECK: scf.for {{.+}} iter_args({{.*}}%{{.+}} = %[[ACC]]) -> ({{.*}}vector<8x32xf32>)
// CHECK: vector.transfer_read %{{.+}} : tensor<1024x1024xf32>, vector<{{(1x)?}}32xf32>
// A's mr values of a k step are read one by one (each broadcast a load of its own, not
// shuffles of a vector), each feeding one row's FMA:
// CHECK-COUNT-8: tensor.extract %arg0[%{{.+}}, %{{.+}}] : tensor<1024x1024xf32>
// CHECK: vector.transfer_write {{.+}} : vector<8x32xf32>, tensor<64x512xf32>
// CHECK: scf.forall.in_parallel
// CHECK-NOT: linalg.matmul
// SCRIPT-LABEL: transform.named_sequence @__transform_main
// SCRIPT: transform.structured.tile_using_forall {{.+}} tile_sizes [64, 0]
// SCRIPT: transform.structured.fuse_into_containing_op
// SCRIPT: transform.structured.tile_using_for {{.+}} tile_sizes [0, 512, 256]
// SCRIPT: transform.structured.tile_using_for {{.+}} tile_sizes [8, 32, 1]
// SCRIPT: transform.structured.vectorize {{.+}} {create_named_contraction}
// SCRIPT: transform.loop.hoist_loop_invariant_subsets
// SCRIPT: lowering_strategy = "outerproduct"
func.func @square(%a: tensor<1024x1024xf32>, %b: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1024x1024xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  %r = linalg.matmul ins(%a, %b : tensor<1024x1024xf32>, tensor<1024x1024xf32>) outs(%f : tensor<1024x1024xf32>) -> tensor<1024x1024xf32>
  return %r : tensor<1024x1024xf32>
}

// -----

// Shapes that do not divide the register tile are padded with zeros; the result is a
// slice of the padded product; each task zero-fills its own padded block of C (not a
// padded slice of a zero-filled C). With threads, the padding's copies are linalg ops
// that mirax-parallelize splits (mirax.parallel): B copied into its padded buffer and
// the margin zeroed, the slice of C copied out.
// CHECK-LABEL: func.func @ragged
// CHECK: linalg.copy {{{.*}}mirax.parallel} ins(%arg1 : tensor<999x1030xf32>)
// CHECK: linalg.fill ins(%{{.+}}) outs(%{{.+}} : tensor<999x26xf32>)
// CHECK: scf.forall
// CHECK: linalg.fill ins(%{{.+}}) outs(%{{.+}} : tensor<40x1056xf32>)
// CHECK: vector.fma
// CHECK: tensor.extract_slice {{.+}} [1000, 1030] [1, 1] : tensor<1000x1056xf32> to tensor<1000x1030xf32>
// CHECK: linalg.copy {{{.*}}mirax.parallel}
// CHECK-NOT: linalg.matmul
// SERIAL-LABEL: func.func @ragged
// SERIAL-NOT: mirax.parallel
// SERIAL: tensor.pad
// SERIAL: scf.forall
// SERIAL-NOT: tensor.pad
// SERIAL: linalg.fill ins(%{{.+}}) outs(%{{.+}} : tensor<40x1056xf32>)
// SCRIPT-LABEL: transform.named_sequence @__transform_main
// SCRIPT: transform.structured.pad {{.+}} pad_to_multiple_of [8, 32, 1]
// Split (1000 rows divide 8; 1030 = 1024 + 6 columns): B's first 1024 columns and C's
// slice, tiled without padding, written back in place; then the last 6 columns padded.
// SPLIT-LABEL: func.func @ragged
// SPLIT: %[[B:.+]] = tensor.extract_slice %arg1[0, 0] [999, 1024] [1, 1]
// SPLIT: %[[B2:.+]] = tensor.extract_slice %arg1[0, 1024] [999, 6] [1, 1]
// SPLIT: %[[C:.+]] = tensor.extract_slice %{{.+}}[0, 0] [1000, 1024] [1, 1]
// SPLIT-NOT: tensor.pad
// SPLIT: scf.forall ({{.+}}) in (25) shared_outs(%{{.+}} = %[[C]]) -> (tensor<1000x1024xf32>)
// SPLIT: vector.fma {{.+}} : vector<32xf32>
// SPLIT: %[[MAIN:.+]] = tensor.insert_slice %{{.+}} into %{{.+}}[0, 0] [1000, 1024] [1, 1]
// SPLIT: tensor.extract_slice %[[MAIN]][0, 1024] [1000, 6] [1, 1]
// SPLIT: tensor.pad %[[B2]]
// SPLIT: scf.forall
// SPLIT: tensor.insert_slice %{{.+}} into %{{.+}}[0, 1024] [1000, 6] [1, 1]
// SPLIT-NOT: linalg.matmul
// SPLIT-NOT: __mirax_matmul
func.func @ragged(%a: tensor<1000x999xf32>, %b: tensor<999x1030xf32>) -> tensor<1000x1030xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1000x1030xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<1000x1030xf32>) -> tensor<1000x1030xf32>
  %r = linalg.matmul ins(%a, %b : tensor<1000x999xf32>, tensor<999x1030xf32>) outs(%f : tensor<1000x1030xf32>) -> tensor<1000x1030xf32>
  return %r : tensor<1000x1030xf32>
}

// -----

// Rows padded too (1020 -> 1024): the last task's slice of C's padding is ragged, and
// tiling that tensor.pad guards it with `scf.if %empty {tensor.generate}`; the guard is
// dropped (its result bufferized to a fully dynamic layout, and the register tiles of C
// were then read element by element).
// SPLIT-LABEL: func.func @ragged_rows
// CHECK-LABEL: func.func @ragged_rows
// CHECK: scf.forall
// CHECK-NOT: scf.if
// CHECK-NOT: tensor.generate
// CHECK: vector.transfer_read %{{.+}} : tensor<64x32xf32>, vector<8x32xf32>
// CHECK: vector.fma
// CHECK-NOT: scf.if
// CHECK-LABEL: return
func.func @ragged_rows(%a: tensor<1020x64xf32>, %b: tensor<64x24xf32>) -> tensor<1020x24xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1020x24xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<1020x24xf32>) -> tensor<1020x24xf32>
  %r = linalg.matmul ins(%a, %b : tensor<1020x64xf32>, tensor<64x24xf32>) outs(%f : tensor<1020x24xf32>) -> tensor<1020x24xf32>
  return %r : tensor<1020x24xf32>
}

// -----

// batch_matmul: the batch dim and row blocks share the parallel loop; the unit batch
// dim of the register tile is cast away before the outer-product lowering.
// CHECK-LABEL: func.func @batched
// CHECK: scf.forall (%{{.+}}, %{{.+}}) in (8, 4)
// CHECK: vector.transfer_read %{{.+}} : tensor<8x256x256xf32>, vector<{{(1x)?}}32xf32>
// CHECK: vector.fma
// CHECK-NOT: linalg.batch_matmul
// SCRIPT-LABEL: transform.named_sequence @__transform_main
// SCRIPT: tile_using_forall {{.+}} tile_sizes [1, 64, 0]
// SCRIPT: cast_away_vector_leading_one_dim
// Repacked (pack_b=1): the threads split the batch, each task repacking its own B into
// panels of a buffer of its own, then the GotoBLAS loops over them.
// PACKED-LABEL: func.func @batched
// PACKED: tensor.expand_shape %arg1 {{.+}} into tensor<8x256x8x32xf32>
// PACKED: scf.forall (%[[L:.+]]) in (8)
// PACKED: %[[SLICE:.+]] = tensor.extract_slice %{{.+}}[%[[L]], 0, 0, 0] [1, 256, 8, 32]
// PACKED: %[[OWN:.+]] = tensor.empty() : tensor<1x8x256x32xf32>
// PACKED: %[[PANELS:.+]] = linalg.transpose ins(%[[SLICE]] : tensor<1x256x8x32xf32>) outs(%[[OWN]] : tensor<1x8x256x32xf32>) permutation = [0, 2, 1, 3]
// PACKED: scf.for
// PACKED: vector.transfer_read %[[PANELS]]{{.+}} : tensor<1x8x256x32xf32>, vector<32xf32>
// PACKED-COUNT-8: vector.fma {{.+}} : vector<32xf32>
// PACKED-NOT: linalg.batch_matmul
func.func @batched(%a: tensor<8x256x256xf32>, %b: tensor<8x256x256xf32>) -> tensor<8x256x256xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<8x256x256xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<8x256x256xf32>) -> tensor<8x256x256xf32>
  %r = linalg.batch_matmul ins(%a, %b : tensor<8x256x256xf32>, tensor<8x256x256xf32>) outs(%f : tensor<8x256x256xf32>) -> tensor<8x256x256xf32>
  return %r : tensor<8x256x256xf32>
}

// -----

// Left alone: other dtypes and small products.
// CHECK-LABEL: func.func @skipped
// CHECK-NOT: scf.forall
// CHECK: linalg.matmul {{.+}} tensor<256x256xf64>
// CHECK: linalg.matmul {{.+}} tensor<16x16xf32>
// SCRIPT: None
func.func @skipped(%a: tensor<256x256xf64>, %c: tensor<256x256xf64>, %x: tensor<16x16xf32>, %y: tensor<16x16xf32>) -> (tensor<256x256xf64>, tensor<16x16xf32>) {
  %r = linalg.matmul ins(%a, %a : tensor<256x256xf64>, tensor<256x256xf64>) outs(%c : tensor<256x256xf64>) -> tensor<256x256xf64>
  %s = linalg.matmul ins(%x, %y : tensor<16x16xf32>, tensor<16x16xf32>) outs(%y : tensor<16x16xf32>) -> tensor<16x16xf32>
  return %r, %s : tensor<256x256xf64>, tensor<16x16xf32>
}

// -----

// A transposed first operand (a gradient's x.T @ g) is read in place: the transpose
// folds into the matmul's indexing map and the micro kernel reads A's column of each k
// step from one row of x (8 contiguous scalars, each broadcast from memory).
// CHECK-LABEL: func.func @transposed_a
// CHECK-NOT: linalg.transpose
// CHECK-NOT: vector.transfer_read %arg0
// CHECK: tensor.extract %arg0[%[[K:.+]], %{{.+}}] : tensor<256x784xf32>
// CHECK: vector.fma
// CHECK: tensor.extract %arg0[%[[K]], %{{.+}}] : tensor<256x784xf32>
func.func @transposed_a(%x: tensor<256x784xf32>, %g: tensor<256x512xf32>) -> tensor<784x512xf32> {
  %z = arith.constant 0.0 : f32
  %et = tensor.empty() : tensor<784x256xf32>
  %xt = linalg.transpose ins(%x : tensor<256x784xf32>) outs(%et : tensor<784x256xf32>) permutation = [1, 0]
  %e = tensor.empty() : tensor<784x512xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<784x512xf32>) -> tensor<784x512xf32>
  %r = linalg.matmul ins(%xt, %g : tensor<784x256xf32>, tensor<256x512xf32>) outs(%f : tensor<784x512xf32>) -> tensor<784x512xf32>
  return %r : tensor<784x512xf32>
}

// -----

// SHARED-LABEL: func.func @ragged_packed
// SHARED: %[[BP:.+]] = linalg.transpose ins(%{{.+}} : tensor<256x32x32xf32>) outs(%{{.+}} : tensor<32x256x32xf32>) permutation = [1, 0, 2]
// SHARED: scf.forall (%{{.+}}) in (25)
// SHARED: vector.transfer_read %[[BP]]
// SHARED: tensor.extract_slice %arg0[1000, 0] [4, 256] [1, 1]
// SHARED: scf.forall (%{{.+}}) in (2) shared_outs(%{{.+}}) -> (tensor<4x32x32xf32>)
// SHARED-NOT: linalg.fill
// SHARED: vector.transfer_read %[[BP]]
// SHARED-COUNT-4: vector.fma {{.+}} : vector<32xf32>
// SHARED-NOT: linalg.transpose
// SHARED-NOT: linalg.matmul
// SHARED-LABEL: return
func.func @ragged_packed(%a: tensor<1004x256xf32>, %b: tensor<256x1024xf32>) -> tensor<1004x1024xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1004x1024xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<1004x1024xf32>) -> tensor<1004x1024xf32>
  %r = linalg.matmul ins(%a, %b : tensor<1004x256xf32>, tensor<256x1024xf32>) outs(%f : tensor<1004x1024xf32>) -> tensor<1004x1024xf32>
  return %r : tensor<1004x1024xf32>
}

// -----

// A batched product whose register tile covers all of a task's columns (a transformer's
// attention weights times its values): C's tile is carried through the k loop in
// registers, read before it (here the zero fill, folded) and written once after, not
// read and written every step.
// CHECK-LABEL: func.func @attention
// CHECK: scf.forall (%{{.+}}) in (128)
// CHECK-NOT: vector.transfer_write
// CHECK: scf.for %{{.+}} = %c0 to %c48 step %c1 iter_args({{.+}}) -> (tensor<1x48x32xf32>, vector<8x32xf32>)
// CHECK-NOT: vector.transfer_write
// CHECK-COUNT-8: vector.fma {{.+}} : vector<32xf32>
// CHECK-NOT: vector.transfer_write
// CHECK: scf.yield %{{.+}}, %{{.+}} : tensor<1x48x32xf32>, vector<8x32xf32>
// CHECK-NEXT: }
// CHECK-NEXT: vector.transfer_write %{{.+}}#1, %{{.+}}#0
func.func @attention(%a: tensor<128x48x48xf32>, %b: tensor<128x48x32xf32>) -> tensor<128x48x32xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<128x48x32xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<128x48x32xf32>) -> tensor<128x48x32xf32>
  %r = linalg.batch_matmul ins(%a, %b : tensor<128x48x48xf32>, tensor<128x48x32xf32>) outs(%f : tensor<128x48x32xf32>) -> tensor<128x48x32xf32>
  return %r : tensor<128x48x32xf32>
}

// -----

// x @ W.T (MLX's Linear): the transposed weight is not copied; B's nr-wide panels are
// repacked from W's N x K layout (nr-row blocks of W, each transposed), whatever pack_b
// the tiles ask for, and the micro kernel is the packed one.
// CHECK-LABEL: func.func @linear
// CHECK: %[[W3:.+]] = tensor.expand_shape %arg1 {{\[}}[0, 1], [2]] output_shape [16, 32, 1024] : tensor<512x1024xf32> into tensor<16x32x1024xf32>
// CHECK: linalg.transpose ins(%[[W3]] : tensor<16x32x1024xf32>) outs(%{{.+}} : tensor<16x1024x32xf32>) permutation = [0, 2, 1]
// CHECK: vector.transfer_read %{{.+}} : tensor<16x1024x32xf32>, vector<32xf32>
// CHECK-COUNT-8: vector.fma {{.+}} : vector<32xf32>
// CHECK-NOT: linalg.matmul
func.func @linear(%x: tensor<256x1024xf32>, %w: tensor<512x1024xf32>) -> tensor<256x512xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1024x512xf32>
  %t = linalg.transpose ins(%w : tensor<512x1024xf32>) outs(%e : tensor<1024x512xf32>) permutation = [1, 0]
  %c0 = tensor.empty() : tensor<256x512xf32>
  %c = linalg.fill ins(%z : f32) outs(%c0 : tensor<256x512xf32>) -> tensor<256x512xf32>
  %r = linalg.matmul ins(%x, %t : tensor<256x1024xf32>, tensor<1024x512xf32>) outs(%c : tensor<256x512xf32>) -> tensor<256x512xf32>
  return %r : tensor<256x512xf32>
}
