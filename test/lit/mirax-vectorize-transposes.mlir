// RUN: %mirax-opt %s -split-input-file --mirax-vectorize-transposes="lanes=16 line=64 run-block=8" | FileCheck %s
// RUN: %mirax-opt %s -split-input-file --mirax-vectorize-transposes="lanes=8 line=64 run-block=8" | FileCheck %s --check-prefix=AVX2
// RUN: %mirax-opt %s -split-input-file --mirax-vectorize-transposes="lanes=4 line=128 run-block=8" | FileCheck %s --check-prefix=LINE128

// A 2-d transpose becomes 16x16 (8x8 with AVX2's lanes) register blocks: contiguous
// vector reads of the source, a transpose lowered to shuffles, contiguous writes.
// CHECK-LABEL: func.func @square
// CHECK: scf.for
// CHECK: scf.for
// CHECK: tensor.extract_slice %arg0[%{{.+}}, %{{.+}}] [16, 16] [1, 1] : tensor<512x784xf32> to tensor<16x16xf32>
// CHECK: vector.transfer_read {{.+}} : tensor<16x16xf32>, vector<16x16xf32>
// CHECK: vector.shuffle
// CHECK: vector.transfer_write {{.+}} : vector<16x16xf32>, tensor<16x16xf32>
// CHECK-NOT: linalg.transpose
// With 8 lanes, blocks go in pairs along the source rows, so that each source row read is
// a whole cache line (16 floats), the pair's two 8x8 blocks one after the other:
// AVX2-LABEL: func.func @square
// AVX2: tensor.extract_slice %arg0[%{{.+}}, %{{.+}}] [8, 16] [1, 1] : tensor<512x784xf32> to tensor<8x16xf32>
// AVX2: scf.for {{.+}} step %c8
// AVX2: vector.transfer_read {{.+}} : tensor<8x8xf32>, vector<8x8xf32>
// AVX2: vector.shuffle
// NEON's 4 lanes and Apple's 128-byte lines would group 8 blocks (32 floats), which 784
// does not hold a whole number of: the blocks stay single.
// LINE128-LABEL: func.func @square
// LINE128-NOT: tensor<4x32xf32>
// LINE128: vector.transfer_read {{.+}} : tensor<4x4xf32>, vector<4x4xf32>
func.func @square(%a: tensor<512x784xf32>) -> tensor<784x512xf32> {
  %e = tensor.empty() : tensor<784x512xf32>
  %t = linalg.transpose ins(%a : tensor<512x784xf32>) outs(%e : tensor<784x512xf32>) permutation = [1, 0]
  return %t : tensor<784x512xf32>
}

// -----

// A transpose that keeps the innermost dim (attention's head split, matmul's B repacked
// into panels) copies runs of it: one slice copy per run (a vector read and write once
// bufferized), instead of a scalar loop LLVM unrolls and cannot vectorize (source and
// destination may alias). A run longer than 4 vectors is cut into 4-vector pieces. The
// runs are copied in blocks of up to 8 along each dim that moves (a divisor of it; a dim
// of at most 8 is one block): whole lines of a few source rows read, runs written in a
// row. A transpose whose swapped dims the lanes do not divide is left alone (10x512 with
// 8 lanes), unless the output's innermost dim is shorter than the lanes (10x512 with
// 16: blocks of 10 x 16, below).
// CHECK-LABEL: func.func @keeps_inner
// CHECK: scf.for %{{.+}} = %c0 to %c48 step %c8
// CHECK: tensor.extract_slice %arg0[0, %{{.+}}, 0, 0] [2, 8, 4, 16] [1, 1, 1, 1] : tensor<2x48x4x16xf32> to tensor<2x8x4x16xf32>
// CHECK: tensor.extract_slice %{{.+}}[{{.+}}] [1, 1, 1, 16] [1, 1, 1, 1] : tensor<2x8x4x16xf32> to tensor<1x1x1x16xf32>
// CHECK: tensor.insert_slice {{.+}} [1, 1, 1, 16] [1, 1, 1, 1] : tensor<1x1x1x16xf32> into tensor<2x4x8x16xf32>
// CHECK: tensor.extract_slice %arg1[{{.+}}] [1, 1, 64] [1, 1, 1] : tensor<8x4x256xf32> to tensor<1x1x64xf32>
// CHECK: vector.transfer_read {{.+}} : tensor<10x16xf32>, vector<10x16xf32>
// CHECK-NOT: linalg.transpose
// AVX2-LABEL: func.func @keeps_inner
// AVX2: tensor.extract_slice %arg1[{{.+}}] [1, 1, 32] [1, 1, 1] : tensor<8x4x256xf32> to tensor<1x1x32xf32>
// AVX2: linalg.transpose {{.+}} permutation = [1, 0]
func.func @keeps_inner(%a: tensor<2x48x4x16xf32>, %c: tensor<8x4x256xf32>, %b: tensor<10x512xf32>) -> (tensor<2x4x48x16xf32>, tensor<4x8x256xf32>, tensor<512x10xf32>) {
  %e = tensor.empty() : tensor<2x4x48x16xf32>
  %t = linalg.transpose ins(%a : tensor<2x48x4x16xf32>) outs(%e : tensor<2x4x48x16xf32>) permutation = [0, 2, 1, 3]
  %g = tensor.empty() : tensor<4x8x256xf32>
  %v = linalg.transpose ins(%c : tensor<8x4x256xf32>) outs(%g : tensor<4x8x256xf32>) permutation = [1, 0, 2]
  %f = tensor.empty() : tensor<512x10xf32>
  %u = linalg.transpose ins(%b : tensor<10x512xf32>) outs(%f : tensor<512x10xf32>) permutation = [1, 0]
  return %t, %v, %u : tensor<2x4x48x16xf32>, tensor<4x8x256xf32>, tensor<512x10xf32>
}

