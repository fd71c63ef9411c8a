// RUN: mirax-opt %s -split-input-file --mirax-pin-constants="bytes=32" | FileCheck %s
// RUN: mirax-opt %s -split-input-file --mirax-pin-constants="bytes=0" | FileCheck %s --check-prefix=NONE
// RUN: mirax-opt %s --mirax-pin-constants="bytes=32" --mirax-cpu-pipeline="threads=1 stream-bytes=-1" | FileCheck %s --check-prefix=LLVM

// A loop's splat constants, made inside it (a dense splat) or outside it (a broadcast of
// a scalar), are made once before the loop: one register (8 f32) through an empty inline
// asm, repeated to the constant's width. The loop reads those.
// CHECK-LABEL: func.func @loop
// CHECK-SAME:    (%[[X:.+]]: memref<64xf32>, %[[Y:.+]]: memref<64xf32>)
// CHECK:         %[[B:.+]] = vector.broadcast %{{.+}} : f32 to vector<16xf32>
// CHECK:         %[[P1:.+]] = vector.extract_strided_slice %[[B]] {offsets = [0], sizes = [8], strides = [1]}
// CHECK:         %[[H1:.+]] = llvm.inline_asm "", "=x,0" %[[P1]] : (vector<8xf32>) -> vector<8xf32>
// CHECK:         %[[L1:.+]] = vector.insert_strided_slice %[[H1]], %[[B]] {offsets = [0], strides = [1]}
// CHECK:         %[[K1:.+]] = vector.insert_strided_slice %[[H1]], %[[L1]] {offsets = [8], strides = [1]}
// CHECK:         %[[C:.+]] = arith.constant dense<2.500000e-01> : vector<16xf32>
// CHECK:         llvm.inline_asm "", "=x,0"
// CHECK:         %[[K2:.+]] = vector.insert_strided_slice %{{.+}} {offsets = [8], strides = [1]}
// CHECK:         scf.for
// CHECK-NEXT:      %[[V:.+]] = vector.load %[[X]]
// CHECK:           %[[M:.+]] = arith.mulf %[[V]], %[[K1]] : vector<16xf32>
// CHECK:           arith.addf %[[M]], %[[K2]] : vector<16xf32>
// CHECK:           arith.addf %{{.+}}, %[[K2]] : vector<16xf32>
// CHECK-NOT:     llvm.inline_asm
// CHECK:         return
// NONE-LABEL: func.func @loop
// NONE-NOT:      llvm.inline_asm
// LLVM-LABEL: llvm.func @loop
// LLVM:          llvm.inline_asm "", "=x,0" {{.+}} : (vector<8xf32>) -> vector<8xf32>
// LLVM:          llvm.fmul
func.func @loop(%x: memref<64xf32>, %y: memref<64xf32>) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %s = arith.constant 3.0 : f32
  %b = vector.broadcast %s : f32 to vector<16xf32>
  scf.for %i = %c0 to %c64 step %c16 {
    %q = arith.constant dense<0.25> : vector<16xf32>
    %v = vector.load %x[%i] : memref<64xf32>, vector<16xf32>
    %m = arith.mulf %v, %b : vector<16xf32>
    %a = arith.addf %m, %q : vector<16xf32>
    %a2 = arith.addf %a, %q : vector<16xf32>
    vector.store %a2, %y[%i] : memref<64xf32>, vector<16xf32>
  }
  return
}

// -----

// f64: a register holds 4 lanes. Integer constants, constants no loop uses, and vectors
// the register does not divide are left alone.
// CHECK-LABEL: func.func @kinds
// CHECK:         %[[P:.+]] = vector.extract_strided_slice %{{.+}} {offsets = [0], sizes = [4], strides = [1]} : vector<8xf64> to vector<4xf64>
// CHECK:         llvm.inline_asm "", "=x,0" %[[P]] : (vector<4xf64>) -> vector<4xf64>
// CHECK-COUNT-2: vector.insert_strided_slice
// CHECK:         scf.for
// CHECK:           arith.constant dense<1> : vector<8xi32>
// CHECK:           arith.constant dense<2.000000e+00> : vector<6xf32>
// CHECK-NOT:     llvm.inline_asm
func.func @kinds(%x: memref<64xf64>, %i32: memref<64xi32>, %f: memref<6xf32>) {
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %c64 = arith.constant 64 : index
  %unused = arith.constant dense<7.0> : vector<8xf64>
  scf.for %i = %c0 to %c64 step %c8 {
    %k = arith.constant dense<0.5> : vector<8xf64>
    %v = vector.load %x[%i] : memref<64xf64>, vector<8xf64>
    %m = arith.mulf %v, %k : vector<8xf64>
    vector.store %m, %x[%i] : memref<64xf64>, vector<8xf64>
    %one = arith.constant dense<1> : vector<8xi32>
    %w = vector.load %i32[%i] : memref<64xi32>, vector<8xi32>
    %s = arith.addi %w, %one : vector<8xi32>
    vector.store %s, %i32[%i] : memref<64xi32>, vector<8xi32>
    %two = arith.constant dense<2.0> : vector<6xf32>
    %u = vector.load %f[%c0] : memref<6xf32>, vector<6xf32>
    %d = arith.mulf %u, %two : vector<6xf32>
    vector.store %d, %f[%c0] : memref<6xf32>, vector<6xf32>
  }
  return
}

