// RUN: %mirax-opt %s -split-input-file "--mirax-row-memory=threads=2 vector-bytes=64 l1d=49152 locality=2" | FileCheck %s
// RUN: %mirax-opt %s -split-input-file "--mirax-row-memory=threads=2 vector-bytes=64 l1d=49152 locality=3" | FileCheck %s --check-prefix=L1
// RUN: %mirax-opt %s -split-input-file "--mirax-row-memory=threads=1 vector-bytes=64 l1d=49152" | FileCheck %s --check-prefix=SEQ
// RUN: %mirax-opt %s -split-input-file "--mirax-row-memory=threads=2 ldexp=on" | FileCheck %s --check-prefix=LDEXP
// RUN: %mirax-opt %s -split-input-file "--mirax-row-memory=threads=2 ldexp=off" | FileCheck %s --check-prefix=NOLDEXP

// A row loop as mirax-fuse-reductions leaves it after bufferization: a max over the row
// of %x, then exp-like work writing the row of %y. During the busiest column loop after
// the first, each 64-byte piece of the next row of %x is prefetched for reading and of
// %y for writing (two rows of 4 KiB: the next row is within a quarter of L1d). The
// row's scratch buffer (freed in the same iteration) goes on the stack; with one
// thread it moves out of the loop.
// CHECK-LABEL: func.func @rows
// CHECK: scf.forall (%[[I:.+]]) in (64)
// CHECK-NEXT: %[[ONE:.+]] = arith.constant 1 : index
// CHECK-NEXT: %[[N:.+]] = arith.addi %[[I]], %[[ONE]] : index
// CHECK: %[[NEXT:.+]] = arith.minsi %[[N]], %{{.+}} : index
// CHECK: memref.alloca() {alignment = 64 : i64} : memref<1x16xf32>
// CHECK-NOT: memref.alloc(
// CHECK: scf.for
// CHECK-NOT: memref.prefetch
// CHECK: scf.for %[[K:[^ ]+]] = 
// CHECK-NEXT: memref.prefetch %arg0[%[[NEXT]], %[[K]]], read, locality<2>, data
// CHECK: memref.prefetch %arg0[%[[NEXT]], %{{.+}}], read, locality<2>, data
// CHECK: memref.prefetch %arg1[%[[NEXT]], %[[K]]], write, locality<2>, data
// L1-LABEL: func.func @rows
// L1: memref.prefetch %arg0[{{.+}}], read, locality<3>, data
// CHECK-NOT: memref.dealloc
// SEQ-LABEL: func.func @rows
// SEQ: memref.alloca() {alignment = 64 : i64} : memref<1x16xf32>
// SEQ-NEXT: scf.forall
// SEQ-NOT: memref.alloc
func.func @rows(%arg0: memref<64x1024xf32>, %arg1: memref<64x1024xf32>) {
  %c0 = arith.constant 0 : index
  %c32 = arith.constant 32 : index
  %c1024 = arith.constant 1024 : index
  %pad = ub.poison : f32
  %ninf = arith.constant dense<0xFF800000> : vector<32xf32>
  scf.forall (%i) in (64) {
    %s = memref.alloc() {alignment = 64 : i64} : memref<1x16xf32>
    %m = scf.for %k = %c0 to %c1024 step %c32 iter_args(%acc = %ninf) -> (vector<32xf32>) {
      %v = vector.transfer_read %arg0[%i, %k], %pad {in_bounds = [true]} : memref<64x1024xf32>, vector<32xf32>
      %r = arith.maximumf %v, %acc : vector<32xf32>
      scf.yield %r : vector<32xf32>
    }
    %row = memref.subview %arg1[%i, 0] [1, 1024] [1, 1] : memref<64x1024xf32> to memref<1x1024xf32, strided<[1024, 1], offset: ?>>
    scf.for %k = %c0 to %c1024 step %c32 {
      %v = vector.transfer_read %arg0[%i, %k], %pad {in_bounds = [true]} : memref<64x1024xf32>, vector<32xf32>
      %d = arith.subf %v, %m : vector<32xf32>
      %e = math.exp %d : vector<32xf32>
      vector.transfer_write %e, %row[%c0, %k] {in_bounds = [true]} : vector<32xf32>, memref<1x1024xf32, strided<[1024, 1], offset: ?>>
    }
    %w = vector.extract_strided_slice %m {offsets = [0], sizes = [16], strides = [1]} : vector<32xf32> to vector<16xf32>
    vector.transfer_write %w, %s[%c0, %c0] {in_bounds = [true]} : vector<16xf32>, memref<1x16xf32>
    memref.dealloc %s : memref<1x16xf32>
  }
  return
}

// -----

// Not a row loop over single rows (a 2-d forall): left alone.
// CHECK-LABEL: func.func @tiles
// CHECK-NOT: memref.prefetch
// CHECK: return
func.func @tiles(%arg0: memref<64x1024xf32>) {
  %c0 = arith.constant 0 : index
  %c32 = arith.constant 32 : index
  %c1024 = arith.constant 1024 : index
  %pad = ub.poison : f32
  scf.forall (%i, %j) in (64, 2) {
    scf.for %k = %c0 to %c1024 step %c32 {
      %v = vector.transfer_read %arg0[%i, %k], %pad {in_bounds = [true]} : memref<64x1024xf32>, vector<32xf32>
      vector.transfer_write %v, %arg0[%i, %k] {in_bounds = [true]} : vector<32xf32>, memref<64x1024xf32>
    }
  }
  return
}

