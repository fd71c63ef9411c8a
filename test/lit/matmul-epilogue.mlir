// RUN: %PYTHON -m mirax.lowering.matmul_codegen %s -split-input-file --parallel-min=65536 --tiles=mr=8,nr=32,kc=256,nc=512,forall_m=64,min_flops=524288,pack_b=0,split=1,threads=2 | FileCheck %s
// With B repacked, C's tiles are stores into its [M][N/nr][nr] view: the operands are
// read through the same view (a bias: its [N/nr][nr] view, broadcast over the rows).
// RUN: %PYTHON -m mirax.lowering.matmul_codegen %s -split-input-file --parallel-min=65536 --tiles=mr=8,nr=32,kc=256,nc=512,forall_m=64,min_flops=524288,pack_b=1,split=1,threads=2 | FileCheck %s --check-prefix=PACKED

// An elementwise linalg.generic that is a product's only reader runs on each register
// tile before its store (lowering/matmul_epilogue.py), in K's last slice where K is
// sliced; the generic goes. SGD's update: W's tile read where C's is stored, the
// learning rate read once and broadcast.

// CHECK-LABEL: func.func @sgd
// CHECK-SAME: (%{{.+}}: tensor<256x512xf32>, %{{.+}}: tensor<512x512xf32>, %[[W:.+]]: tensor<256x512xf32>, %[[LR:.+]]: tensor<f32>)
// CHECK: %[[RATE:.+]] = tensor.extract %[[LR]][] : tensor<f32>
// CHECK: scf.forall (%[[T:.+]]) in (4) shared_outs
// CHECK: %[[WROWS:.+]] = tensor.extract_slice %[[W]][%{{.+}}, 0] [64, 512] [1, 1]
// CHECK: scf.for %[[KK:.+]] = %{{.+}} to %[[K:.+]] step %[[KC:.+]] iter_args
// CHECK: %[[ACC:.+]]:2 = scf.for
// CHECK-COUNT-8: vector.fma
// CHECK: %[[NEXT:.+]] = arith.addi %[[KK]], %[[KC]] : index
// CHECK: %[[LAST:.+]] = arith.cmpi sge, %[[NEXT]], %[[K]] : index
// CHECK: %[[OUT:.+]] = scf.if %[[LAST]] -> (vector<8x32xf32>) {
// CHECK-NEXT: %[[WTILE:.+]] = vector.transfer_read %[[WROWS]][%{{.+}}, %{{.+}}], %{{.+}} {in_bounds = [true, true]} : tensor<64x512xf32>, vector<8x32xf32>
// CHECK-NEXT: %[[SPLAT:.+]] = vector.broadcast %[[RATE]] : f32 to vector<8x32xf32>
// CHECK-NEXT: %[[STEP:.+]] = arith.mulf %[[SPLAT]], %[[ACC]]#1 : vector<8x32xf32>
// CHECK-NEXT: %[[NEW:.+]] = arith.subf %[[WTILE]], %[[STEP]] : vector<8x32xf32>
// CHECK-NEXT: scf.yield %[[NEW]] : vector<8x32xf32>
// CHECK-NEXT: } else {
// CHECK-NEXT: scf.yield %[[ACC]]#1 : vector<8x32xf32>
// CHECK: vector.transfer_write %[[OUT]], %[[ACC]]#0
// CHECK-NOT: linalg.generic
// CHECK: return

// PACKED-LABEL: func.func @sgd
// PACKED: %[[WVIEW:.+]] = tensor.expand_shape %arg2 {{\[\[}}0], [1, 2]] output_shape [256, 16, 32]
// PACKED: tensor.extract_slice %[[WVIEW]]
// PACKED: scf.if %{{.+}} -> (vector<8x1x32xf32>)
// PACKED: vector.transfer_read {{.+}} : tensor<64x16x32xf32>, vector<8x1x32xf32>
// PACKED: arith.subf {{.+}} : vector<8x1x32xf32>
// PACKED-NOT: linalg.generic
// PACKED: return
#id = affine_map<(d0, d1) -> (d0, d1)>
#scalar = affine_map<(d0, d1) -> ()>
func.func @sgd(%a: tensor<256x512xf32>, %b: tensor<512x512xf32>, %w: tensor<256x512xf32>, %lr: tensor<f32>) -> tensor<256x512xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<256x512xf32>
  %c0 = linalg.fill ins(%zero : f32) outs(%e : tensor<256x512xf32>) -> tensor<256x512xf32>
  %c = linalg.matmul ins(%a, %b : tensor<256x512xf32>, tensor<512x512xf32>) outs(%c0 : tensor<256x512xf32>) -> tensor<256x512xf32>
  %r = linalg.generic {indexing_maps = [#id, #scalar, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w, %lr, %c : tensor<256x512xf32>, tensor<f32>, tensor<256x512xf32>) outs(%e : tensor<256x512xf32>) {
  ^bb0(%x: f32, %s: f32, %g: f32, %o: f32):
    %m = arith.mulf %s, %g : f32
    %d = arith.subf %x, %m : f32
    linalg.yield %d : f32
  } -> tensor<256x512xf32>
  return %r : tensor<256x512xf32>
}