// -----

// Nested loops share one pinned value, made before the outer loop. A loop in a parallel
// loop's body (an scf.forall) gets its own, made in the body (each task) before it.
// CHECK-LABEL: func.func @nests
// CHECK:         llvm.inline_asm
// CHECK:         scf.for
// CHECK:           scf.for
// CHECK-NOT:         llvm.inline_asm
// CHECK:             arith.mulf
// CHECK:         scf.forall
// CHECK-NEXT:      %[[Q:.+]] = arith.constant dense<2.500000e-01> : vector<16xf32>
// CHECK-NEXT:      vector.extract_strided_slice %[[Q]]
// CHECK-NEXT:      llvm.inline_asm "", "=x,0"
// CHECK:           %[[K:.+]] = vector.insert_strided_slice %{{.+}} {offsets = [8], strides = [1]}
// CHECK-NEXT:      scf.for
// CHECK-NOT:         arith.constant
// CHECK:             arith.mulf %{{.+}}, %[[K]] : vector<16xf32>
func.func @nests(%x: memref<2x4x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  scf.for %r = %c0 to %c4 step %c1 {
    scf.for %i = %c0 to %c64 step %c16 {
      %k = arith.constant dense<0.5> : vector<16xf32>
      %v = vector.load %x[%c0, %r, %i] : memref<2x4x64xf32>, vector<16xf32>
      %m = arith.mulf %v, %k : vector<16xf32>
      vector.store %m, %x[%c0, %r, %i] : memref<2x4x64xf32>, vector<16xf32>
    }
  }
  scf.forall (%t) in (2) {
    scf.for %i = %c0 to %c64 step %c16 {
      %k = arith.constant dense<0.25> : vector<16xf32>
      %v = vector.load %x[%t, %c1, %i] : memref<2x4x64xf32>, vector<16xf32>
      %m = arith.mulf %v, %k : vector<16xf32>
      vector.store %m, %x[%t, %c1, %i] : memref<2x4x64xf32>, vector<16xf32>
    }
  }
  return
}

// -----

// A constant of more than two registers (32 f32) is left alone: its one broadcast an
// iteration serves four registers, where pinned it would be four loads.
// CHECK-LABEL: func.func @wide
// CHECK-NOT:     llvm.inline_asm
// CHECK:         scf.for
// CHECK:           arith.constant dense<5.000000e-01> : vector<32xf32>
func.func @wide(%x: memref<64xf32>) {
  %c0 = arith.constant 0 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  scf.for %i = %c0 to %c64 step %c32 {
    %k = arith.constant dense<0.5> : vector<32xf32>
    %v = vector.load %x[%i] : memref<64xf32>, vector<32xf32>
    %m = arith.mulf %v, %k : vector<32xf32>
    vector.store %m, %x[%i] : memref<64xf32>, vector<32xf32>
  }
  return
}

// -----

// Zero is left alone: a zero vector costs one vxorps, no load.
// CHECK-LABEL: func.func @zero
// CHECK-NOT:     llvm.inline_asm
// CHECK:         scf.for
// CHECK:           arith.maximumf %{{.+}}, %{{.+}} : vector<16xf32>
func.func @zero(%x: memref<64xf32>) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %z = arith.constant dense<0.0> : vector<16xf32>
  scf.for %i = %c0 to %c64 step %c16 {
    %v = vector.load %x[%i] : memref<64xf32>, vector<16xf32>
    %m = arith.maximumf %v, %z : vector<16xf32>
    vector.store %m, %x[%i] : memref<64xf32>, vector<16xf32>
  }
  return
}

// -----

// A pow's operands stay visible to LLVM (pow(x, 2.0) is one multiply there); with its
// exponent hidden a vector pow is a libm call per lane.
// CHECK-LABEL: func.func @pow
// CHECK-NOT:     llvm.inline_asm
// CHECK:         scf.for
// CHECK:           math.powf %{{.+}}, %{{.+}} : vector<16xf32>
// LLVM-LABEL: llvm.func @pow
// LLVM-NOT:      llvm.inline_asm
// LLVM:          llvm.intr.pow
func.func @pow(%x: memref<64xf32>) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %c64 = arith.constant 64 : index
  %two = arith.constant dense<2.0> : vector<16xf32>
  scf.for %i = %c0 to %c64 step %c16 {
    %v = vector.load %x[%i] : memref<64xf32>, vector<16xf32>
    %p = math.powf %v, %two : vector<16xf32>
    vector.store %p, %x[%i] : memref<64xf32>, vector<16xf32>
  }
  return
}
