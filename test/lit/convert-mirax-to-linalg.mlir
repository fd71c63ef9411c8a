// RUN: %mirax-opt %s -split-input-file --convert-mirax-to-linalg | FileCheck %s

// CHECK-LABEL: func.func @exp
// CHECK-SAME: (%[[X:.+]]: tensor<4xf32>) -> tensor<4xf32>
// CHECK: %[[E:.+]] = tensor.empty() : tensor<4xf32>
// CHECK: %[[R:.+]] = linalg.generic
// CHECK-SAME: iterator_types = ["parallel"]
// CHECK-SAME: ins(%[[X]] : tensor<4xf32>) outs(%[[E]] : tensor<4xf32>)
// CHECK: ^bb0(%[[IN:.+]]: f32, %{{.+}}: f32):
// CHECK-NEXT: %[[V:.+]] = math.exp %[[IN]] : f32
// CHECK-NEXT: linalg.yield %[[V]] : f32
// CHECK: return %[[R]] : tensor<4xf32>
// CHECK-NOT: mirax.
func.func @exp(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "mirax.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @add_i32
// CHECK-SAME: (%[[A:.+]]: tensor<2x3xi32>, %[[B:.+]]: tensor<2x3xi32>)
// CHECK: linalg.generic
// CHECK-SAME: iterator_types = ["parallel", "parallel"]
// CHECK-SAME: ins(%[[A]], %[[B]] : tensor<2x3xi32>, tensor<2x3xi32>)
// CHECK: arith.addi %{{.+}}, %{{.+}} : i32
func.func @add_i32(%a: tensor<2x3xi32>, %b: tensor<2x3xi32>) -> tensor<2x3xi32> {
  %0 = "mirax.add"(%a, %b) : (tensor<2x3xi32>, tensor<2x3xi32>) -> tensor<2x3xi32>
  return %0 : tensor<2x3xi32>
}

// -----

// A bool result is stored one byte per element: the signature becomes i8.
// CHECK-LABEL: func.func @less_bool
// CHECK-SAME: -> tensor<4xi8>
// CHECK: linalg.generic
// CHECK-SAME: outs(%{{.+}} : tensor<4xi8>)
// CHECK: %[[C:.+]] = arith.cmpf olt, %{{.+}}, %{{.+}} : f32
// CHECK-NEXT: %[[B:.+]] = arith.extui %[[C]] : i1 to i8
// CHECK-NEXT: linalg.yield %[[B]] : i8
func.func @less_bool(%a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xi1> {
  %0 = "mirax.less"(%a, %b) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  return %0 : tensor<4xi1>
}

// -----

// CHECK-LABEL: func.func @where
// CHECK-SAME: (%[[C:.+]]: tensor<4xi8>, %[[A:.+]]: tensor<4xf32>, %[[B:.+]]: tensor<4xf32>) -> tensor<4xf32>
// CHECK: ^bb0(%[[IC:.+]]: i8, %[[IA:.+]]: f32, %[[IB:.+]]: f32, %{{.+}}: f32):
// CHECK-NEXT: %[[T:.+]] = arith.trunci %[[IC]] : i8 to i1
// CHECK-NEXT: arith.select %[[T]], %[[IA]], %[[IB]] : f32
func.func @where(%c: tensor<4xi1>, %a: tensor<4xf32>, %b: tensor<4xf32>) -> tensor<4xf32> {
  %0 = "mirax.where"(%c, %a, %b) : (tensor<4xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Unsigned types become signless; the ops carry the signedness.
// CHECK-LABEL: func.func @unsigned
// CHECK-SAME: (%{{.+}}: tensor<4xi8>, %{{.+}}: tensor<4xi8>) -> (tensor<4xi8>, tensor<4xi8>)
// CHECK: arith.remui %{{.+}}, %{{.+}} : i8
// CHECK: arith.maxui %{{.+}}, %{{.+}} : i8
func.func @unsigned(%a: tensor<4xui8>, %b: tensor<4xui8>) -> (tensor<4xui8>, tensor<4xui8>) {
  %0 = "mirax.remainder"(%a, %b) : (tensor<4xui8>, tensor<4xui8>) -> tensor<4xui8>
  %1 = "mirax.maximum"(%a, %b) : (tensor<4xui8>, tensor<4xui8>) -> tensor<4xui8>
  return %0, %1 : tensor<4xui8>, tensor<4xui8>
}

// -----

// CHECK-LABEL: func.func @transpose
// CHECK-SAME: (%[[X:.+]]: tensor<2x3xf32>)
// CHECK: %[[E:.+]] = tensor.empty() : tensor<3x2xf32>
// CHECK: linalg.transpose ins(%[[X]] : tensor<2x3xf32>) outs(%[[E]] : tensor<3x2xf32>) permutation = [1, 0]
func.func @transpose(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
  %0 = "mirax.transpose"(%x) {permutation = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// -----

// CHECK-DAG: #[[ROW:.+]] = affine_map<(d0, d1) -> (d1)>
// CHECK-DAG: #[[ID:.+]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @broadcast
// CHECK: linalg.generic {indexing_maps = [#[[ROW]], #[[ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK: ^bb0(%[[IN:.+]]: f32, %{{.+}}: f32):
// CHECK-NEXT: linalg.yield %[[IN]] : f32
func.func @broadcast(%x: tensor<3xf32>) -> tensor<2x3xf32> {
  %0 = "mirax.broadcast_to"(%x) {shape = array<i64: 2, 3>} : (tensor<3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// A float -> int conversion saturates (fptosi of an out-of-range value is poison): the
// value clamped to the f32 values inside i32's range, the integer maximum above them
// (2^31 - 1 is no f32), 0 for NaN.
// CHECK-LABEL: func.func @astype
// CHECK: ^bb0(%[[IN:.+]]: f32, %{{.+}}: i32):
// CHECK-DAG: %[[LO:.+]] = arith.constant -2.14748365E+9 : f32
// CHECK-DAG: %[[HI:.+]] = arith.constant 2.14748352E+9 : f32
// CHECK: %[[BELOW:.+]] = arith.cmpf olt, %[[IN]], %[[LO]] : f32
// CHECK: %[[C0:.+]] = arith.select %[[BELOW]], %[[LO]], %[[IN]] : f32
// CHECK: %[[ABOVE:.+]] = arith.cmpf ogt, %[[C0]], %[[HI]] : f32
// CHECK: %[[C1:.+]] = arith.select %[[ABOVE]], %[[HI]], %[[C0]] : f32
// CHECK: %[[I:.+]] = arith.fptosi %[[C1]] : f32 to i32
// CHECK: %[[MAX:.+]] = arith.constant 2147483647 : i32
// CHECK: %[[SAT:.+]] = arith.select %[[ABOVE]], %[[MAX]], %[[I]] : i32
// CHECK: %[[NAN:.+]] = arith.cmpf uno, %[[IN]], %[[IN]] : f32
// CHECK: %[[Z:.+]] = arith.constant 0 : i32
// CHECK: %[[R:.+]] = arith.select %[[NAN]], %[[Z]], %[[SAT]] : i32
// CHECK: linalg.yield %[[R]] : i32
func.func @astype(%x: tensor<4xf32>) -> tensor<4xi32> {
  %0 = "mirax.astype"(%x) {dtype = i32} : (tensor<4xf32>) -> tensor<4xi32>
  return %0 : tensor<4xi32>
}

// -----

// CHECK-LABEL: func.func @sum
// CHECK: %[[Z:.+]] = arith.constant 0.000000e+00 : f32
// CHECK: %[[F:.+]] = linalg.fill ins(%[[Z]] : f32) outs(%{{.+}} : tensor<2xf32>) -> tensor<2xf32>
// CHECK: linalg.generic
// CHECK-SAME: iterator_types = ["parallel", "reduction"]
// CHECK-SAME: outs(%[[F]] : tensor<2xf32>)
// CHECK: arith.addf
func.func @sum(%x: tensor<2x3xf32>) -> tensor<2xf32> {
  %0 = "mirax.sum"(%x) {axes = array<i64: 1>, keepdims = false} : (tensor<2x3xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// CHECK-LABEL: func.func @constant_bool
// CHECK-SAME: -> tensor<3xi8>
// CHECK: %[[C:.+]] = arith.constant dense<[1, 0, 1]> : tensor<3xi8>
// CHECK: return %[[C]] : tensor<3xi8>
func.func @constant_bool() -> tensor<3xi1> {
  %0 = "mirax.constant"() {value = dense<[true, false, true]> : tensor<3xi1>} : () -> tensor<3xi1>
  return %0 : tensor<3xi1>
}

// -----

// Two ops of one kind with the same types but different attributes lower to two
// different bodies (they once shared one private function).
// CHECK-LABEL: func.func @two_constants
// CHECK-DAG:     arith.constant dense<1.000000e+00> : tensor<4xf32>
// CHECK-DAG:     arith.constant dense<2.000000e+00> : tensor<4xf32>
func.func @two_constants() -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = "mirax.constant"() {value = dense<1.0> : tensor<4xf32>} : () -> tensor<4xf32>
  %1 = "mirax.constant"() {value = dense<2.0> : tensor<4xf32>} : () -> tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// A full reduction of a large array (CPU): rows first, then the row results. Rows are
// the last axis when it is long enough, else the flattened array's 4096-element rows.
// CHECK-LABEL: func.func @full_sum
// CHECK: %[[P:.+]] = linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]{{.*}} ins(%{{.+}} : tensor<64x1024xf32>) outs(%{{.+}} : tensor<64xf32>)
// CHECK: linalg.generic {{.*}}iterator_types = ["reduction"]{{.*}} ins(%[[P]] : tensor<64xf32>) outs(%{{.+}} : tensor<f32>)
// CHECK-LABEL: func.func @full_max_1d
// CHECK: tensor.expand_shape %{{.+}} {{\[\[}}0, 1]] output_shape [48, 4096] : tensor<196608xf32> into tensor<48x4096xf32>
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]
// CHECK: arith.maximumf
// CHECK: linalg.generic {{.*}}iterator_types = ["reduction"]
// CHECK: tensor.expand_shape %{{.+}} [] output_shape [1] : tensor<f32> into tensor<1xf32>
// CHECK-LABEL: func.func @small_sum_stays_one
// CHECK: linalg.generic {{.*}}iterator_types = ["reduction", "reduction"]
// CHECK-NOT: linalg.generic
func.func @full_sum(%x: tensor<64x1024xf32>) -> tensor<f32> {
  %0 = "mirax.sum"(%x) {axes = array<i64: 0, 1>, keepdims = false} : (tensor<64x1024xf32>) -> tensor<f32>
  return %0 : tensor<f32>
}
func.func @full_max_1d(%x: tensor<196608xf32>) -> tensor<1xf32> {
  %0 = "mirax.max"(%x) {axes = array<i64: 0>, keepdims = true} : (tensor<196608xf32>) -> tensor<1xf32>
  return %0 : tensor<1xf32>
}
func.func @small_sum_stays_one(%x: tensor<16x64xf32>) -> tensor<f32> {
  %0 = "mirax.sum"(%x) {axes = array<i64: 0, 1>, keepdims = false} : (tensor<16x64xf32>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

// cumsum along the last axis: each row scanned in memory order (the rows on the threads
// from 65536 elements), the running sum carried in a register; a short row (8 rows of
// 64) in an scf.for. Along the first axis of a 2-D array: one slice a step, as before.
// CHECK-LABEL: func.func @cumsum_rows
// CHECK: scf.forall (%[[R:.+]]) in (512) shared_outs(%[[O:.+]] = %{{.+}}) -> (tensor<512x512xf32>)
// CHECK: %[[ROW:.+]] = tensor.extract_slice %{{.+}}[%[[R]], 0] [1, 512] [1, 1] : tensor<512x512xf32> to tensor<512xf32>
// CHECK: scf.for %[[J:.+]] = {{.+}} iter_args(%[[ACC:.+]] = %{{.+}}, %[[T:.+]] = %{{.+}}) -> (f32, tensor<512xf32>)
// CHECK: %[[K:.+]] = arith.subi %{{.+}}, %[[J]] : index
// CHECK: %[[V:.+]] = tensor.extract %[[ROW]][%[[K]]] : tensor<512xf32>
// CHECK: %[[S:.+]] = arith.addf %[[V]], %[[ACC]] : f32
// CHECK: tensor.insert %[[ACC]] into %[[T]][%[[K]]] : tensor<512xf32>
// CHECK: tensor.parallel_insert_slice
// CHECK-LABEL: func.func @cumsum_short_rows
// CHECK-NOT: scf.forall
// CHECK: scf.for {{.+}} -> (tensor<8x64xi32>)
// CHECK: scf.for {{.+}} -> (i32, tensor<64xi32>)
// CHECK: arith.addi
// CHECK-LABEL: func.func @cumsum_columns
// CHECK: scf.for {{.+}} -> (tensor<512xf32>, tensor<512x512xf32>)
// CHECK: tensor.extract_slice %{{.+}} [1, 512] [1, 1] : tensor<512x512xf32> to tensor<1x512xf32>
func.func @cumsum_rows(%x: tensor<512x512xf32>) -> tensor<512x512xf32> {
  %0 = "mirax.cumsum"(%x) {axis = 1 : i64, reverse = true, inclusive = false} : (tensor<512x512xf32>) -> tensor<512x512xf32>
  return %0 : tensor<512x512xf32>
}
func.func @cumsum_short_rows(%x: tensor<8x64xi32>) -> tensor<8x64xi32> {
  %0 = "mirax.cumsum"(%x) {axis = 1 : i64, reverse = false, inclusive = true} : (tensor<8x64xi32>) -> tensor<8x64xi32>
  return %0 : tensor<8x64xi32>
}
func.func @cumsum_columns(%x: tensor<512x512xf32>) -> tensor<512x512xf32> {
  %0 = "mirax.cumsum"(%x) {axis = 0 : i64, reverse = false, inclusive = true} : (tensor<512x512xf32>) -> tensor<512x512xf32>
  return %0 : tensor<512x512xf32>
}

// -----

// cummax and cumprod: cumsum's loops with their combine and identity (an exclusive
// cummax starts from -inf and writes the running value before taking the element).
// CHECK-LABEL: func.func @cummax_rows
// CHECK: %[[LOW:.+]] = arith.constant 0xFF800000 : f32
// CHECK: scf.for {{.+}} iter_args(%[[ACC:.+]] = %[[LOW]], %[[T:.+]] = %{{.+}}) -> (f32, tensor<64xf32>)
// CHECK: arith.maximumf %{{.+}}, %[[ACC]] : f32
// CHECK: tensor.insert %[[ACC]] into %[[T]]
// CHECK-LABEL: func.func @cumprod_columns
// CHECK: %[[ONE:.+]] = arith.constant 1 : i32
// CHECK: linalg.fill ins(%[[ONE]] : i32) outs(%{{.+}} : tensor<3xi32>)
// CHECK: scf.for {{.+}} -> (tensor<3xi32>, tensor<4x3xi32>)
// CHECK: arith.subi
// CHECK: arith.muli
func.func @cummax_rows(%x: tensor<8x64xf32>) -> tensor<8x64xf32> {
  %0 = "mirax.cummax"(%x) {axis = 1 : i64, reverse = false, inclusive = false} : (tensor<8x64xf32>) -> tensor<8x64xf32>
  return %0 : tensor<8x64xf32>
}
func.func @cumprod_columns(%x: tensor<4x3xi32>) -> tensor<4x3xi32> {
  %0 = "mirax.cumprod"(%x) {axis = 0 : i64, reverse = true, inclusive = true} : (tensor<4x3xi32>) -> tensor<4x3xi32>
  return %0 : tensor<4x3xi32>
}

// -----

// argsort of values of 32 bits or fewer: row by row, each value's key (floats as integers
// in the same order, -0.0 as 0.0, NaN after +inf) in the high half of an int64, its index
// in the low half, sorted as `mirax.sort` sorts (vectors of int64, below): equal keys
// stay in index order (stable); the low halves are the indices. The rows on the threads
// from 65536 elements. Wider values (64-bit, complex): a merge sort of each row
// (keys and indices, passes of pairwise merges two an iteration, each merge from both
// ends); along the first axis of a small array the rows transposed in, serial, and back.
// CHECK-LABEL: func.func @argsort_rows
// CHECK: scf.forall (%[[R:.+]]) in (512) shared_outs(%{{.+}} = %{{.+}}) -> (tensor<512x512xi32>)
// CHECK: %[[ROW:.+]] = tensor.extract_slice %{{.+}}[%[[R]], 0] [1, 512] [1, 1] : tensor<512x512xf32> to tensor<512xf32>
// CHECK: linalg.generic {{.+}} ins(%[[ROW]] : tensor<512xf32>) outs(%{{.+}} : tensor<512xi64>)
// CHECK: arith.cmpf uno
// CHECK: %[[BITS:.+]] = arith.bitcast %{{.+}} : f32 to i32
// CHECK: %[[SIGN:.+]] = arith.shrsi %[[BITS]], %{{.+}} : i32
// CHECK: %[[KEY:.+]] = arith.xori %[[BITS]], %{{.+}} : i32
// CHECK: %[[WIDE:.+]] = arith.extsi %[[KEY]] : i32 to i64
// CHECK: %[[I:.+]] = linalg.index 0 : index
// CHECK: %[[HIGH:.+]] = arith.shli %[[WIDE]], %{{.+}} : i64
// CHECK: %[[I64:.+]] = arith.index_cast %[[I]] : index to i64
// CHECK: arith.ori %[[HIGH]], %[[I64]] : i64
// CHECK: vector.transfer_read %{{.+}} : tensor<512xi64>, vector<[[L:[0-9]+]]xi64>
// CHECK: arith.minsi %{{.+}}, %{{.+}} : vector<[[L]]xi64>
// CHECK: arith.trunci %{{.+}} : i64 to i32
// CHECK: tensor.parallel_insert_slice %{{.+}} into %{{.+}}[%[[R]], 0] [1, 512] [1, 1] : tensor<512xi32> into tensor<512x512xi32>
// CHECK-LABEL: func.func @argsort_columns
// CHECK-NOT: scf.forall
// CHECK: linalg.transpose ins(%{{.+}} : tensor<1x4x8xi64>) outs(%{{.+}} : tensor<1x8x4xi64>) permutation = [0, 2, 1]
// CHECK: scf.for {{.+}} -> (tensor<8x4xi32>)
// CHECK: bufferization.alloc_tensor() copy(%{{.+}}) : tensor<4xi64>
// CHECK: linalg.index 0
// CHECK: scf.for {{.+}} -> (tensor<4xi64>, tensor<4xi32>, tensor<4xi64>, tensor<4xi32>)
// CHECK: scf.for {{.+}} -> (index, index, index, index, tensor<4xi64>, tensor<4xi32>)
// CHECK: arith.cmpi slt, %{{.+}}, %{{.+}} : i64
// CHECK: linalg.transpose ins(%{{.+}} : tensor<1x8x4xi32>) outs(%{{.+}} : tensor<1x4x8xi32>) permutation = [0, 2, 1]
func.func @argsort_rows(%x: tensor<512x512xf32>) -> tensor<512x512xui32> {
  %0 = "mirax.argsort"(%x) {axis = 1 : i64} : (tensor<512x512xf32>) -> tensor<512x512xui32>
  return %0 : tensor<512x512xui32>
}
func.func @argsort_columns(%x: tensor<4x8xi64>) -> tensor<4x8xui32> {
  %0 = "mirax.argsort"(%x) {axis = 0 : i64} : (tensor<4x8xi64>) -> tensor<4x8xui32>
  return %0 : tensor<4x8xui32>
}

// -----

// argsort rows of radix_wide keys or more (1024, derived; lit runs MIRAX_TUNING=off):
// the LSD radix sort of the (key, index) pairs by their key half (dialect/sort.py
// `_radix_keys_row`). One loop counts every pass's digit of four keys an iteration, each
// in a counter set of its own (4 sets x 4 passes x 256); the top digit's sign bit flipped.
// Then each pass's starts and ends of every digit value (running sums over the four
// sets) and whether one value holds all 2048 keys (that pass is a copy), and a pass a
// digit: the first half's pairs from the front to their value's next start, the second
// half's from the back to its next end - 1; the second pass writes into the row's own
// buffer.
// CHECK-LABEL: func.func @argsort_radix
// CHECK: %[[ROW:.+]] = linalg.generic {{.+}} outs(%{{.+}} : tensor<2048xi64>)
// CHECK: %[[ZERO:.+]] = linalg.fill ins(%{{.+}} : i32) outs(%{{.+}} : tensor<4096xi32>)
// CHECK: %[[COUNTS:.+]] = scf.for %{{.+}} = %{{.+}} to %{{.+}} step %{{.+}} iter_args(%{{.+}} = %[[ZERO]]) -> (tensor<4096xi32>)
// CHECK: arith.shrui %{{.+}}, %c32_i64 : i64
// CHECK: arith.shrui %{{.+}}, %c56_i64 : i64
// CHECK-NEXT: %[[TOP:.+]] = arith.andi
// CHECK-NEXT: arith.xori %[[TOP]], %c128_i64 : i64
// CHECK: %[[B:.+]]:10 = scf.for {{.+}} -> (tensor<1024xi32>, tensor<1024xi32>, i32, i32, i32, i32, i1, i1, i1, i1)
// CHECK: arith.cmpi eq, %{{.+}}, %c2048_i32 : i32
// CHECK: %[[BUF:.+]] = bufferization.alloc_tensor() : tensor<2048xi64>
// CHECK: %[[F0:.+]] = tensor.extract_slice %[[B]]#0[0] [256] [1]
// CHECK: %[[E0:.+]] = tensor.extract_slice %[[B]]#1[0] [256] [1]
// CHECK: %[[P0:.+]] = scf.if %[[B]]#6 -> (tensor<2048xi64>)
// CHECK: linalg.copy ins(%[[ROW]] : tensor<2048xi64>) outs(%[[BUF]] : tensor<2048xi64>)
// CHECK: } else {
// CHECK: scf.for %[[I:.+]] = %{{.+}} to %c1024{{.*}} step %{{.+}} iter_args(%[[D:.+]] = %[[BUF]], %[[F:.+]] = %[[F0]], %[[E:.+]] = %[[E0]])
// CHECK: %[[K:.+]] = tensor.extract %[[ROW]][%[[I]]] : tensor<2048xi64>
// CHECK: %[[AT:.+]] = tensor.extract %[[F]][%{{.+}}] : tensor<256xi32>
// CHECK: tensor.insert %[[K]] into %[[D]][%{{.+}}] : tensor<2048xi64>
// CHECK: %[[J:.+]] = arith.subi %c2047, %[[I]] : index
// CHECK: %[[Q:.+]] = tensor.extract %[[ROW]][%[[J]]] : tensor<2048xi64>
// CHECK: %[[END:.+]] = tensor.extract %[[E]][%{{.+}}] : tensor<256xi32>
// CHECK: arith.subi %[[END]], %c1_i32 : i32
// CHECK: scf.if %[[B]]#7 -> (tensor<2048xi64>)
// CHECK: linalg.copy ins(%[[P0]] : tensor<2048xi64>) outs(%[[ROW]] : tensor<2048xi64>)
// CHECK: scf.if %[[B]]#8
// CHECK: scf.if %[[B]]#9
// CHECK: arith.trunci %{{.+}} : i64 to i32
// CHECK-NOT: vector.shuffle
// CHECK: return
func.func @argsort_radix(%x: tensor<2x2048xf32>) -> tensor<2x2048xui32> {
  %0 = "mirax.argsort"(%x) {axis = 1 : i64} : (tensor<2x2048xf32>) -> tensor<2x2048xui32>
  return %0 : tensor<2x2048xui32>
}

// -----

// argsort of 64-bit values: no room in the word for the index, so the radix sort moves
// each row's indices (an i32 row counting from 0) beside its int64 keys: eight passes
// of 8 bits, the pair of buffers of keys and of indices swapping roles a pass, a pass
// that only copies copying both.
// CHECK-LABEL: func.func @argsort_f64_radix
// CHECK: %[[KEYS:.+]] = linalg.generic {{.+}} ins(%{{.+}} : tensor<2x512xf64>) outs(%{{.+}} : tensor<2x512xi64>)
// CHECK: %[[ROW:.+]] = tensor.extract_slice %[[KEYS]]
// CHECK: %[[IDX:.+]] = linalg.generic {{.+}} outs(%{{.+}} : tensor<512xi32>)
// CHECK: linalg.index 0
// CHECK: scf.for {{.+}} -> (tensor<8192xi32>)
// CHECK: %[[B:.+]]:18 = scf.for
// CHECK: %[[KBUF:.+]] = bufferization.alloc_tensor() : tensor<512xi64>
// CHECK: %[[IBUF:.+]] = bufferization.alloc_tensor() : tensor<512xi32>
// CHECK: %[[P0:.+]]:2 = scf.if %[[B]]#10 -> (tensor<512xi64>, tensor<512xi32>)
// CHECK: linalg.copy ins(%[[ROW]] : tensor<512xi64>) outs(%[[KBUF]] : tensor<512xi64>)
// CHECK: linalg.copy ins(%[[IDX]] : tensor<512xi32>) outs(%[[IBUF]] : tensor<512xi32>)
// CHECK: } else {
// CHECK: scf.for %[[I:.+]] = {{.+}} iter_args(%[[D:.+]] = %[[KBUF]], %{{.+}} = %{{.+}}, %{{.+}} = %{{.+}}, %[[DI:.+]] = %[[IBUF]])
// CHECK: %[[K:.+]] = tensor.extract %[[ROW]][%[[I]]] : tensor<512xi64>
// CHECK: %[[AT:.+]] = arith.index_cast %{{.+}} : i32 to index
// CHECK: tensor.insert %[[K]] into %[[D]][%[[AT]]] : tensor<512xi64>
// CHECK: %[[V:.+]] = tensor.extract %[[IDX]][%[[I]]] : tensor<512xi32>
// CHECK: tensor.insert %[[V]] into %[[DI]][%[[AT]]] : tensor<512xi32>
// CHECK: scf.if %[[B]]#11 -> (tensor<512xi64>, tensor<512xi32>)
// CHECK: linalg.copy ins(%[[P0]]#0 : tensor<512xi64>) outs(%[[ROW]] : tensor<512xi64>)
// CHECK: linalg.copy ins(%[[P0]]#1 : tensor<512xi32>) outs(%[[IDX]] : tensor<512xi32>)
// CHECK: arith.shrui %{{.+}}, %c56_i64
// CHECK: tensor.insert_slice %{{.+}}#1 into %{{.+}} : tensor<512xi32> into tensor<2x512xi32>
// CHECK-NOT: vector.shuffle
// CHECK: return
func.func @argsort_f64_radix(%x: tensor<2x512xf64>) -> tensor<2x512xui32> {
  %0 = "mirax.argsort"(%x) {axis = 1 : i64} : (tensor<2x512xf64>) -> tensor<2x512xui32>
  return %0 : tensor<2x512xui32>
}

// -----

// argtopk: each row's k largest by insertion (dialect/sort.py `_select_row`): k slots of
// (key, index) ascending, from (lowest key, -1). The row is read a vector of the host's
// width at a time, turned into integer keys in the registers (the merge sort's order),
// compared with the first slot's key; only a vector with a key at least that is walked an
// element at a time: such an element enters (an index after every slot's: ties go to the
// later element), the slots up to the last with a key <= it move down one, without
// branches (selects), and the first slot's key is the new bar. A k large for the row (5
// of 8) takes the merge sort's last k.
// CHECK-LABEL: func.func @argtopk_rows
// CHECK: scf.for {{.+}} -> (tensor<4x3xi32>)
// CHECK: %[[K0:.+]] = linalg.fill ins(%{{.+}} : i32) outs(%{{.+}} : tensor<3xi32>)
// CHECK: %[[I0:.+]] = linalg.fill ins(%{{.+}} : i32) outs(%{{.+}} : tensor<3xi32>)
// CHECK: scf.for %[[C:.+]] = %{{.+}} to %{{.+}} step %{{.+}} iter_args(%[[BK:.+]] = %[[K0]], %[[BI:.+]] = %[[I0]], %[[T:.+]] = %{{.+}}) -> (tensor<3xi32>, tensor<3xi32>, i32)
// CHECK: vector.transfer_read %{{.+}}[%[[C]]], %{{.+}} {in_bounds = [true]} : tensor<100xf32>, vector<[[L:[0-9]+]]xf32>
// CHECK: arith.bitcast %{{.+}} : vector<[[L]]xf32> to vector<[[L]]xi32>
// CHECK: %[[KEYS:.+]] = arith.xori %{{.+}}, %{{.+}} : vector<[[L]]xi32>
// CHECK: %[[TV:.+]] = vector.broadcast %[[T]] : i32 to vector<[[L]]xi32>
// CHECK: %[[M:.+]] = arith.cmpi sge, %[[KEYS]], %[[TV]] : vector<[[L]]xi32>
// CHECK: %[[ANY:.+]] = vector.reduction <or>, %[[M]]
// CHECK: scf.if %[[ANY]] -> (tensor<3xi32>, tensor<3xi32>, i32)
// CHECK: scf.for {{.+}} iter_args(%{{.+}} = %[[BK]], %{{.+}} = %[[BI]], %{{.+}} = %[[T]])
// CHECK: tensor.extract %{{.+}}[%{{.+}}] : tensor<100xf32>
// CHECK: %[[X:.+]] = arith.xori %{{.+}}, %{{.+}} : i32
// CHECK: %[[IN:.+]] = arith.cmpi sge, %[[X]], %{{.+}} : i32
// CHECK: scf.if %[[IN]] -> (tensor<3xi32>, tensor<3xi32>, i32)
// CHECK: scf.for
// CHECK: arith.cmpi sle, %{{.+}}, %[[X]] : i32
// CHECK: arith.select
// CHECK: tensor.insert
// CHECK-LABEL: func.func @argtopk_most
// CHECK: arith.minsi %{{.+}}, %{{.+}} : vector<{{[0-9]+}}xi64>
// CHECK: tensor.extract_slice %{{.+}}[0, 3] [6, 5] [1, 1] : tensor<6x8xi32> to tensor<6x5xi32>
func.func @argtopk_rows(%x: tensor<4x100xf32>) -> tensor<4x3xui32> {
  %0 = "mirax.argtopk"(%x) {axis = 1 : i64, k = 3 : i64} : (tensor<4x100xf32>) -> tensor<4x3xui32>
  return %0 : tensor<4x3xui32>
}
func.func @argtopk_most(%x: tensor<6x8xi32>) -> tensor<6x5xui32> {
  %0 = "mirax.argtopk"(%x) {axis = 1 : i64, k = 5 : i64} : (tensor<6x8xi32>) -> tensor<6x5xui32>
  return %0 : tensor<6x5xui32>
}

// -----

// sort: row by row, the values as integer keys in their order (NaN as the quiet NaN,
// negative numbers' magnitude bits flipped), padded with the largest key to a power of
// two, its vectors sorted in registers (shuffle, min, max, select by a constant mask), the
// bitonic merges across vectors (a mirrored vector reversed), the first n keys back to
// floats (int32 values are their own keys). One long row: two halves (of whole vectors:
// no padding for 100000) on two threads, then one vector merge of the halves, which
// reads the vector of the run whose next key is smaller.
// CHECK-LABEL: func.func @sort_rows
// CHECK: scf.for {{.+}} -> (tensor<4x100xf32>)
// CHECK: linalg.generic {{.+}} ins(%{{.+}} : tensor<100xf32>) outs(%{{.+}} : tensor<100xi32>)
// CHECK: arith.cmpf uno
// CHECK: arith.bitcast %{{.+}} : f32 to i32
// CHECK: arith.xori
// CHECK: %[[PAD:.+]] = linalg.fill ins(%{{.+}} : i32) outs(%{{.+}} : tensor<128xi32>)
// CHECK: tensor.insert_slice %{{.+}} into %[[PAD]][0] [100] [1]
// CHECK: scf.for {{.+}} -> (tensor<128xi32>)
// CHECK: %[[V:.+]] = vector.transfer_read %{{.+}} {in_bounds = [true]} : tensor<128xi32>, vector<[[L:[0-9]+]]xi32>
// CHECK: %[[P:.+]] = vector.shuffle %[[V]], %[[V]]
// CHECK: %[[LO:.+]] = arith.minsi %[[V]], %[[P]] : vector<[[L]]xi32>
// CHECK: %[[HI:.+]] = arith.maxsi %[[V]], %[[P]] : vector<[[L]]xi32>
// CHECK: arith.select %{{.+}}, %[[LO]], %[[HI]] : vector<[[L]]xi1>, vector<[[L]]xi32>
// CHECK: vector.transfer_write
// CHECK: scf.for {{.+}} -> (tensor<128xi32>)
// CHECK: %[[A:.+]] = vector.transfer_read
// CHECK: %[[B:.+]] = vector.transfer_read
// CHECK: %[[R:.+]] = vector.shuffle %[[B]], %[[B]]
// CHECK: arith.minsi %[[A]], %[[R]]
// CHECK: tensor.extract_slice %{{.+}}[0] [100] [1] : tensor<128xi32> to tensor<100xi32>
// CHECK: linalg.generic
// CHECK: arith.bitcast %{{.+}} : i32 to f32
// CHECK-LABEL: func.func @sort_one_long_row
// CHECK-NOT: linalg.generic
// CHECK: tensor.reshape %{{.+}} : (tensor<100000xi32>, tensor<2xi64>) -> tensor<2x50000xi32>
// CHECK: scf.forall (%{{.+}}) in (2) shared_outs({{.+}}) -> (tensor<2x50000xi32>)
// CHECK: tensor.parallel_insert_slice
// CHECK: scf.for {{.+}} -> (index, index, vector<[[L2:[0-9]+]]xi32>, vector<[[L2]]xi32>, tensor<100000xi32>)
// CHECK: %[[HA:.+]] = tensor.extract %{{.+}} : tensor<100000xi32>
// CHECK: %[[HB:.+]] = tensor.extract %{{.+}} : tensor<100000xi32>
// CHECK: arith.cmpi sle, %[[HA]], %[[HB]] : i32
// CHECK-NOT: tensor.extract_slice
// CHECK: return
func.func @sort_rows(%x: tensor<4x100xf32>) -> tensor<4x100xf32> {
  %0 = "mirax.sort"(%x) {axis = 1 : i64} : (tensor<4x100xf32>) -> tensor<4x100xf32>
  return %0 : tensor<4x100xf32>
}
func.func @sort_one_long_row(%x: tensor<100000xi32>) -> tensor<100000xi32> {
  %0 = "mirax.sort"(%x) {axis = 0 : i64} : (tensor<100000xi32>) -> tensor<100000xi32>
  return %0 : tensor<100000xi32>
}

// -----

// argmax of a long 1-D array: the argmax of each row of a (rows, 4096) view (the rows'
// max, then the first index equal to it), each row's best value read back at its index,
// the first row holding the best of those; the result is row * 4096 + its index.
// CHECK-LABEL: func.func @argmax_flat
// CHECK: %[[G:.+]] = tensor.expand_shape %{{.+}} {{\[\[}}0, 1]] output_shape [32, 4096] : tensor<131072xf32> into tensor<32x4096xf32>
// CHECK: arith.maximumf
// CHECK: %[[RI:.+]] = linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]{{.*}}ins(%[[G]], {{.+}}) outs({{.+}} : tensor<32xi32>)
// CHECK: linalg.generic {{.*}}ins(%[[RI]] : tensor<32xi32>) outs({{.+}} : tensor<32xf32>)
// CHECK: tensor.extract %[[G]]
// CHECK: %[[R:.+]] = linalg.generic {{.*}}iterator_types = ["reduction"]{{.*}}outs({{.+}} : tensor<i32>)
// CHECK: %[[RS:.+]] = tensor.extract %[[R]][] : tensor<i32>
// CHECK: %[[K:.+]] = arith.index_castui %[[RS]] : i32 to index
// CHECK: %[[I:.+]] = tensor.extract %[[RI]][%[[K]]] : tensor<32xi32>
// CHECK: %[[B:.+]] = arith.muli %[[RS]], %{{.+}} : i32
// CHECK: %[[F:.+]] = arith.addi %[[B]], %[[I]] : i32
// CHECK: tensor.from_elements %[[F]] : tensor<i32>
func.func @argmax_flat(%x: tensor<131072xf32>) -> tensor<ui32> {
  %0 = "mirax.argmax"(%x) {axes = array<i64: 0>, keepdims = false} : (tensor<131072xf32>) -> tensor<ui32>
  return %0 : tensor<ui32>
}

// -----

// A matrix times one column (f32): the row reduction sum_k x[m, k] * y[k], not a
// linalg.matmul with N = 1 (left to the generic lowering, a strict in-order sum an
// element at a time); mirax-fuse-reductions vectorizes it with partial sums.
// CHECK-LABEL: func.func @matrix_times_column
// CHECK-SAME:    (%[[X:.+]]: tensor<64x32xf32>, %[[Y:.+]]: tensor<32x1xf32>)
// CHECK-NOT:     linalg.matmul
// CHECK:         %[[V:.+]] = tensor.collapse_shape %[[Y]] {{\[\[}}0, 1]] : tensor<32x1xf32> into tensor<32xf32>
// CHECK:         %[[Z:.+]] = linalg.fill {{.*}} -> tensor<64xf32>
// CHECK:         %[[R:.+]] = linalg.generic {indexing_maps = [#{{.+}}, #{{.+}}, #{{.+}}], iterator_types = ["parallel", "reduction"]} ins(%[[X]], %[[V]] : tensor<64x32xf32>, tensor<32xf32>) outs(%[[Z]] : tensor<64xf32>)
// CHECK:           arith.mulf
// CHECK:           arith.addf
// CHECK:         tensor.expand_shape %[[R]] {{\[\[}}0, 1]] output_shape [64, 1] : tensor<64xf32> into tensor<64x1xf32>
// Other products (N > 1, or integers) stay linalg.matmul.
// CHECK-LABEL: func.func @matrix_times_columns
// CHECK:         linalg.matmul
// CHECK-LABEL: func.func @int_matrix_times_column
// CHECK:         linalg.matmul
func.func @matrix_times_column(%x: tensor<64x32xf32>, %y: tensor<32x1xf32>) -> tensor<64x1xf32> {
  %0 = "mirax.matmul"(%x, %y) : (tensor<64x32xf32>, tensor<32x1xf32>) -> tensor<64x1xf32>
  return %0 : tensor<64x1xf32>
}
func.func @matrix_times_columns(%x: tensor<64x32xf32>, %y: tensor<32x2xf32>) -> tensor<64x2xf32> {
  %0 = "mirax.matmul"(%x, %y) : (tensor<64x32xf32>, tensor<32x2xf32>) -> tensor<64x2xf32>
  return %0 : tensor<64x2xf32>
}
func.func @int_matrix_times_column(%x: tensor<64x32xi32>, %y: tensor<32x1xi32>) -> tensor<64x1xi32> {
  %0 = "mirax.matmul"(%x, %y) : (tensor<64x32xi32>, tensor<32x1xi32>) -> tensor<64x1xi32>
  return %0 : tensor<64x1xi32>
}