// -----

// A layer's bias and relu: the bias row read as the tile's columns, broadcast over its
// rows; the body's constant broadcast to the tile.

// CHECK: #[[ROWS:.+]] = affine_map<(d0) -> (0, d0)>
// CHECK-LABEL: func.func @bias_relu
// CHECK: arith.cmpi sge
// CHECK-NEXT: scf.if %{{.+}} -> (vector<8x32xf32>) {
// CHECK-NEXT: %[[BIAS:.+]] = vector.transfer_read %{{.+}}[%{{.+}}], %{{.+}} {in_bounds = [true, true], permutation_map = #[[ROWS]]} : tensor<512xf32>, vector<8x32xf32>
// CHECK-NEXT: %[[SUM:.+]] = arith.addf %{{.+}}#1, %[[BIAS]] : vector<8x32xf32>
// CHECK-NEXT: %[[ZEROS:.+]] = vector.broadcast %{{.+}} : f32 to vector<8x32xf32>
// CHECK-NEXT: arith.maximumf %[[SUM]], %[[ZEROS]] : vector<8x32xf32>
// CHECK-NOT: linalg.generic
// CHECK: return

// PACKED: #[[BCAST:.+]] = affine_map<(d0, d1) -> (0, d0, d1)>
// PACKED-LABEL: func.func @bias_relu
// PACKED: %[[BVIEW:.+]] = tensor.expand_shape %arg2 {{\[\[}}0, 1]] output_shape [16, 32] : tensor<512xf32> into tensor<16x32xf32>
// PACKED: arith.cmpi sge
// PACKED-NEXT: scf.if %{{.+}} -> (vector<8x1x32xf32>) {
// PACKED-NEXT: vector.transfer_read %{{.+}}[%{{.+}}, %{{.+}}], %{{.+}} {in_bounds = [true, true, true], permutation_map = #[[BCAST]]} : tensor<16x32xf32>, vector<8x1x32xf32>
// PACKED-NOT: linalg.generic
// PACKED: return
#id = affine_map<(d0, d1) -> (d0, d1)>
#cols = affine_map<(d0, d1) -> (d1)>
func.func @bias_relu(%a: tensor<256x512xf32>, %b: tensor<512x512xf32>, %bias: tensor<512xf32>) -> tensor<256x512xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<256x512xf32>
  %c0 = linalg.fill ins(%zero : f32) outs(%e : tensor<256x512xf32>) -> tensor<256x512xf32>
  %c = linalg.matmul ins(%a, %b : tensor<256x512xf32>, tensor<512x512xf32>) outs(%c0 : tensor<256x512xf32>) -> tensor<256x512xf32>
  %r = linalg.generic {indexing_maps = [#id, #cols, #id], iterator_types = ["parallel", "parallel"]}
      ins(%c, %bias : tensor<256x512xf32>, tensor<512xf32>) outs(%e : tensor<256x512xf32>) {
  ^bb0(%g: f32, %v: f32, %o: f32):
    %s = arith.addf %g, %v : f32
    %m = arith.maximumf %s, %zero : f32
    linalg.yield %m : f32
  } -> tensor<256x512xf32>
  return %r : tensor<256x512xf32>
}

// -----

// A product read twice (here: returned too) keeps C in memory: its reader stays a
// generic of its own.

// CHECK-LABEL: func.func @two_readers
// CHECK: vector.fma
// CHECK-NOT: scf.if %{{.+}} -> (vector<8x32xf32>) {{{$}}
// CHECK: linalg.generic
// CHECK-SAME: ins(%[[C:[^ ]+]] : tensor<256x512xf32>)
// CHECK: arith.maximumf {{.+}} : f32
// CHECK: return %{{.+}}, %[[C]]
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @two_readers(%a: tensor<256x512xf32>, %b: tensor<512x512xf32>) -> (tensor<256x512xf32>, tensor<256x512xf32>) {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<256x512xf32>
  %c0 = linalg.fill ins(%zero : f32) outs(%e : tensor<256x512xf32>) -> tensor<256x512xf32>
  %c = linalg.matmul ins(%a, %b : tensor<256x512xf32>, tensor<512x512xf32>) outs(%c0 : tensor<256x512xf32>) -> tensor<256x512xf32>
  %r = linalg.generic {indexing_maps = [#id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%c : tensor<256x512xf32>) outs(%e : tensor<256x512xf32>) {
  ^bb0(%g: f32, %o: f32):
    %m = arith.maximumf %g, %zero : f32
    linalg.yield %m : f32
  } -> tensor<256x512xf32>
  return %r, %c : tensor<256x512xf32>, tensor<256x512xf32>
}

// -----

// An update written into a donated argument (mirax-donate-arguments made it a
// materialize_in_destination into %w, which it reads): left out of the product's tiles,
// an elementwise loop of its own that bufferization writes in place.

// CHECK-LABEL: func.func @donated_sgd
// CHECK: vector.fma
// CHECK-NOT: scf.if %{{.+}} -> (vector<8x32xf32>) {{{$}}
// CHECK: %[[U:.+]] = linalg.generic
// CHECK: arith.subf {{.+}} : f32
// CHECK: bufferization.materialize_in_destination %[[U]] in %arg2
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @donated_sgd(%a: tensor<256x512xf32>, %b: tensor<512x512xf32>, %w: tensor<256x512xf32>) -> tensor<256x512xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<256x512xf32>
  %c0 = linalg.fill ins(%zero : f32) outs(%e : tensor<256x512xf32>) -> tensor<256x512xf32>
  %c = linalg.matmul ins(%a, %b : tensor<256x512xf32>, tensor<512x512xf32>) outs(%c0 : tensor<256x512xf32>) -> tensor<256x512xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%w, %c : tensor<256x512xf32>, tensor<256x512xf32>) outs(%e : tensor<256x512xf32>) {
  ^bb0(%x: f32, %g: f32, %o: f32):
    %m = arith.subf %x, %g : f32
    linalg.yield %m : f32
  } -> tensor<256x512xf32>
  %d = bufferization.materialize_in_destination %r in %w : (tensor<256x512xf32>, tensor<256x512xf32>) -> tensor<256x512xf32>
  return %d : tensor<256x512xf32>
}

