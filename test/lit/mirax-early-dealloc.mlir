// RUN: mirax-opt %s -split-input-file --mirax-early-dealloc | FileCheck %s

// Each temporary is freed after its last use (here by a view of it), not at the end.
// CHECK-LABEL: func.func @chain
// CHECK:         %[[A:.+]] = memref.alloc() : memref<64xf32>
// CHECK:         linalg.fill {{.*}} outs(%[[A]] :
// CHECK:         %[[B:.+]] = memref.alloc() : memref<64xf32>
// CHECK:         linalg.copy ins(%[[A]] : {{.*}} outs(%[[B]] :
// CHECK:         %[[V:.+]] = memref.subview %[[A]][0] [32] [1]
// CHECK:         memref.copy %[[V]], %{{.+}}
// CHECK-NEXT:    memref.dealloc %[[A]]
// CHECK:         linalg.copy ins(%[[B]] : {{.*}} outs(%{{.+}} :
// CHECK-NEXT:    memref.dealloc %[[B]]
// CHECK-NEXT:    return
func.func @chain(%out: memref<64xf32>, %half: memref<32xf32>) {
  %c = arith.constant 1.0 : f32
  %a = memref.alloc() : memref<64xf32>
  linalg.fill ins(%c : f32) outs(%a : memref<64xf32>)
  %b = memref.alloc() : memref<64xf32>
  linalg.copy ins(%a : memref<64xf32>) outs(%b : memref<64xf32>)
  %v = memref.subview %a[0] [32] [1] : memref<64xf32> to memref<32xf32, strided<[1]>>
  memref.copy %v, %half : memref<32xf32, strided<[1]>> to memref<32xf32>
  linalg.copy ins(%b : memref<64xf32>) outs(%out : memref<64xf32>)
  memref.dealloc %a : memref<64xf32>
  memref.dealloc %b : memref<64xf32>
  return
}

// -----

// A use nested in a loop counts as a use by the loop.
// CHECK-LABEL: func.func @nested
// CHECK:         %[[A:.+]] = memref.alloc() : memref<4xf32>
// CHECK:         scf.forall
// CHECK:           memref.load %[[A]]
// CHECK:         }
// CHECK-NEXT:    memref.dealloc %[[A]]
// CHECK-NEXT:    %[[B:.+]] = memref.alloc() : memref<4xf32>
func.func @nested(%out: memref<4xf32>) {
  %c = arith.constant 2.0 : f32
  %a = memref.alloc() : memref<4xf32>
  linalg.fill ins(%c : f32) outs(%a : memref<4xf32>)
  scf.forall (%i) in (4) {
    %x = memref.load %a[%i] : memref<4xf32>
    memref.store %x, %out[%i] : memref<4xf32>
  }
  %b = memref.alloc() : memref<4xf32>
  linalg.copy ins(%out : memref<4xf32>) outs(%b : memref<4xf32>)
  linalg.copy ins(%b : memref<4xf32>) outs(%out : memref<4xf32>)
  memref.dealloc %a : memref<4xf32>
  memref.dealloc %b : memref<4xf32>
  return
}

// -----

// A buffer that reaches an op the pass cannot follow keeps its dealloc where it was.
// CHECK-LABEL: func.func @opaque
// CHECK:         bufferization.to_tensor
// CHECK:         linalg.fill
// CHECK-NEXT:    memref.dealloc
// CHECK-NEXT:    return
func.func @opaque(%out: memref<4xf32>) -> tensor<4xf32> {
  %c = arith.constant 2.0 : f32
  %a = memref.alloc() : memref<4xf32>
  %t = bufferization.to_tensor %a : memref<4xf32> to tensor<4xf32>
  linalg.fill ins(%c : f32) outs(%out : memref<4xf32>)
  memref.dealloc %a : memref<4xf32>
  return %t : tensor<4xf32>
}
