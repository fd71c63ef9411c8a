// RUN: env MIRAX_NUM_THREADS=1 %mirax-opt %s --convert-mirax-to-linalg | FileCheck %s
// RUN: %mirax-opt %s --convert-mirax-to-linalg=target=gpu | FileCheck %s --check-prefix=GPU

// On the CPU a convolution is a matrix product (dialect/conv.py, `_im2col_products`): the
// weights as a (K*C, C_out) matrix, the padded input's windows copied into rows (one
// linalg.generic whose inner dim is a run of the kernel's last dim and the channels:
// 3 x 4 = 12, read from the input's last two dims as one, at 4 x the output column),
// one linalg.matmul, barriers keeping fusion from folding them back into one
// convolution loop nest. This window copy fits the chunk budget of any host: no loop.
// CHECK: #[[WIN:.+]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1 + d3, d2 * 4 + d4)>
// CHECK-LABEL: func.func @conv3x3
// CHECK-SAME:    (%[[X:.+]]: tensor<2x8x8x4xf32>, %[[W:.+]]: tensor<6x3x3x4xf32>)
// CHECK-NOT:     scf.for
// CHECK:         %[[W2:.+]] = tensor.collapse_shape %[[W]] {{\[\[}}0], [1, 2, 3]] : tensor<6x3x3x4xf32> into tensor<6x36xf32>
// CHECK:         %[[WT:.+]] = linalg.transpose ins(%[[W2]] : tensor<6x36xf32>) outs(%{{.+}} : tensor<36x6xf32>) permutation = [1, 0]
// CHECK:         %[[B:.+]] = "mirax.optimization_barrier"(%[[WT]]) : (tensor<36x6xf32>) -> tensor<36x6xf32>
// CHECK:         %[[Z:.+]] = linalg.fill ins(%{{.+}} : f32) outs(%{{.+}} : tensor<128x6xf32>)
// CHECK:         %[[P:.+]] = tensor.pad %[[X]] low[0, 1, 1, 0] high[0, 1, 1, 0]
// CHECK:         %[[V:.+]] = tensor.collapse_shape %[[P]] {{\[\[}}0], [1], [2, 3]] : tensor<2x10x10x4xf32> into tensor<2x10x40xf32>
// CHECK:         %[[COL:.+]] = linalg.generic {indexing_maps = [#[[WIN]], #{{.+}}], iterator_types = ["parallel", "parallel", "parallel", "parallel", "parallel"]} ins(%[[V]] : tensor<2x10x40xf32>) outs(%{{.+}} : tensor<2x8x8x3x12xf32>)
// CHECK-NEXT:    ^bb0(%[[IN:.+]]: f32, %{{.+}}: f32):
// CHECK-NEXT:      linalg.yield %[[IN]] : f32
// CHECK:         %[[A:.+]] = tensor.collapse_shape %[[COL]] {{\[\[}}0, 1, 2], [3, 4]] : tensor<2x8x8x3x12xf32> into tensor<128x36xf32>
// CHECK:         %[[AB:.+]] = "mirax.optimization_barrier"(%[[A]])
// CHECK:         %[[R:.+]] = linalg.matmul ins(%[[AB]], %[[B]] : tensor<128x36xf32>, tensor<36x6xf32>) outs(%[[Z]] : tensor<128x6xf32>)
// CHECK:         %[[RB:.+]] = "mirax.optimization_barrier"(%[[R]]) : (tensor<128x6xf32>) -> tensor<128x6xf32>
// CHECK:         tensor.expand_shape %[[RB]] {{\[\[}}0, 1, 2], [3]] output_shape [2, 8, 8, 6] : tensor<128x6xf32> into tensor<2x8x8x6xf32>
// GPU-LABEL:   func.func @conv3x3
// GPU-NOT:       linalg.matmul
// GPU:           linalg.conv_2d_nhwc_fhwc
func.func @conv3x3(%x: tensor<2x8x8x4xf32>, %w: tensor<6x3x3x4xf32>) -> tensor<2x8x8x6xf32> {
  %0 = "mirax.conv"(%x, %w) {stride = array<i64: 1, 1>, padding_lo = array<i64: 1, 1>, padding_hi = array<i64: 1, 1>, kernel_dilation = array<i64: 1, 1>, input_dilation = array<i64: 1, 1>, groups = 1 : i64, flip = false} : (tensor<2x8x8x4xf32>, tensor<6x3x3x4xf32>) -> tensor<2x8x8x6xf32>
  return %0 : tensor<2x8x8x6xf32>
}

