// RUN: %PYTHON -m mirax.lowering.matmul_codegen %s -split-input-file --parallel-min=65536 --tiles=mr=8,nr=32,kc=256,nc=512,forall_m=64,min_flops=524288,pack_b=1,threads=2 | FileCheck %s

// A product in a loop whose B does not change (a convolution's window-copy chunks, each
// multiplied by the same weights: dialect/conv.py): B's repacking into panels, with its
// tensor.empty and the reshape of B, moves out of the loop (hoist_invariant_packs), once
// instead of once a trip.
// CHECK-LABEL: func.func @invariant_b
// CHECK:         tensor.expand_shape %arg1 {{.+}} into tensor<256x8x32xf32>
// CHECK:         %[[PANELS:.+]] = linalg.transpose ins(%{{.+}} : tensor<256x8x32xf32>) outs(%{{.+}} : tensor<8x256x32xf32>) permutation = [1, 0, 2]
// CHECK:         scf.for
// CHECK-NOT:       permutation = [1, 0, 2]
// CHECK:           scf.forall
// CHECK:             vector.transfer_read %[[PANELS]]
func.func @invariant_b(%a: tensor<4x256x256xf32>, %b: tensor<256x256xf32>) -> tensor<4x256x256xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<4x256x256xf32>
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %init) -> (tensor<4x256x256xf32>) {
    %ai = tensor.extract_slice %a[%i, 0, 0] [1, 256, 256] [1, 1, 1] : tensor<4x256x256xf32> to tensor<256x256xf32>
    %e = tensor.empty() : tensor<256x256xf32>
    %z = linalg.fill ins(%zero : f32) outs(%e : tensor<256x256xf32>) -> tensor<256x256xf32>
    %p = linalg.matmul ins(%ai, %b : tensor<256x256xf32>, tensor<256x256xf32>) outs(%z : tensor<256x256xf32>) -> tensor<256x256xf32>
    %next = tensor.insert_slice %p into %acc[%i, 0, 0] [1, 256, 256] [1, 1, 1] : tensor<256x256xf32> into tensor<4x256x256xf32>
    scf.yield %next : tensor<4x256x256xf32>
  }
  return %r : tensor<4x256x256xf32>
}

// -----

// B read from the loop's own slice: its repacking stays in the loop.
// CHECK-LABEL: func.func @varying_b
// CHECK:         scf.for
// CHECK:           tensor.extract_slice %arg1[%{{.+}}, 0, 0] [1, 256, 256]
// CHECK:           linalg.transpose ins(%{{.+}} : tensor<256x8x32xf32>) outs(%{{.+}} : tensor<8x256x32xf32>) permutation = [1, 0, 2]
// CHECK:           scf.forall
func.func @varying_b(%a: tensor<256x256xf32>, %bs: tensor<4x256x256xf32>) -> tensor<4x256x256xf32> {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %zero = arith.constant 0.0 : f32
  %init = tensor.empty() : tensor<4x256x256xf32>
  %r = scf.for %i = %c0 to %c4 step %c1 iter_args(%acc = %init) -> (tensor<4x256x256xf32>) {
    %bi = tensor.extract_slice %bs[%i, 0, 0] [1, 256, 256] [1, 1, 1] : tensor<4x256x256xf32> to tensor<256x256xf32>
    %e = tensor.empty() : tensor<256x256xf32>
    %z = linalg.fill ins(%zero : f32) outs(%e : tensor<256x256xf32>) -> tensor<256x256xf32>
    %p = linalg.matmul ins(%a, %bi : tensor<256x256xf32>, tensor<256x256xf32>) outs(%z : tensor<256x256xf32>) -> tensor<256x256xf32>
    %next = tensor.insert_slice %p into %acc[%i, 0, 0] [1, 256, 256] [1, 1, 1] : tensor<256x256xf32> into tensor<4x256x256xf32>
    scf.yield %next : tensor<4x256x256xf32>
  }
  return %r : tensor<4x256x256xf32>
}