// -----

// A split product: the reader goes to each piece on its slices; the divisible piece (one
// K slice: no branch) runs it on its tiles, the padded 1000x6 remainder keeps a generic
// of its own (a relu mask: the comparison's i1 vector, then the conversion).

// CHECK-LABEL: func.func @ragged
// CHECK-SAME: %[[MASK:[a-z0-9]+]]: tensor<1000x1030xf32>)
// CHECK: %[[MAIN:.+]] = tensor.extract_slice %[[MASK]][0, 0] [1000, 1024] [1, 1]
// CHECK: vector.fma
// CHECK: %[[H:.+]] = vector.transfer_read %{{.+}} : tensor<40x512xf32>, vector<8x32xf32>
// CHECK: %[[POS:.+]] = arith.cmpf ogt, %[[H]], %{{.+}} : vector<8x32xf32>
// CHECK: %[[ONE:.+]] = arith.uitofp %[[POS]] : vector<8x32xi1> to vector<8x32xf32>
// CHECK: %[[G:.+]] = arith.mulf %{{.+}}, %[[ONE]] : vector<8x32xf32>
// CHECK: vector.transfer_write %[[G]]
// CHECK: linalg.generic {{.+}} ins(%{{.+}}, %{{.+}} : tensor<1000x6xf32>, tensor<1000x6xf32>)
// CHECK: tensor.insert_slice {{.+}} [1000, 6] [1, 1] : tensor<1000x6xf32> into tensor<1000x1030xf32>
#id = affine_map<(d0, d1) -> (d0, d1)>
func.func @ragged(%a: tensor<1000x256xf32>, %b: tensor<256x1030xf32>, %m: tensor<1000x1030xf32>) -> tensor<1000x1030xf32> {
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<1000x1030xf32>
  %c0 = linalg.fill ins(%zero : f32) outs(%e : tensor<1000x1030xf32>) -> tensor<1000x1030xf32>
  %c = linalg.matmul ins(%a, %b : tensor<1000x256xf32>, tensor<256x1030xf32>) outs(%c0 : tensor<1000x1030xf32>) -> tensor<1000x1030xf32>
  %r = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel", "parallel"]}
      ins(%c, %m : tensor<1000x1030xf32>, tensor<1000x1030xf32>) outs(%e : tensor<1000x1030xf32>) {
  ^bb0(%g: f32, %x: f32, %o: f32):
    %p = arith.cmpf ogt, %x, %zero : f32
    %f = arith.uitofp %p : i1 to f32
    %y = arith.mulf %g, %f : f32
    linalg.yield %y : f32
  } -> tensor<1000x1030xf32>
  return %r : tensor<1000x1030xf32>
}