// -----

// Rows over two dims (a 3-d softmax's loop): the next row in row-major order, (i, j + 1)
// or (i + 1, 0), clamped to the last.
// CHECK-LABEL: func.func @rows_3d
// CHECK: scf.forall (%[[I:.+]], %[[J:.+]]) in (4, 16)
// CHECK: %[[IJ:.+]] = arith.muli %[[I]], %[[C16:.+]] : index
// CHECK: %[[F:.+]] = arith.addi %[[IJ]], %[[J]] : index
// CHECK: %[[F1:.+]] = arith.addi %[[F]], %{{.+}} : index
// CHECK: %[[N:.+]] = arith.minsi %[[F1]], %{{.+}} : index
// CHECK: %[[NJ:.+]] = arith.remsi %[[N]], %[[C16]] : index
// CHECK: %[[NI:.+]] = arith.divsi %[[N]], %[[C16]] : index
// CHECK: scf.for %[[K:[^ ]+]] =
// CHECK-NEXT: memref.prefetch %arg0[%[[NI]], %[[NJ]], %[[K]]], read
func.func @rows_3d(%arg0: memref<4x16x1024xf32>, %arg1: memref<4x16xf32>) {
  %c0 = arith.constant 0 : index
  %c32 = arith.constant 32 : index
  %c1024 = arith.constant 1024 : index
  %pad = ub.poison : f32
  %zero = arith.constant dense<0.0> : vector<32xf32>
  scf.forall (%i, %j) in (4, 16) {
    %m = scf.for %k = %c0 to %c1024 step %c32 iter_args(%acc = %zero) -> (vector<32xf32>) {
      %v = vector.transfer_read %arg0[%i, %j, %k], %pad {in_bounds = [true]} : memref<4x16x1024xf32>, vector<32xf32>
      %r = arith.addf %v, %acc : vector<32xf32>
      scf.yield %r : vector<32xf32>
    }
    %s = vector.reduction <add>, %m : vector<32xf32> into f32
    memref.store %s, %arg1[%i, %j] : memref<4x16xf32>
  }
  return
}

// -----

// exp's 2^m scaling as mirax-math-approx writes it (two exponent-field factors,
// 2^(m >> 1) * 2^(m - (m >> 1))), vectorized in a row loop: with ldexp=on (the default on
// AVX-512 hosts) one llvm.ldexp(y, m), which LLVM lowers to vscalefps.
// LDEXP-LABEL: func.func @exp_scaling
// LDEXP: %[[M:.+]] = arith.subi
// LDEXP: llvm.call_intrinsic "llvm.ldexp"(%[[Y:.+]], %[[M]]) : (vector<32xf32>, vector<32xi32>) -> vector<32xf32>
// NOLDEXP-LABEL: func.func @exp_scaling
// NOLDEXP-NOT: llvm.ldexp
// NOLDEXP: return
func.func @exp_scaling(%arg0: memref<64x1024xf32>, %arg1: memref<64x1024xf32>) {
  %c0 = arith.constant 0 : index
  %c32 = arith.constant 32 : index
  %c1024 = arith.constant 1024 : index
  %pad = ub.poison : f32
  %k = arith.constant dense<1262485504> : vector<32xi32>
  %one = arith.constant dense<1> : vector<32xi32>
  %bias = arith.constant dense<127> : vector<32xi32>
  %sh = arith.constant dense<23> : vector<32xi32>
  scf.forall (%i) in (64) {
    scf.for %j = %c0 to %c1024 step %c32 {
      %t = vector.transfer_read %arg0[%i, %j], %pad {in_bounds = [true]} : memref<64x1024xf32>, vector<32xf32>
      %y = arith.mulf %t, %t : vector<32xf32>
      %tb = arith.bitcast %t : vector<32xf32> to vector<32xi32>
      %m = arith.subi %tb, %k : vector<32xi32>
      %m1 = arith.shrsi %m, %one : vector<32xi32>
      %m2 = arith.subi %m, %m1 : vector<32xi32>
      %a1 = arith.addi %m1, %bias : vector<32xi32>
      %s1 = arith.shli %a1, %sh : vector<32xi32>
      %p1 = arith.bitcast %s1 : vector<32xi32> to vector<32xf32>
      %y1 = arith.mulf %y, %p1 : vector<32xf32>
      %a2 = arith.addi %m2, %bias : vector<32xi32>
      %s2 = arith.shli %a2, %sh : vector<32xi32>
      %p2 = arith.bitcast %s2 : vector<32xi32> to vector<32xf32>
      %y2 = arith.mulf %y1, %p2 : vector<32xf32>
      vector.transfer_write %y2, %arg1[%i, %j] {in_bounds = [true]} : vector<32xf32>, memref<64x1024xf32>
    }
  }
  return
}
