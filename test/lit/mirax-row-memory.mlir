// RUN: %mirax-opt %s -split-input-file "--mirax-row-memory=threads=2 vector-bytes=64 l1d=49152 locality=2" | FileCheck %s
// RUN: %mirax-opt %s -split-input-file "--mirax-row-memory=threads=2 vector-bytes=64 l1d=49152 locality=3" | FileCheck %s --check-prefix=L1
// RUN: %mirax-opt %s -split-input-file "--mirax-row-memory=threads=1 vector-bytes=64 l1d=49152" | FileCheck %s --check-prefix=SEQ
// RUN: %mirax-opt %s -split-input-file "--mirax-row-memory=threads=2 ldexp=on exp-reduce=off" | FileCheck %s --check-prefix=LDEXP
// RUN: %mirax-opt %s -split-input-file "--mirax-row-memory=threads=2 ldexp=off exp-reduce=off" | FileCheck %s --check-prefix=NOLDEXP
// RUN: %mirax-opt %s -split-input-file "--mirax-row-memory=threads=2 ldexp=scalef exp-reduce=off" | FileCheck %s --check-prefix=SCALEF
// RUN: %mirax-opt %s -split-input-file "--mirax-row-memory=threads=2 exp-reduce=on" | FileCheck %s --check-prefix=REDUCE
// RUN: not %mirax-opt %s -split-input-file "--mirax-row-memory=exp-reduce=maybe" 2>&1 | FileCheck %s --check-prefix=BADREDUCE
// BADREDUCE: exp-reduce must be auto, on or off, got 'maybe'
// RUN: not %mirax-opt %s -split-input-file "--mirax-row-memory=l1d=big" 2>&1 | FileCheck %s --check-prefix=BADINT
// BADINT: error: pass 'mirax-row-memory': option l1d must be an integer, got 'big'
// BADINT-NOT: Traceback
// RUN: %mirax-opt %s -split-input-file "--mirax-row-memory=threads=2 stream-bytes=4096 line=64" | FileCheck %s --check-prefix=STREAM
// RUN: %mirax-opt %s -split-input-file "--mirax-row-memory=threads=1 stream-bytes=4096 line=64" | FileCheck %s --check-prefix=STREAMSEQ

// A row loop as mirax-fuse-reductions leaves it after bufferization: a max over the row
// of %x, then exp-like work writing the row of %y. During the busiest column loop (the
// exp's), each 64-byte piece of the next row of %x is prefetched for reading and of
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

