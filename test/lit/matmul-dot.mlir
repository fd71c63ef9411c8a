// Products a few vectors wide at most (matmul_dot.MAX_VECTORS) become dot products along K
// (lowering/matmul_dot.py):
// rows of A and of W (B = W.T, nn.Linear's layout) read contiguously, mr x nr vector
// accumulators from the host's registers, lane sums at the end.
// RUN: %PYTHON -m mirax.lowering.matmul_codegen %s -split-input-file --host=avx512 | FileCheck %s
// RUN: %PYTHON -m mirax.lowering.matmul_codegen %s -split-input-file --host=avx2 | FileCheck %s --check-prefix=AVX2

// AVX-512 (32 zmm, 16 lanes), 10 columns: 4 x 5 accumulators, two chunks of 5 columns.
// CHECK-LABEL: func.func @logits
// CHECK-NOT: linalg.matmul
// CHECK: scf.forall (%{{.+}}) in ({{[0-9]+}}) shared_outs
// CHECK: scf.for
// CHECK: scf.for {{.+}} iter_args
// CHECK-COUNT-4: vector.transfer_read %arg0{{.+}} : tensor<256x512xf32>, vector<16xf32>
// CHECK-COUNT-5: vector.transfer_read %arg1{{.+}} : tensor<10x512xf32>, vector<16xf32>
// CHECK-COUNT-20: vector.fma {{.+}} : vector<16xf32>
// CHECK: vector.reduction <add>, %{{.+}} fastmath<reassoc> : vector<16xf32> into f32
// CHECK: vector.from_elements {{.+}} : vector<10xf32>
// CHECK: vector.transfer_write {{.+}} : vector<10xf32>, tensor<?x10xf32>
// CHECK: tensor.parallel_insert_slice
// AVX2 (16 ymm, 8 lanes): 3 x 3 accumulators, columns in chunks of 3, 3, 3 and 1.
// AVX2-LABEL: func.func @logits
// AVX2-NOT: linalg.matmul
// AVX2: scf.for {{.+}} iter_args
// AVX2-COUNT-9: vector.fma {{.+}} : vector<8xf32>
// AVX2: vector.reduction <add>, %{{.+}} fastmath<reassoc> : vector<8xf32> into f32
func.func @logits(%x: tensor<256x512xf32>, %w: tensor<10x512xf32>) -> tensor<256x10xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<256x10xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<256x10xf32>) -> tensor<256x10xf32>
  %r = linalg.matmul indexing_maps = [affine_map<(m, n, k) -> (m, k)>, affine_map<(m, n, k) -> (n, k)>, affine_map<(m, n, k) -> (m, n)>]
         ins(%x, %w : tensor<256x512xf32>, tensor<10x512xf32>) outs(%f : tensor<256x10xf32>) -> tensor<256x10xf32>
  return %r : tensor<256x10xf32>
}

// -----

// B stored K x N (x @ w): transposed first (a small copy), then the same loops; K = 100
// ends with a masked read at 96 (12 x 8 lanes, 6 x 16) padded with zeros; AVX2 takes 3 x 3
// accumulators.
// CHECK-LABEL: func.func @head
// CHECK: linalg.transpose ins(%arg1 : tensor<100x6xf32>) outs(%{{.+}} : tensor<6x100xf32>)
// CHECK: vector.fma {{.+}} : vector<16xf32>
// CHECK: vector.transfer_read %arg0[%{{.+}}, %c96], %{{.+}} : tensor<640x100xf32>, vector<16xf32>
// AVX2-LABEL: func.func @head
// AVX2: linalg.transpose ins(%arg1 : tensor<100x6xf32>)
// AVX2: scf.for {{.+}} iter_args
// AVX2-COUNT-9: vector.fma {{.+}} : vector<8xf32>
// AVX2: vector.transfer_read %arg0[%{{.+}}, %c96], %{{.+}} : tensor<640x100xf32>, vector<8xf32>
// AVX2: vector.reduction <add>, %{{.+}} fastmath<reassoc> : vector<8xf32> into f32
func.func @head(%x: tensor<640x100xf32>, %w: tensor<100x6xf32>) -> tensor<640x6xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<640x6xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<640x6xf32>) -> tensor<640x6xf32>
  %r = linalg.matmul ins(%x, %w : tensor<640x100xf32>, tensor<100x6xf32>) outs(%f : tensor<640x6xf32>) -> tensor<640x6xf32>
  return %r : tensor<640x6xf32>
}

// -----

// Wider than MAX_VECTORS = 4 vectors (65 columns on AVX-512, 33 on AVX2): no dot products
// (left to the outer products' planning).
// CHECK-LABEL: func.func @wide
// CHECK-NOT: vector.reduction
// CHECK: return
// AVX2-LABEL: func.func @wide
// AVX2-NOT: vector.reduction
// AVX2: return
func.func @wide(%x: tensor<256x512xf32>, %w: tensor<512x65xf32>) -> tensor<256x65xf32> {
  %z = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<256x65xf32>
  %f = linalg.fill ins(%z : f32) outs(%e : tensor<256x65xf32>) -> tensor<256x65xf32>
  %r = linalg.matmul ins(%x, %w : tensor<256x512xf32>, tensor<512x65xf32>) outs(%f : tensor<256x65xf32>) -> tensor<256x65xf32>
  return %r : tensor<256x65xf32>
}
