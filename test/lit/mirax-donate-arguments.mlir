// RUN: %mirax-opt %s -split-input-file --mirax-donate-arguments | FileCheck %s --check-prefix=MARK
// RUN: %mirax-opt %s -split-input-file --pass-pipeline='builtin.module(mirax-donate-arguments, eliminate-empty-tensors, mirax-sink-donated-writers)' | FileCheck %s --check-prefix=SINK
// RUN: not %mirax-opt %S/Inputs/donate-mismatch.mlir --mirax-donate-arguments 2>&1 | FileCheck %s --check-prefix=ERR

// An argument that cannot hold the result it is marked for (another type) is an error
// naming the function, the argument and the result.
// ERR: donate-mismatch.mlir:{{[0-9]+}}:{{[0-9]+}}: error: mirax-donate-arguments: @mismatch: argument 0 (tensor<16xf32>) cannot hold result 0 (tensor<8xf32>)
// RUN: not %mirax-opt %S/Inputs/donate-not-in-place.mlir --mirax-drop-donated-results 2>&1 | FileCheck %s --check-prefix=ERR2

// A donated result that bufferization did not leave in its argument's buffer is an error
// (the runtime counts on it being there): compile then runs the function undonated.
// ERR2: error: mirax-drop-donated-results: result 0 is not in the buffer of argument 0 it was donated
// RUN: %mirax-opt %s -split-input-file --pass-pipeline='builtin.module(mirax-donate-arguments, eliminate-empty-tensors, mirax-sink-donated-writers, one-shot-bufferize{bufferize-function-boundaries function-boundary-type-conversion=identity-layout-map}, canonicalize, cse, canonicalize, mirax-drop-donated-results)' | FileCheck %s --check-prefix=BUF

#id = affine_map<(d0) -> (d0)>