// The busiest column loop may be the first: a softmax whose max mirax-stable-shift moved
// onto a branch starts with its exps (written into %y), then sums them; the prefetches
// go into the exp loop, not the cheaper sum.
// CHECK-LABEL: func.func @exp_first
// CHECK: scf.forall
// CHECK: scf.for %[[K:[^ ]+]] = 
// CHECK-NEXT: memref.prefetch %arg0[%{{.+}}, %[[K]]], read
// CHECK: math.exp
// CHECK: scf.for
// CHECK-NOT: memref.prefetch
// CHECK: arith.addf
// CHECK: return
func.func @exp_first(%arg0: memref<64x1024xf32>, %arg1: memref<64x1024xf32>) {
  %c0 = arith.constant 0 : index
  %c32 = arith.constant 32 : index
  %c1024 = arith.constant 1024 : index
  %pad = ub.poison : f32
  %zero = arith.constant dense<0.0> : vector<32xf32>
  scf.forall (%i) in (64) {
    scf.for %k = %c0 to %c1024 step %c32 {
      %v = vector.transfer_read %arg0[%i, %k], %pad {in_bounds = [true]} : memref<64x1024xf32>, vector<32xf32>
      %e = math.exp %v : vector<32xf32>
      %f = arith.mulf %e, %e : vector<32xf32>
      vector.transfer_write %f, %arg1[%i, %k] {in_bounds = [true]} : vector<32xf32>, memref<64x1024xf32>
    }
    %s = scf.for %k = %c0 to %c1024 step %c32 iter_args(%acc = %zero) -> (vector<32xf32>) {
      %v = vector.transfer_read %arg1[%i, %k], %pad {in_bounds = [true]} : memref<64x1024xf32>, vector<32xf32>
      %r = arith.addf %v, %acc : vector<32xf32>
      scf.yield %r : vector<32xf32>
    }
    %w = vector.extract %s[0] : f32 from vector<32xf32>
    memref.store %w, %arg1[%i, %c0] : memref<64x1024xf32>
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

// -----

// With the float m beside the integer one (exp rounds x log2(e) by adding 1.5 * 2^23 = t:
// m = t - 1.5 * 2^23 as a float, bitcast(t) - 0x4B400000 as an integer), ldexp=scalef (the
// default on AVX-512 hosts) scales by AVX-512's scalef on the float m, one call a 512-bit
// register: no int-to-float conversion. Without the float m (@exp_scaling), llvm.ldexp.
// SCALEF-LABEL: func.func @exp_scaling_scalef
// SCALEF: %[[T:.+]] = vector.transfer_read
// SCALEF: %[[MF:.+]] = arith.subf %[[T]], %{{.+}} : vector<32xf32>
// SCALEF: %[[Y:.+]] = arith.mulf
// SCALEF-NOT: llvm.ldexp
// SCALEF-DAG: %[[Y0:.+]] = vector.extract_strided_slice %[[Y]] {offsets = [0], sizes = [16], strides = [1]}
// SCALEF-DAG: %[[M0:.+]] = vector.extract_strided_slice %[[MF]] {offsets = [0], sizes = [16], strides = [1]}
// SCALEF: %[[R0:.+]] = llvm.call_intrinsic "llvm.x86.avx512.mask.scalef.ps.512"(%[[Y0]], %[[M0]], %[[Y0]], %{{.+}}, %{{.+}}) : (vector<16xf32>, vector<16xf32>, vector<16xf32>, i16, i32) -> vector<16xf32>
// SCALEF: %[[P0:.+]] = vector.insert_strided_slice %[[R0]], %[[Y]] {offsets = [0], strides = [1]}
// SCALEF: %[[R1:.+]] = llvm.call_intrinsic "llvm.x86.avx512.mask.scalef.ps.512"
// SCALEF: %[[P1:.+]] = vector.insert_strided_slice %[[R1]], %[[P0]] {offsets = [16], strides = [1]}
// SCALEF: vector.transfer_write %[[P1]]
// LDEXP-LABEL: func.func @exp_scaling_scalef
// LDEXP: llvm.call_intrinsic "llvm.ldexp"
// LDEXP-NOT: scalef
// LDEXP: return
func.func @exp_scaling_scalef(%arg0: memref<64x1024xf32>, %arg1: memref<64x1024xf32>, %arg2: memref<64x1024xf32>) {
  %c0 = arith.constant 0 : index
  %c32 = arith.constant 32 : index
  %c1024 = arith.constant 1024 : index
  %pad = ub.poison : f32
  %magic = arith.constant dense<12582912.0> : vector<32xf32>
  %k = arith.constant dense<1262485504> : vector<32xi32>
  %one = arith.constant dense<1> : vector<32xi32>
  %bias = arith.constant dense<127> : vector<32xi32>
  %sh = arith.constant dense<23> : vector<32xi32>
  scf.forall (%i) in (64) {
    scf.for %j = %c0 to %c1024 step %c32 {
      %t = vector.transfer_read %arg0[%i, %j], %pad {in_bounds = [true]} : memref<64x1024xf32>, vector<32xf32>
      %mf = arith.subf %t, %magic : vector<32xf32>
      vector.transfer_write %mf, %arg2[%i, %j] {in_bounds = [true]} : vector<32xf32>, memref<64x1024xf32>
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

// -----

// The same scaling on a 2-d register block (a transpose fused with its exp, vectorized in
// 16x16 blocks) keeps its two multiplies: LLVM's intrinsics take 1-d vectors only (the
// call on vector<16x16xf32> failed the verifier).
// LDEXP-LABEL: func.func @exp_scaling_2d
// LDEXP-NOT: llvm.ldexp
// LDEXP: arith.mulf {{.+}} : vector<16x16xf32>
// LDEXP: arith.mulf {{.+}} : vector<16x16xf32>
// LDEXP-NOT: llvm.ldexp
// LDEXP: return
func.func @exp_scaling_2d(%arg0: memref<64x1024xf32>, %arg1: memref<64x1024xf32>) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  %c1024 = arith.constant 1024 : index
  %pad = ub.poison : f32
  %k = arith.constant dense<1262485504> : vector<16x16xi32>
  %one = arith.constant dense<1> : vector<16x16xi32>
  %bias = arith.constant dense<127> : vector<16x16xi32>
  %sh = arith.constant dense<23> : vector<16x16xi32>
  scf.forall (%i) in (4) {
    %r = arith.muli %i, %c16 : index
    scf.for %j = %c0 to %c1024 step %c16 {
      %t = vector.transfer_read %arg0[%r, %j], %pad {in_bounds = [true, true]} : memref<64x1024xf32>, vector<16x16xf32>
      %y = arith.mulf %t, %t : vector<16x16xf32>
      %tb = arith.bitcast %t : vector<16x16xf32> to vector<16x16xi32>
      %m = arith.subi %tb, %k : vector<16x16xi32>
      %m1 = arith.shrsi %m, %one : vector<16x16xi32>
      %m2 = arith.subi %m, %m1 : vector<16x16xi32>
      %a1 = arith.addi %m1, %bias : vector<16x16xi32>
      %s1 = arith.shli %a1, %sh : vector<16x16xi32>
      %p1 = arith.bitcast %s1 : vector<16x16xi32> to vector<16x16xf32>
      %y1 = arith.mulf %y, %p1 : vector<16x16xf32>
      %a2 = arith.addi %m2, %bias : vector<16x16xi32>
      %s2 = arith.shli %a2, %sh : vector<16x16xi32>
      %p2 = arith.bitcast %s2 : vector<16x16xi32> to vector<16x16xf32>
      %y2 = arith.mulf %y1, %p2 : vector<16x16xf32>
      vector.transfer_write %y2, %arg1[%r, %j] {in_bounds = [true, true]} : vector<16x16xf32>, memref<64x1024xf32>
    }
  }
  return
}

// -----

// A vectorized exp as mirax-math-approx writes it (clamp, round with 1.5 * 2^23, Cody-Waite,
// polynomial, two-factor 2^m scaling; abridged polynomial) in a row loop's sum. Without
// ldexp (exp-range=auto: hosts without AVX-512) it runs on a branch taken when every lane
// has |x| < 86 (an unsigned max of |x|'s bits across the registers: a NaN fails it); the
// other branch is the exp as it was. An exp that is only summed (this one, logsumexp's)
// is 2^t there, t = x log2(e) rounded with 1.5 * 2^23 (whose bits shifted left by 23 are
// n << 23), 2^(t - n) by a degree-5 polynomial, n added to its exponent field; a written
// one (@exp_written) keeps Cody-Waite on that branch.
// NOLDEXP-LABEL: func.func @exp_range
// NOLDEXP: scf.for
// NOLDEXP: %[[X:.+]] = arith.subf
// NOLDEXP: %[[XI:.+]] = arith.bitcast %[[X]] : vector<32xf32> to vector<32xi32>
// NOLDEXP: %[[A:.+]] = arith.andi %[[XI]], %{{.+}} : vector<32xi32>
// NOLDEXP: vector.extract_strided_slice %[[A]]
// NOLDEXP: arith.maxui
// NOLDEXP: %[[B:.+]] = arith.constant dense<1118568448>
// NOLDEXP: %[[OK:.+]] = arith.cmpi ult, %{{.+}}, %[[B]]
// NOLDEXP: %[[ALL:.+]] = vector.reduction <and>, %[[OK]] : vector<{{[0-9]+}}xi1> into i1
// NOLDEXP: %[[Y:.+]] = scf.if %[[ALL]] -> (vector<32xf32>) {
// NOLDEXP: %[[T:.+]] = arith.mulf %[[X]], %{{.+}} : vector<32xf32>
// NOLDEXP: %[[TM:.+]] = arith.addf %[[T]], %{{.+}} : vector<32xf32>
// NOLDEXP: %[[N:.+]] = arith.subf %[[TM]], %{{.+}} : vector<32xf32>
// NOLDEXP-NEXT: %[[R:.+]] = arith.subf %[[T]], %[[N]] : vector<32xf32>
// NOLDEXP-COUNT-5: math.fma %{{.+}}, %[[R]], %{{.+}} : vector<32xf32>
// NOLDEXP-NOT: math.fma
// NOLDEXP: %[[TB:.+]] = arith.bitcast %[[TM]] : vector<32xf32> to vector<32xi32>
// NOLDEXP-NEXT: %[[S:.+]] = arith.shli %[[TB]], %{{.+}} : vector<32xi32>
// NOLDEXP-NEXT: %[[PI:.+]] = arith.bitcast %{{.+}} : vector<32xf32> to vector<32xi32>
// NOLDEXP-NEXT: %[[RI:.+]] = arith.addi %[[PI]], %[[S]] : vector<32xi32>
// NOLDEXP-NEXT: %[[F:.+]] = arith.bitcast %[[RI]] : vector<32xi32> to vector<32xf32>
// NOLDEXP-NEXT: scf.yield %[[F]] : vector<32xf32>
// NOLDEXP-NEXT: } else {
// NOLDEXP: arith.select
// NOLDEXP: arith.shrsi
// NOLDEXP: arith.mulf
// NOLDEXP: scf.yield %{{.+}} : vector<32xf32>
// NOLDEXP-NEXT: }
// NOLDEXP-NEXT: arith.addf %[[Y]], %{{.+}} : vector<32xf32>
// LDEXP-LABEL: func.func @exp_range
// LDEXP-NOT: scf.if
// LDEXP: llvm.ldexp
// With exp-reduce=on (the default on AVX-512 hosts), an exp that is only summed is 2^t,
// t = x log2(e): t - floor(t) by vreduceps (imm 9), a degree-6 polynomial, scaled by
// vscalefps on t (which floors it), each on a 16-lane piece; the Cody-Waite form's ops are gone.
// REDUCE-LABEL: func.func @exp_range
// REDUCE: %[[X:.+]] = arith.subf
// REDUCE-NEXT: %[[L:.+]] = arith.constant dense<1.44269502> : vector<32xf32>
// REDUCE-NEXT: %[[T:.+]] = arith.mulf %[[X]], %[[L]] : vector<32xf32>
// REDUCE-NEXT: %[[IMM:.+]] = llvm.mlir.constant(9 : i32) : i32
// REDUCE: %[[T0:.+]] = vector.extract_strided_slice %[[T]] {offsets = [0], sizes = [16], strides = [1]}
// REDUCE-NEXT: %[[R0:.+]] = llvm.call_intrinsic "llvm.x86.avx512.mask.reduce.ps.512"(%[[T0]], %[[IMM]], %[[T0]], %{{.+}}, %{{.+}}) : (vector<16xf32>, i32, vector<16xf32>, i16, i32) -> vector<16xf32>
// REDUCE: %[[RA:.+]] = vector.insert_strided_slice %[[R0]], %[[T]] {offsets = [0], strides = [1]}
// REDUCE: llvm.call_intrinsic "llvm.x86.avx512.mask.reduce.ps.512"
// REDUCE-NEXT: %[[R:.+]] = vector.insert_strided_slice %{{.+}}, %[[RA]] {offsets = [16], strides = [1]}
// REDUCE-COUNT-6: math.fma %{{.+}}, %[[R]], %{{.+}} : vector<32xf32>
// REDUCE: %[[P0:.+]] = vector.extract_strided_slice %{{.+}} {offsets = [0], sizes = [16], strides = [1]}
// REDUCE-NEXT: %[[TS:.+]] = vector.extract_strided_slice %[[T]] {offsets = [0], sizes = [16], strides = [1]}
// REDUCE-NEXT: llvm.call_intrinsic "llvm.x86.avx512.mask.scalef.ps.512"(%[[P0]], %[[TS]], %[[P0]], %{{.+}}, %{{.+}})
// REDUCE: llvm.call_intrinsic "llvm.x86.avx512.mask.scalef.ps.512"
// REDUCE-NEXT: %[[E:.+]] = vector.insert_strided_slice
// REDUCE-NEXT: arith.addf %[[E]], %{{.+}} : vector<32xf32>
// REDUCE-NOT: arith.select
// REDUCE-NOT: arith.shrsi
// REDUCE: return
func.func @exp_range(%arg0: memref<64x1024xf32>, %arg1: memref<64xf32>) {
  %c0 = arith.constant 0 : index
  %c32 = arith.constant 32 : index
  %c1024 = arith.constant 1024 : index
  %pad = ub.poison : f32
  %zero = arith.constant dense<0.0> : vector<32xf32>
  %lo = arith.constant dense<-1.040000e+02> : vector<32xf32>
  %hi = arith.constant dense<8.880000e+01> : vector<32xf32>
  %log2e = arith.constant dense<1.44269502> : vector<32xf32>
  %magic = arith.constant dense<0x4B400000> : vector<32xf32>
  %magici = arith.constant dense<1262485504> : vector<32xi32>
  %ln2hi = arith.constant dense<-0.693359375> : vector<32xf32>
  %ln2lo = arith.constant dense<2.12194442E-4> : vector<32xf32>
  %p0 = arith.constant dense<0.041668389> : vector<32xf32>
  %p1 = arith.constant dense<0.49999994> : vector<32xf32>
  %cone = arith.constant dense<1.000000e+00> : vector<32xf32>
  %one = arith.constant dense<1> : vector<32xi32>
  %bias = arith.constant dense<127> : vector<32xi32>
  %sh = arith.constant dense<23> : vector<32xi32>
  scf.forall (%i) in (64) {
    %s = scf.for %j = %c0 to %c1024 step %c32 iter_args(%acc = %zero) -> (vector<32xf32>) {
      %v = vector.transfer_read %arg0[%i, %j], %pad {in_bounds = [true]} : memref<64x1024xf32>, vector<32xf32>
      %x = arith.subf %v, %cone : vector<32xf32>
      %l = arith.cmpf olt, %x, %lo : vector<32xf32>
      %xl = arith.select %l, %lo, %x : vector<32xi1>, vector<32xf32>
      %g = arith.cmpf ogt, %xl, %hi : vector<32xf32>
      %xc = arith.select %g, %hi, %xl : vector<32xi1>, vector<32xf32>
      %t = math.fma %xc, %log2e, %magic : vector<32xf32>
      %m = arith.subf %t, %magic : vector<32xf32>
      %tb = arith.bitcast %t : vector<32xf32> to vector<32xi32>
      %mi = arith.subi %tb, %magici : vector<32xi32>
      %r0 = math.fma %m, %ln2hi, %xc : vector<32xf32>
      %r = math.fma %m, %ln2lo, %r0 : vector<32xf32>
      %q = math.fma %p0, %r, %p1 : vector<32xf32>
      %r2 = arith.mulf %r, %r : vector<32xf32>
      %y0 = math.fma %q, %r2, %r : vector<32xf32>
      %y = arith.addf %y0, %cone : vector<32xf32>
      %m1 = arith.shrsi %mi, %one : vector<32xi32>
      %m2 = arith.subi %mi, %m1 : vector<32xi32>
      %a1 = arith.addi %m1, %bias : vector<32xi32>
      %s1 = arith.shli %a1, %sh : vector<32xi32>
      %f1 = arith.bitcast %s1 : vector<32xi32> to vector<32xf32>
      %y1 = arith.mulf %y, %f1 : vector<32xf32>
      %a2 = arith.addi %m2, %bias : vector<32xi32>
      %s2 = arith.shli %a2, %sh : vector<32xi32>
      %f2 = arith.bitcast %s2 : vector<32xi32> to vector<32xf32>
      %e = arith.mulf %y1, %f2 : vector<32xf32>
      %sum = arith.addf %e, %acc : vector<32xf32>
      scf.yield %sum : vector<32xf32>
    }
    %t = vector.reduction <add>, %s : vector<32xf32> into f32
    memref.store %t, %arg1[%i] : memref<64xf32>
  }
  return
}

// -----

// On the fast branch too (exp-range, without ldexp): clamp-free Cody-Waite.
// NOLDEXP-LABEL: func.func @exp_written
// NOLDEXP: scf.for
// NOLDEXP: %[[X:.+]] = arith.subf
// NOLDEXP: %[[XI:.+]] = arith.bitcast %[[X]] : vector<32xf32> to vector<32xi32>
// NOLDEXP: %[[A:.+]] = arith.andi %[[XI]], %{{.+}} : vector<32xi32>
// NOLDEXP: vector.extract_strided_slice %[[A]]
// NOLDEXP: arith.maxui
// NOLDEXP: %[[B:.+]] = arith.constant dense<1118568448>
// NOLDEXP: %[[OK:.+]] = arith.cmpi ult, %{{.+}}, %[[B]]
// NOLDEXP: %[[ALL:.+]] = vector.reduction <and>, %[[OK]] : vector<{{[0-9]+}}xi1> into i1
// NOLDEXP: %[[Y:.+]] = scf.if %[[ALL]] -> (vector<32xf32>) {
// NOLDEXP-NOT: arith.select
// NOLDEXP-NOT: arith.shrsi
// NOLDEXP: %[[T:.+]] = math.fma %[[X]], %{{.+}}, %{{.+}} : vector<32xf32>
// NOLDEXP: %[[TB:.+]] = arith.bitcast %[[T]]
// NOLDEXP: %[[MI:.+]] = arith.subi %[[TB]], %{{.+}} : vector<32xi32>
// NOLDEXP: %[[S:.+]] = arith.shli %[[MI]], %{{.+}} : vector<32xi32>
// NOLDEXP: %[[YI:.+]] = arith.bitcast %{{.+}} : vector<32xf32> to vector<32xi32>
// NOLDEXP: %[[RI:.+]] = arith.addi %[[YI]], %[[S]] : vector<32xi32>
// NOLDEXP: %[[R:.+]] = arith.bitcast %[[RI]] : vector<32xi32> to vector<32xf32>
// NOLDEXP-NEXT: scf.yield %[[R]] : vector<32xf32>
// NOLDEXP-NEXT: } else {
// NOLDEXP: arith.select
// NOLDEXP: arith.select
// NOLDEXP: arith.shrsi
// NOLDEXP: %[[Y1:.+]] = arith.mulf
// NOLDEXP: %[[Y2:.+]] = arith.mulf %[[Y1]], %{{.+}} : vector<32xf32>
// NOLDEXP-NEXT: scf.yield %[[Y2]] : vector<32xf32>
// NOLDEXP: arith.addf %[[Y]], %{{.+}} : vector<32xf32>
// An exp whose values are also written (a softmax's) keeps the Cody-Waite form: its
// rounding of t = x log2(e) would be a relative error |x| 2^-24 in each output.
// REDUCE-LABEL: func.func @exp_written
// REDUCE-NOT: llvm.x86.avx512.mask.reduce.ps.512
// REDUCE: arith.shrsi
// REDUCE: vector.transfer_write
// REDUCE: return
func.func @exp_written(%arg0: memref<64x1024xf32>, %arg1: memref<64xf32>, %arg2: memref<64x1024xf32>) {
  %c0 = arith.constant 0 : index
  %c32 = arith.constant 32 : index
  %c1024 = arith.constant 1024 : index
  %pad = ub.poison : f32
  %zero = arith.constant dense<0.0> : vector<32xf32>
  %lo = arith.constant dense<-1.040000e+02> : vector<32xf32>
  %hi = arith.constant dense<8.880000e+01> : vector<32xf32>
  %log2e = arith.constant dense<1.44269502> : vector<32xf32>
  %magic = arith.constant dense<0x4B400000> : vector<32xf32>
  %magici = arith.constant dense<1262485504> : vector<32xi32>
  %ln2hi = arith.constant dense<-0.693359375> : vector<32xf32>
  %ln2lo = arith.constant dense<2.12194442E-4> : vector<32xf32>
  %p0 = arith.constant dense<0.041668389> : vector<32xf32>
  %p1 = arith.constant dense<0.49999994> : vector<32xf32>
  %cone = arith.constant dense<1.000000e+00> : vector<32xf32>
  %one = arith.constant dense<1> : vector<32xi32>
  %bias = arith.constant dense<127> : vector<32xi32>
  %sh = arith.constant dense<23> : vector<32xi32>
  scf.forall (%i) in (64) {
    %s = scf.for %j = %c0 to %c1024 step %c32 iter_args(%acc = %zero) -> (vector<32xf32>) {
      %v = vector.transfer_read %arg0[%i, %j], %pad {in_bounds = [true]} : memref<64x1024xf32>, vector<32xf32>
      %x = arith.subf %v, %cone : vector<32xf32>
      %l = arith.cmpf olt, %x, %lo : vector<32xf32>
      %xl = arith.select %l, %lo, %x : vector<32xi1>, vector<32xf32>
      %g = arith.cmpf ogt, %xl, %hi : vector<32xf32>
      %xc = arith.select %g, %hi, %xl : vector<32xi1>, vector<32xf32>
      %t = math.fma %xc, %log2e, %magic : vector<32xf32>
      %m = arith.subf %t, %magic : vector<32xf32>
      %tb = arith.bitcast %t : vector<32xf32> to vector<32xi32>
      %mi = arith.subi %tb, %magici : vector<32xi32>
      %r0 = math.fma %m, %ln2hi, %xc : vector<32xf32>
      %r = math.fma %m, %ln2lo, %r0 : vector<32xf32>
      %q = math.fma %p0, %r, %p1 : vector<32xf32>
      %r2 = arith.mulf %r, %r : vector<32xf32>
      %y0 = math.fma %q, %r2, %r : vector<32xf32>
      %y = arith.addf %y0, %cone : vector<32xf32>
      %m1 = arith.shrsi %mi, %one : vector<32xi32>
      %m2 = arith.subi %mi, %m1 : vector<32xi32>
      %a1 = arith.addi %m1, %bias : vector<32xi32>
      %s1 = arith.shli %a1, %sh : vector<32xi32>
      %f1 = arith.bitcast %s1 : vector<32xi32> to vector<32xf32>
      %y1 = arith.mulf %y, %f1 : vector<32xf32>
      %a2 = arith.addi %m2, %bias : vector<32xi32>
      %s2 = arith.shli %a2, %sh : vector<32xi32>
      %f2 = arith.bitcast %s2 : vector<32xi32> to vector<32xf32>
      %e = arith.mulf %y1, %f2 : vector<32xf32>
      vector.transfer_write %e, %arg2[%i, %j] {in_bounds = [true]} : vector<32xf32>, memref<64x1024xf32>
      %sum = arith.addf %e, %acc : vector<32xf32>
      scf.yield %sum : vector<32xf32>
    }
    %t = vector.reduction <add>, %s : vector<32xf32> into f32
    memref.store %t, %arg1[%i] : memref<64xf32>
  }
  return
}

// -----

// A layer norm's row loop on memrefs: the centred row written to the output's row, read
// for the sum of squares, then scaled in place. The output (8 KiB) is at least
// stream-bytes: the first two passes go to a stack row, the last reads it and writes the
// output with non-temporal stores on a branch for 64-byte-aligned rows (the old loop on
// the other). With one thread the stack row is allocated once, before the row loop.
// (The default threshold, the host's last-level cache, leaves it as it is.)
// STREAM-LABEL: func.func @centred_rows
// STREAM: scf.forall (%[[I:.+]]) in (16)
// STREAM: %[[TMP:.+]] = memref.alloca() {alignment = 64 : i64} : memref<1x128xf32>
// STREAM: %[[ROW:.+]] = memref.subview %arg1[%[[I]], 0] [1, 128] [1, 1]
// STREAM: scf.for %[[K1:.+]] = %{{.+}} to %{{.+}} step
// STREAM: vector.transfer_write %{{.+}}, %[[TMP]][%{{.+}}, %[[K1]]]
// STREAM: scf.for
// STREAM: vector.transfer_read %[[TMP]]
// STREAM: %[[PTR:.+]] = memref.extract_aligned_pointer_as_index %[[ROW]]
// STREAM: %[[REM:.+]] = arith.remui %{{.+}}, %{{.+}} : index
// STREAM: %[[OK:.+]] = arith.cmpi eq, %[[REM]]
// STREAM: scf.if %[[OK]] {
// STREAM: scf.for %[[K3:.+]] = %{{.+}} to %{{.+}} step
// STREAM: vector.transfer_read %[[TMP]][%{{.+}}, %[[K3]]]
// STREAM: vector.store %{{.+}}, %[[ROW]][%{{.+}}, %[[K3]]] {alignment = 64 : i64, nontemporal = true}
// STREAM: } else {
// STREAM: vector.transfer_read %[[TMP]]
// STREAM: vector.transfer_write %{{.+}}, %[[ROW]]
// STREAM-NOT: memref.prefetch %arg1
// STREAMSEQ-LABEL: func.func @centred_rows
// STREAMSEQ: memref.alloca() {alignment = 64 : i64} : memref<1x128xf32>
// STREAMSEQ-NEXT: scf.forall
// CHECK-LABEL: func.func @centred_rows
// CHECK-NOT: memref.alloca
// CHECK-NOT: nontemporal
func.func @centred_rows(%arg0: memref<16x128xf32>, %arg1: memref<16x128xf32>) {
  %c0 = arith.constant 0 : index
  %c32 = arith.constant 32 : index
  %c128 = arith.constant 128 : index
  %pad = arith.constant 0.0 : f32
  %zero = arith.constant dense<0.0> : vector<32xf32>
  %mean = arith.constant dense<0.5> : vector<32xf32>
  scf.forall (%i) in (16) {
    %row = memref.subview %arg1[%i, 0] [1, 128] [1, 1] : memref<16x128xf32> to memref<1x128xf32, strided<[128, 1], offset: ?>>
    scf.for %k = %c0 to %c128 step %c32 {
      %v = vector.transfer_read %arg0[%i, %k], %pad {in_bounds = [true]} : memref<16x128xf32>, vector<32xf32>
      %d = arith.subf %v, %mean : vector<32xf32>
      vector.transfer_write %d, %row[%c0, %k] {in_bounds = [true]} : vector<32xf32>, memref<1x128xf32, strided<[128, 1], offset: ?>>
    }
    %ss = scf.for %k = %c0 to %c128 step %c32 iter_args(%acc = %zero) -> (vector<32xf32>) {
      %d = vector.transfer_read %row[%c0, %k], %pad {in_bounds = [true]} : memref<1x128xf32, strided<[128, 1], offset: ?>>, vector<32xf32>
      %sq = arith.mulf %d, %d : vector<32xf32>
      %a = arith.addf %sq, %acc : vector<32xf32>
      scf.yield %a : vector<32xf32>
    }
    %t = vector.reduction <add>, %ss : vector<32xf32> into f32
    %r = vector.broadcast %t : f32 to vector<32xf32>
    scf.for %k = %c0 to %c128 step %c32 {
      %d = vector.transfer_read %row[%c0, %k], %pad {in_bounds = [true]} : memref<1x128xf32, strided<[128, 1], offset: ?>>, vector<32xf32>
      %y = arith.mulf %d, %r : vector<32xf32>
      vector.transfer_write %y, %row[%c0, %k] {in_bounds = [true]} : vector<32xf32>, memref<1x128xf32, strided<[128, 1], offset: ?>>
    }
  }
  return
}

// -----

// The row's first pass reads the output's row (its old contents count): left as it is.
// STREAM-LABEL: func.func @reads_its_output_first
// STREAM-NOT: memref.alloca
// STREAM-NOT: nontemporal
// STREAM: return
func.func @reads_its_output_first(%arg0: memref<16x128xf32>, %arg1: memref<16x128xf32>) {
  %c0 = arith.constant 0 : index
  %c32 = arith.constant 32 : index
  %c128 = arith.constant 128 : index
  %pad = arith.constant 0.0 : f32
  scf.forall (%i) in (16) {
    %row = memref.subview %arg1[%i, 0] [1, 128] [1, 1] : memref<16x128xf32> to memref<1x128xf32, strided<[128, 1], offset: ?>>
    scf.for %k = %c0 to %c128 step %c32 {
      %o = vector.transfer_read %row[%c0, %k], %pad {in_bounds = [true]} : memref<1x128xf32, strided<[128, 1], offset: ?>>, vector<32xf32>
      %v = vector.transfer_read %arg0[%i, %k], %pad {in_bounds = [true]} : memref<16x128xf32>, vector<32xf32>
      %d = arith.addf %v, %o : vector<32xf32>
      vector.transfer_write %d, %row[%c0, %k] {in_bounds = [true]} : vector<32xf32>, memref<1x128xf32, strided<[128, 1], offset: ?>>
    }
    scf.for %k = %c0 to %c128 step %c32 {
      %d = vector.transfer_read %row[%c0, %k], %pad {in_bounds = [true]} : memref<1x128xf32, strided<[128, 1], offset: ?>>, vector<32xf32>
      %y = arith.mulf %d, %d : vector<32xf32>
      vector.transfer_write %y, %row[%c0, %k] {in_bounds = [true]} : vector<32xf32>, memref<1x128xf32, strided<[128, 1], offset: ?>>
    }
  }
  return
}