// A window copy larger than any host's budget: chunks of output rows in an scf.for, each
// a copy of its windows and a product inserted into the result's rows (on one thread:
// with more, the chunks go to the threads, convert-mirax-to-linalg-conv-threads.mlir).
// Each chunk pads the input rows it reads (the rows that exist, then zeros: as many as
// fall outside the input, computed from the chunk's first row), so the whole padded
// input is never made.
// CHECK-LABEL: func.func @conv_chunked
// CHECK-SAME:    (%[[X:.+]]: tensor<64x224x224x64xf32>,
// CHECK-NOT:     tensor.pad
// CHECK:         scf.for %[[R:.+]] = %{{.+}} to %{{.+}} step %{{.+}} iter_args(%[[OUT:.+]] = %{{.+}}) -> (tensor<3211264x64xf32>)
// CHECK:           %[[ROWS:.+]] = tensor.extract_slice %[[X]][%{{.+}}, %{{.+}}, 0, 0] [1, %[[N:.+]], 224, 64] [1, 1, 1, 1] : tensor<64x224x224x64xf32> to tensor<1x?x224x64xf32>
// CHECK:           %[[PAD:.+]] = tensor.pad %[[ROWS]] low[0, %[[LOW:.+]], 1, 0] high[0, %[[HIGH:.+]], 1, 0]
// CHECK:           } : tensor<1x?x224x64xf32> to tensor<1x?x226x64xf32>
// CHECK:           tensor.cast %[[PAD]] : tensor<1x?x226x64xf32> to tensor<1x{{[0-9]+}}x226x64xf32>
// CHECK:           linalg.generic
// CHECK:           "mirax.optimization_barrier"
// CHECK:           %[[M:.+]] = linalg.matmul
// CHECK:           %[[I:.+]] = tensor.insert_slice %[[M]] into %[[OUT]][%{{.+}}, 0]
// CHECK:           scf.yield %[[I]] : tensor<3211264x64xf32>
func.func @conv_chunked(%x: tensor<64x224x224x64xf32>, %w: tensor<64x3x3x64xf32>) -> tensor<64x224x224x64xf32> {
  %0 = "mirax.conv"(%x, %w) {stride = array<i64: 1, 1>, padding_lo = array<i64: 1, 1>, padding_hi = array<i64: 1, 1>, kernel_dilation = array<i64: 1, 1>, input_dilation = array<i64: 1, 1>, groups = 1 : i64, flip = false} : (tensor<64x224x224x64xf32>, tensor<64x3x3x64xf32>) -> tensor<64x224x224x64xf32>
  return %0 : tensor<64x224x224x64xf32>
}

// Input dilation 2 (a transposed convolution): four phases, each a product over the
// undilated input with the kernel taps it reaches (a strided slice of the weights: 1, 2,
// 2 and 4 taps), inserted at its positions with stride 2; the dilated input never exists.
// CHECK-LABEL: func.func @conv_transposed
// CHECK-SAME:    (%[[X:.+]]: tensor<1x3x3x2xf32>, %[[W:.+]]: tensor<4x3x3x2xf32>)
// CHECK-NOT:     tensor.pad
// CHECK:         %[[E:.+]] = tensor.empty() : tensor<1x5x5x4xf32>
// CHECK:         tensor.extract_slice %[[W]][0, 1, 1, 0] [4, 1, 1, 2] [1, 2, 2, 1]
// CHECK:         %[[P0:.+]] = tensor.insert_slice %{{.+}} into %[[E]][0, 0, 0, 0] [1, 3, 3, 4] [1, 2, 2, 1]
// CHECK:         tensor.extract_slice %[[W]][0, 1, 0, 0] [4, 1, 2, 2] [1, 2, 2, 1]
// CHECK:         %[[P1:.+]] = tensor.insert_slice %{{.+}} into %[[P0]][0, 0, 1, 0] [1, 3, 2, 4] [1, 2, 2, 1]
// CHECK:         tensor.extract_slice %[[W]][0, 0, 1, 0] [4, 2, 1, 2] [1, 2, 2, 1]
// CHECK:         %[[P2:.+]] = tensor.insert_slice %{{.+}} into %[[P1]][0, 1, 0, 0] [1, 2, 3, 4] [1, 2, 2, 1]
// CHECK:         tensor.extract_slice %[[W]][0, 0, 0, 0] [4, 2, 2, 2] [1, 2, 2, 1]
// CHECK:         %[[P3:.+]] = tensor.insert_slice %{{.+}} into %[[P2]][0, 1, 1, 0] [1, 2, 2, 4] [1, 2, 2, 1]
// CHECK:         return %[[P3]]
func.func @conv_transposed(%x: tensor<1x3x3x2xf32>, %w: tensor<4x3x3x2xf32>) -> tensor<1x5x5x4xf32> {
  %0 = "mirax.conv"(%x, %w) {stride = array<i64: 1, 1>, padding_lo = array<i64: 1, 1>, padding_hi = array<i64: 1, 1>, kernel_dilation = array<i64: 1, 1>, input_dilation = array<i64: 2, 2>, groups = 1 : i64, flip = false} : (tensor<1x3x3x2xf32>, tensor<4x3x3x2xf32>) -> tensor<1x5x5x4xf32>
  return %0 : tensor<1x5x5x4xf32>
}