// -----

// An output innermost dim shorter than the lanes (matmul's A repacked into 6-row panels:
// [M/6][6][K] -> [M/6][K][6]) is one block of 6 rows by the lanes: 6 contiguous reads,
// one shuffle, the block's 48 elements written in a row; with 16 lanes, which do not
// divide K = 1000, blocks of 6 x 8 (and of 6 x 16 where 16 divides K).
// CHECK-LABEL: func.func @short_inner
// CHECK: vector.transfer_read {{.+}} : tensor<1x6x8xf32>, vector<1x6x8xf32>
// CHECK: vector.shuffle {{.+}} : vector<48xf32>, vector<48xf32>
// CHECK: vector.transfer_write {{.+}} : vector<1x8x6xf32>, tensor<1x8x6xf32>
// CHECK: vector.transfer_read {{.+}} : tensor<1x6x16xf32>, vector<1x6x16xf32>
// CHECK: vector.shuffle {{.+}} : vector<96xf32>, vector<96xf32>
// CHECK-NOT: linalg.transpose
// AVX2-LABEL: func.func @short_inner
// AVX2: vector.transfer_read {{.+}} : tensor<1x6x8xf32>, vector<1x6x8xf32>
// AVX2: vector.shuffle %{{.+}}, %{{.+}} [0, 8, 16, 24, 32, 40, 1, 9, {{.+}}] : vector<48xf32>, vector<48xf32>
// AVX2: vector.transfer_write {{.+}} : vector<1x8x6xf32>, tensor<1x8x6xf32>
// AVX2-NOT: linalg.transpose
func.func @short_inner(%a: tensor<4x6x1000xf32>, %b: tensor<4x6x64xf32>) -> (tensor<4x1000x6xf32>, tensor<4x64x6xf32>) {
  %e = tensor.empty() : tensor<4x1000x6xf32>
  %t = linalg.transpose ins(%a : tensor<4x6x1000xf32>) outs(%e : tensor<4x1000x6xf32>) permutation = [0, 2, 1]
  %f = tensor.empty() : tensor<4x64x6xf32>
  %u = linalg.transpose ins(%b : tensor<4x6x64xf32>) outs(%f : tensor<4x64x6xf32>) permutation = [0, 2, 1]
  return %t, %u : tensor<4x1000x6xf32>, tensor<4x64x6xf32>
}

// -----

// Batched: the two dims that trade places are blocked, the batch dim tiled by 1.
// CHECK-LABEL: func.func @batched
// CHECK: vector.transfer_read {{.+}} : tensor<1x16x16xf32>, vector<1x16x16xf32>
// CHECK: vector.shuffle
// CHECK-NOT: linalg.transpose
// Here 32 floats fit: with 128-byte lines each source row read is one line of 8 blocks.
// LINE128-LABEL: func.func @batched
// LINE128: tensor.extract_slice %arg0[%{{.+}}, %{{.+}}, %{{.+}}] [1, 4, 32] [1, 1, 1] : tensor<4x64x32xf32> to tensor<1x4x32xf32>
// LINE128: vector.transfer_read {{.+}} : tensor<1x4x4xf32>, vector<1x4x4xf32>
func.func @batched(%a: tensor<4x64x32xf32>) -> tensor<4x32x64xf32> {
  %e = tensor.empty() : tensor<4x32x64xf32>
  %t = linalg.transpose ins(%a : tensor<4x64x32xf32>) outs(%e : tensor<4x32x64xf32>) permutation = [0, 2, 1]
  return %t : tensor<4x32x64xf32>
}

// -----

// An elementwise generic reading one input through a permutation (`x.T + y` after
// mirax-fuse) is the same transpose with the body on the way: register blocks read
// contiguously, transposed by shuffles, the add on vectors; the other input is read in
// loop order. Two permuted inputs, or a map that is no permutation, are left alone.
// AVX2-LABEL: func.func @fused
// AVX2: scf.for
// AVX2: %[[A:.+]] = vector.transfer_read %{{.+}} : tensor<8x8xf32>, vector<8x8xf32>
// AVX2: vector.shuffle
// AVX2: %[[B:.+]] = vector.transfer_read %{{.+}} : tensor<8x8xf32>, vector<8x8xf32>
// AVX2: arith.addf %{{.+}}, %[[B]] : vector<8x8xf32>
// AVX2: vector.transfer_write
// AVX2-LABEL: func.func @two_permuted
// AVX2-NOT: vector.
// AVX2: linalg.generic
#id = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
func.func @fused(%x: tensor<64x128xf32>, %y: tensor<128x64xf32>) -> tensor<128x64xf32> {
  %e = tensor.empty() : tensor<128x64xf32>
  %r = linalg.generic {indexing_maps = [#tr, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %y : tensor<64x128xf32>, tensor<128x64xf32>) outs(%e : tensor<128x64xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<128x64xf32>
  return %r : tensor<128x64xf32>
}
func.func @two_permuted(%x: tensor<64x128xf32>, %y: tensor<64x128xf32>) -> tensor<128x64xf32> {
  %e = tensor.empty() : tensor<128x64xf32>
  %r = linalg.generic {indexing_maps = [#tr, #tr, #id], iterator_types = ["parallel", "parallel"]}
      ins(%x, %y : tensor<64x128xf32>, tensor<64x128xf32>) outs(%e : tensor<128x64xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.addf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<128x64xf32>
  return %r : tensor<128x64xf32>
}
