// RUN: mirax-opt %s -split-input-file --mirax-results-in-place | FileCheck %s

// A tiled product's C, written through a 4-d view and copied into the out-parameter:
// computed in the out-parameter instead, the copy and the buffer gone.
// CHECK-LABEL: func.func @collapsed
// CHECK-SAME:    (%[[X:.+]]: memref<8x16xf32>, %[[OUT:.+]]: memref<8x16xf32>)
// CHECK-NOT:     memref.alloc
// CHECK:         %[[V:.+]] = memref.expand_shape %[[OUT]] {{\[\[}}0, 1], [2, 3]] output_shape [2, 4, 4, 4] : memref<8x16xf32> into memref<2x4x4x4xf32>
// CHECK:         linalg.fill {{.*}} outs(%[[V]] :
// CHECK:         %[[C:.+]] = memref.collapse_shape %[[V]]
// CHECK:         linalg.add ins(%[[C]], %[[X]] : {{.*}} outs(%[[C]] :
// CHECK-NOT:     memref.copy
// CHECK-NOT:     memref.dealloc
// CHECK:         return
func.func @collapsed(%x: memref<8x16xf32>, %out: memref<8x16xf32>) {
  %z = arith.constant 0.0 : f32
  %a = memref.alloc() : memref<2x4x4x4xf32>
  linalg.fill ins(%z : f32) outs(%a : memref<2x4x4x4xf32>)
  %c = memref.collapse_shape %a [[0, 1], [2, 3]] : memref<2x4x4x4xf32> into memref<8x16xf32>
  linalg.add ins(%c, %x : memref<8x16xf32>, memref<8x16xf32>) outs(%c : memref<8x16xf32>)
  memref.copy %c, %out : memref<8x16xf32> to memref<8x16xf32>
  memref.dealloc %a : memref<2x4x4x4xf32>
  return
}

// -----

// A chain of reshapes is undone in reverse order.
// CHECK-LABEL: func.func @chain
// CHECK-SAME:    (%[[OUT:.+]]: memref<128xf32>)
// CHECK:         %[[E:.+]] = memref.expand_shape %[[OUT]] {{\[\[}}0, 1, 2]] output_shape [8, 4, 4] : memref<128xf32> into memref<8x4x4xf32>
// CHECK:         %[[V:.+]] = memref.collapse_shape %[[E]] {{\[\[}}0], [1, 2]] : memref<8x4x4xf32> into memref<8x16xf32>
// CHECK:         linalg.fill {{.*}} outs(%[[V]] :
// CHECK-NOT:     memref.copy
func.func @chain(%out: memref<128xf32>) {
  %z = arith.constant 1.0 : f32
  %a = memref.alloc() : memref<8x16xf32>
  linalg.fill ins(%z : f32) outs(%a : memref<8x16xf32>)
  %e = memref.expand_shape %a [[0], [1, 2]] output_shape [8, 4, 4] : memref<8x16xf32> into memref<8x4x4xf32>
  %c = memref.collapse_shape %e [[0, 1, 2]] : memref<8x4x4xf32> into memref<128xf32>
  memref.copy %c, %out : memref<128xf32> to memref<128xf32>
  memref.dealloc %a : memref<8x16xf32>
  return
}

// -----

// The buffer is written after the copy: the out-parameter must keep the copied values.
// CHECK-LABEL: func.func @written_after
// CHECK:         memref.alloc
// CHECK:         memref.copy
func.func @written_after(%out: memref<8x16xf32>) {
  %z = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %a = memref.alloc() : memref<2x4x16xf32>
  linalg.fill ins(%z : f32) outs(%a : memref<2x4x16xf32>)
  %c = memref.collapse_shape %a [[0, 1], [2]] : memref<2x4x16xf32> into memref<8x16xf32>
  memref.copy %c, %out : memref<8x16xf32> to memref<8x16xf32>
  linalg.fill ins(%one : f32) outs(%a : memref<2x4x16xf32>)
  memref.dealloc %a : memref<2x4x16xf32>
  return
}

// -----

// The out-parameter has another use (read before the copy): left alone.
// CHECK-LABEL: func.func @out_read
// CHECK:         memref.alloc
// CHECK:         memref.copy
func.func @out_read(%out: memref<8x16xf32>, %y: memref<8x16xf32>) {
  %a = memref.alloc() : memref<2x4x16xf32>
  %c = memref.collapse_shape %a [[0, 1], [2]] : memref<2x4x16xf32> into memref<8x16xf32>
  linalg.copy ins(%out : memref<8x16xf32>) outs(%c : memref<8x16xf32>)
  memref.copy %c, %out : memref<8x16xf32> to memref<8x16xf32>
  memref.dealloc %a : memref<2x4x16xf32>
  return
}

// -----

// A slice of a buffer is not the buffer: left alone.
// CHECK-LABEL: func.func @slice
// CHECK:         memref.alloc
// CHECK:         memref.copy
func.func @slice(%out: memref<4x16xf32>) {
  %z = arith.constant 0.0 : f32
  %a = memref.alloc() : memref<8x16xf32>
  linalg.fill ins(%z : f32) outs(%a : memref<8x16xf32>)
  %s = memref.subview %a[0, 0] [4, 16] [1, 1] : memref<8x16xf32> to memref<4x16xf32, strided<[16, 1]>>
  memref.copy %s, %out : memref<4x16xf32, strided<[16, 1]>> to memref<4x16xf32>
  memref.dealloc %a : memref<8x16xf32>
  return
}
