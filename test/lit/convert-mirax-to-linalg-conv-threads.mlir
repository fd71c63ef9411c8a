// REQUIRES: threads
// RUN: env MIRAX_NUM_THREADS=2 %mirax-opt %s --convert-mirax-to-linalg | FileCheck %s

// With two threads a chunked convolution's chunks go to the threads (dialect/conv.py,
// `_im2col_products`): each thread runs its half of the chunks in order into its own rows
// of the result, a chunk's window copy and product reading nothing another thread writes
// (product row i reads window i alone), so no chunk waits for another; the products,
// nested in the forall, are planned for one thread (matmul_codegen.plan).
// CHECK-LABEL: func.func @conv_chunked
// CHECK:         %[[E:.+]] = tensor.empty() : tensor<3211264x64xf32>
// CHECK:         scf.forall (%[[T:.+]]) in (2) shared_outs(%[[O:.+]] = %[[E]]) -> (tensor<3211264x64xf32>)
// CHECK:           %[[S:.+]] = arith.muli %[[T]], %{{.+}} : index
// CHECK:           %[[OWN:.+]] = tensor.extract_slice %[[O]][%[[S]], 0] [1605632, 64] [1, 1]
// CHECK:           %[[D:.+]] = scf.for %[[J:.+]] = %{{.+}} to %{{.+}} step %{{.+}} iter_args(%[[A:.+]] = %[[OWN]]) -> (tensor<1605632x64xf32>)
// CHECK:             linalg.generic
// CHECK:             %[[M:.+]] = linalg.matmul
// CHECK:             %[[I:.+]] = tensor.insert_slice %[[M]] into %[[A]][%{{.+}}, 0]
// CHECK:             scf.yield %[[I]] : tensor<1605632x64xf32>
// CHECK:           scf.forall.in_parallel
// CHECK-NEXT:        tensor.parallel_insert_slice %[[D]] into %[[O]][%[[S]], 0] [1605632, 64] [1, 1]
func.func @conv_chunked(%x: tensor<64x224x224x64xf32>, %w: tensor<64x3x3x64xf32>) -> tensor<64x224x224x64xf32> {
  %0 = "mirax.conv"(%x, %w) {stride = array<i64: 1, 1>, padding_lo = array<i64: 1, 1>, padding_hi = array<i64: 1, 1>, kernel_dilation = array<i64: 1, 1>, input_dilation = array<i64: 1, 1>, groups = 1 : i64, flip = false} : (tensor<64x224x224x64xf32>, tensor<64x3x3x64xf32>) -> tensor<64x224x224x64xf32>
  return %0 : tensor<64x224x224x64xf32>
}
