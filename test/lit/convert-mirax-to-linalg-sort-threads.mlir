// REQUIRES: threads
// RUN: env MIRAX_NUM_THREADS=2 %mirax-opt %s --convert-mirax-to-linalg | FileCheck %s

// argsort of one long row of 64-bit values: padded with the largest key to a power of
// two, in chunks sorted on the threads (keys and indices out; as many chunks as fit L2:
// tuning.py "sort" long_chunk_bytes), the chunks merged pairwise, and the last merge, of
// the two halves, in two parts of the output on the two threads: each part finds where
// it starts and ends in each half by bisection (co-ranks: two scf.for of (lo, hi)), then
// merges those runs into its row of a 2 x 65536 result; no serial merge of the whole
// row. The first n indices are the result.
// CHECK-LABEL: func.func @argsort_one_long_row
// CHECK: %[[BIG:.+]] = arith.constant 9223372036854775807 : i64
// CHECK: %[[PAD:.+]] = tensor.splat %[[BIG]] : tensor<131072xi64>
// CHECK: tensor.insert_slice %{{.+}} into %[[PAD]][0] [100000] [1] : tensor<100000xi64> into tensor<131072xi64>
// CHECK-NOT: -> (tensor<131072xi64>, tensor<131072xi32>)
// CHECK: scf.forall (%{{.+}}) in (2) shared_outs({{.+}}) -> (tensor<2x65536xi64>, tensor<2x65536xi32>)
// CHECK: scf.for {{.+}} iter_args({{.+}}) -> (index, index)
// CHECK: arith.divui
// CHECK: scf.for {{.+}} iter_args({{.+}}) -> (index, index)
// CHECK: scf.for {{.+}} -> (index, index, index, index, tensor<65536xi64>, tensor<65536xi32>)
// CHECK: tensor.parallel_insert_slice %{{.+}} into %{{.+}}[%{{.+}}, 0] [1, 65536] [1, 1] : tensor<65536xi32> into tensor<2x65536xi32>
// CHECK-NOT: -> (tensor<131072xi64>, tensor<131072xi32>)
// CHECK: tensor.extract_slice %{{.+}}[0] [100000] [1] : tensor<131072xi32> to tensor<100000xi32>
func.func @argsort_one_long_row(%x: tensor<100000xi64>) -> tensor<100000xui32> {
  %0 = "mirax.argsort"(%x) {axis = 0 : i64} : (tensor<100000xi64>) -> tensor<100000xui32>
  return %0 : tensor<100000xui32>
}