// An SGD update of a donated weight: the result is materialized into the argument, which
// bufferization then updates in place; the result leaves the function's results.
// MARK-LABEL: func.func @sgd
// MARK-SAME:    (%[[W:.+]]: tensor<16xf32> {bufferization.writable = true, mirax.donated = 0 : i64}, %[[G:.+]]: tensor<16xf32>) -> tensor<16xf32>
// MARK:         %[[U:.+]] = linalg.generic
// MARK:         %[[M:.+]] = bufferization.materialize_in_destination %[[U]] in %[[W]]
// MARK:         return %[[M]]
// BUF-LABEL:  func.func @sgd
// BUF-SAME:     (%[[W:.+]]: memref<16xf32> {mirax.donated = 0 : i64}, %[[G:.+]]: memref<16xf32>) {
// BUF-NOT:      -> memref
// BUF-NOT:      memref.alloc
// BUF:          linalg.generic {{.*}} ins(%[[W]], %[[G]] : {{.*}}) outs(%[[W]] :
// BUF-NOT:      memref.copy
// BUF:          return{{$}}
func.func @sgd(%w: tensor<16xf32> {mirax.aliasing_output = 0 : i64}, %g: tensor<16xf32>) -> tensor<16xf32> {
  %e = tensor.empty() : tensor<16xf32>
  %u = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
      ins(%w, %g : tensor<16xf32>, tensor<16xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.subf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<16xf32>
  return %u : tensor<16xf32>
}

// -----

#id = affine_map<(d0) -> (d0)>

// The update comes before a later read of the old weight (the backward pass's product
// of the layer below, here a sum): its ops move after that read, and the weight is
// then written in place. The second result, the read, stays an out-parameter.
// SINK-LABEL: func.func @read_after_update
// SINK:         %[[R:.+]] = linalg.generic {{.*}} iterator_types = ["reduction"]
// SINK:         %[[U:.+]] = linalg.generic {{.*}} iterator_types = ["parallel"]
// SINK:         bufferization.materialize_in_destination %[[U]]
// BUF-LABEL:  func.func @read_after_update
// BUF-SAME:     -> memref<f32>
// BUF-NOT:      memref.copy
// BUF:          iterator_types = ["reduction"]
// BUF:          linalg.generic {{.*}} ins(%arg0, %arg1 : {{.*}}) outs(%arg0 :
// BUF-NOT:      memref.copy
// BUF:          return %{{.+}} : memref<f32>
func.func @read_after_update(%w: tensor<16xf32> {mirax.aliasing_output = 0 : i64}, %g: tensor<16xf32>)
    -> (tensor<16xf32>, tensor<f32>) {
  %e = tensor.empty() : tensor<16xf32>
  %u = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
      ins(%w, %g : tensor<16xf32>, tensor<16xf32>) outs(%e : tensor<16xf32>) {
  ^bb0(%a: f32, %b: f32, %o: f32):
    %s = arith.subf %a, %b : f32
    linalg.yield %s : f32
  } -> tensor<16xf32>
  %z = arith.constant 0.0 : f32
  %e0 = tensor.empty() : tensor<f32>
  %acc = linalg.fill ins(%z : f32) outs(%e0 : tensor<f32>) -> tensor<f32>
  %r = linalg.generic {indexing_maps = [#id, affine_map<(d0) -> ()>], iterator_types = ["reduction"]}
      ins(%w : tensor<16xf32>) outs(%acc : tensor<f32>) {
  ^bb0(%a: f32, %o: f32):
    %s = arith.addf %a, %o : f32
    linalg.yield %s : f32
  } -> tensor<f32>
  return %u, %r : tensor<16xf32>, tensor<f32>
}

// -----

#id = affine_map<(d0) -> (d0)>

// A parallelized update (one slice per thread): the body reads its slice of the shared
// output, not of the argument, and the one slice is the update's input and output, so
// that each iteration reads and writes the same slice, in place (no copy of it).
// SINK-LABEL: func.func @forall
// SINK:         scf.forall (%[[I:.+]]) in (2) shared_outs(%[[O:.+]] = %arg0)
// SINK:           %[[OFF:.+]] = affine.apply
// SINK-NOT:       affine.apply
// SINK:           %[[S:.+]] = tensor.extract_slice %[[O]][%[[OFF]]]
// SINK:           %[[G:.+]] = tensor.extract_slice %arg1[%[[OFF]]]
// SINK-NOT:       tensor.extract_slice
// SINK:           ins(%[[S]], %[[G]] : {{.*}}) outs(%[[S]] :
// SINK:           tensor.parallel_insert_slice %{{.+}} into %[[O]][%[[OFF]]]
// BUF-LABEL:  func.func @forall
// BUF-NOT:      memref.alloc
// BUF-NOT:      memref.copy
// BUF:          return{{$}}
func.func @forall(%w: tensor<16xf32> {mirax.aliasing_output = 0 : i64}, %g: tensor<16xf32>) -> tensor<16xf32> {
  %e = tensor.empty() : tensor<16xf32>
  %u = scf.forall (%i) in (2) shared_outs(%o = %e) -> (tensor<16xf32>) {
    %off = affine.apply affine_map<(d0) -> (d0 * 8)>(%i)
    %off2 = affine.apply affine_map<(d0) -> (d0 * 8)>(%i)
    %off3 = affine.apply affine_map<(d0) -> (d0 * 8)>(%i)
    %ws = tensor.extract_slice %w[%off] [8] [1] : tensor<16xf32> to tensor<8xf32>
    %gs = tensor.extract_slice %g[%off2] [8] [1] : tensor<16xf32> to tensor<8xf32>
    %os = tensor.extract_slice %o[%off3] [8] [1] : tensor<16xf32> to tensor<8xf32>
    %s = linalg.generic {indexing_maps = [#id, #id, #id], iterator_types = ["parallel"]}
        ins(%ws, %gs : tensor<8xf32>, tensor<8xf32>) outs(%os : tensor<8xf32>) {
    ^bb0(%a: f32, %b: f32, %x: f32):
      %d = arith.subf %a, %b : f32
      linalg.yield %d : f32
    } -> tensor<8xf32>
    scf.forall.in_parallel {
      tensor.parallel_insert_slice %s into %o[%off3] [8] [1] : tensor<8xf32> into tensor<16xf32>
    }
  }
  return %u : tensor<16xf32>
}
