// RUN: mirax-opt %s -split-input-file --mirax-streaming-stores="min-bytes=1024 min-constants=0 line=64 vector-bytes=64 prefetch-bytes=256" | FileCheck %s
// RUN: mirax-opt %s -split-input-file --mirax-streaming-stores="min-bytes=1024 min-constants=0 line=64 vector-bytes=64 prefetch-bytes=0" | FileCheck %s --check-prefix=NOPF
// RUN: mirax-opt %s --mirax-streaming-stores="min-bytes=1024 min-constants=0 line=64 vector-bytes=64" --mirax-cpu-pipeline="threads=1 stream-bytes=-1" | FileCheck %s --check-prefix=LLVM
// RUN: mirax-opt %s -split-input-file --mirax-streaming-stores="min-bytes=1024 min-constants=3 line=64 vector-bytes=64" | FileCheck %s --check-prefix=SMALL
// RUN: mirax-opt %s -split-input-file --mirax-streaming-stores="min-bytes=1024 min-constants=0 line=64 vector-bytes=32" | FileCheck %s --check-prefix=REG

// A large elementwise op: flattened, a masked head up to the output's first 64-byte
// boundary, a body of aligned non-temporal stores of one cache line (backward when the
// input's page offset is a little behind the output's: 4K aliasing), a masked tail.
// CHECK-LABEL: func.func @large
// CHECK-DAG:     %[[X:.+]] = memref.collapse_shape %{{.+}} {{\[}}[0, 1]] : memref<16x37xf32> into memref<592xf32>
// CHECK-DAG:     %[[Y:.+]] = memref.collapse_shape %{{.+}} {{\[}}[0, 1]] : memref<16x37xf32, strided<[37, 1], offset: ?>> into memref<592xf32, strided<[1], offset: ?>>
// CHECK-DAG:     %[[S:.+]] = vector.broadcast %{{.+}} : f32 to vector<16xf32>
// CHECK:         %[[P:.+]] = memref.extract_aligned_pointer_as_index %[[Y]]
// CHECK:         %[[HEAD:.+]] = arith.select
// CHECK:         %[[END:.+]] = arith.addi %[[HEAD]]
// CHECK:         scf.for %[[I:.+]] = %{{.+}} to %[[HEAD]] step %[[C16:.+]] {
// CHECK:           %[[M:.+]] = vector.create_mask %{{.+}} : vector<16xi1>
// CHECK:           vector.maskedload %[[X]][%[[I]]], %[[M]]
// CHECK:           arith.mulf %{{.+}}, %[[S]] : vector<16xf32>
// CHECK:           vector.maskedstore %[[Y]][%[[I]]], %[[M]]
// CHECK:         memref.extract_aligned_pointer_as_index %[[X]]
// CHECK:         %[[NOTAHEAD:.+]] = arith.xori
// CHECK-NEXT:    %[[BACK:.+]] = arith.andi %{{.+}}, %[[NOTAHEAD]] : i1
// CHECK:         %[[SPAN:.+]] = arith.subi %[[END]], %[[HEAD]] : index
// CHECK:         %[[LAST:.+]] = arith.subi %{{.+}}, %[[C16]] : index
// The direction is chosen once, outside the loops. Each direction's loop prefetches the
// input into L1 256 bytes (64 elements) ahead of its direction until that far from its
// end, then a second loop finishes without prefetching: no index to clamp an iteration.
// CHECK:         scf.if %[[BACK]] {
// CHECK:           %[[FAR:.+]] = arith.minui %[[SPAN]], %[[C64:.+]] : index
// CHECK:           %[[SPLIT:.+]] = arith.subi %[[END]], %[[FAR]] : index
// CHECK:           scf.for %[[K:.+]] = %[[HEAD]] to %[[SPLIT]] step %[[C16]] {
// CHECK:             %[[J:.+]] = arith.subi %[[LAST]], %[[K]] : index
// CHECK:             %[[BEHIND:.+]] = arith.subi %[[J]], %[[C64]] : index
// CHECK:             memref.prefetch %[[X]][%[[BEHIND]]], read, locality<3>, data : memref<592xf32>
// CHECK:             vector.load %[[X]][%[[J]]] : memref<592xf32>, vector<16xf32>
// CHECK:             vector.store %{{.+}}, %[[Y]][%[[J]]] {alignment = 64 : i64, nontemporal = true}
// CHECK:           } {mirax.streamed}
// CHECK:           scf.for %[[K2:.+]] = %[[SPLIT]] to %[[END]] step %[[C16]] {
// CHECK:             %[[J2:.+]] = arith.subi %[[LAST]], %[[K2]] : index
// CHECK-NOT:         memref.prefetch
// CHECK:             vector.store %{{.+}}, %[[Y]][%[[J2]]] {alignment = 64 : i64, nontemporal = true}
// CHECK:           } {mirax.streamed}
// CHECK:         } else {
// CHECK:           %[[FAR2:.+]] = arith.minui %[[SPAN]], %[[C64]] : index
// CHECK:           %[[SPLIT2:.+]] = arith.subi %[[END]], %[[FAR2]] : index
// CHECK:           scf.for %[[I:.+]] = %[[HEAD]] to %[[SPLIT2]] step %[[C16]] {
// CHECK:             %[[AHEAD:.+]] = arith.addi %[[I]], %[[C64]] : index
// CHECK:             memref.prefetch %[[X]][%[[AHEAD]]], read, locality<3>, data : memref<592xf32>
// CHECK:             %[[V:.+]] = vector.load %[[X]][%[[I]]] : memref<592xf32>, vector<16xf32>
// CHECK:             %[[C:.+]] = arith.cmpf olt, %{{.+}}, %[[V]] : vector<16xf32>
// CHECK:             %[[R:.+]] = arith.select %[[C]], %{{.+}}, %[[V]] : vector<16xi1>, vector<16xf32>
// CHECK:             vector.store %[[R]], %[[Y]][%[[I]]] {alignment = 64 : i64, nontemporal = true}
// CHECK:           } {mirax.streamed}
// CHECK:           scf.for %{{.+}} = %[[SPLIT2]] to %[[END]] step %[[C16]] {
// CHECK-NOT:         memref.prefetch
// CHECK:             vector.store
// CHECK:           } {mirax.streamed}
// CHECK:         }
// CHECK:         scf.for %{{.+}} = %[[END]] to %{{.+}} step %[[C16]] {
// CHECK:           vector.maskedstore %[[Y]]
// CHECK-NOT:     linalg.generic
// One register an iteration (x86 without AVX-512: tuning.py's loop_vector_bytes): the
// head still runs to a line boundary, the body steps 8 f32, each store aligned to 32.
// REG-LABEL: func.func @large
// REG:         %[[HEAD:.+]] = arith.select
// REG:         scf.for %{{.+}} = %{{.+}} to %[[HEAD]] step %[[C8:.+]] {
// REG:           vector.create_mask %{{.+}} : vector<8xi1>
// REG:         scf.for %{{.+}} = %[[HEAD]] to %{{.+}} step %[[C8]] {
// REG:           vector.load %{{.+}} : memref<592xf32>, vector<8xf32>
// REG:           vector.store %{{.+}} {alignment = 32 : i64, nontemporal = true} : memref<592xf32, strided<[1], offset: ?>>, vector<8xf32>
// REG:         scf.for %{{.+}} step %[[C8]] {
// REG:           vector.maskedstore
// LLVM-LABEL: llvm.func @large
// LLVM:         llvm.store %{{.+}}, %{{.+}} {alignment = 64 : i64, nontemporal} : vector<16xf32>, !llvm.ptr
// LLVM:         llvm.intr.masked.store
#map = affine_map<(d0, d1) -> (d0, d1)>
func.func @large(%x: memref<16x37xf32>, %y: memref<16x37xf32, strided<[37, 1], offset: ?>>, %s: f32) {
  linalg.generic {indexing_maps = [#map, #map], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<16x37xf32>) outs(%y : memref<16x37xf32, strided<[37, 1], offset: ?>>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.mulf %in, %s : f32
    %1 = arith.cmpf olt, %0, %in : f32
    %2 = arith.select %1, %0, %in : f32
    linalg.yield %2 : f32
  }
  return
}

// -----

// Two outputs, a 0-d input (loaded once, broadcast) and an output read by the body;
// f64: a cache line holds 8.
// NOPF-LABEL: func.func @large
// NOPF-NOT: memref.prefetch
// CHECK-LABEL: func.func @two_outputs
// CHECK:         %[[S:.+]] = memref.load %{{.+}}[] : memref<f64>
// CHECK:         vector.broadcast %[[S]] : f64 to vector<8xf64>
// CHECK:         scf.for
// CHECK:         scf.for
// CHECK:           vector.load %{{.+}} : memref<256xf64>, vector<8xf64>
// CHECK:           vector.load %{{.+}} : memref<256xf64>, vector<8xf64>
// CHECK:           vector.store {{.+}} {alignment = 64 : i64, nontemporal = true} : memref<256xf64>, vector<8xf64>
// CHECK:           vector.store {{.+}} {alignment = 64 : i64, nontemporal = true} : memref<256xf64>, vector<8xf64>
#id = affine_map<(d0) -> (d0)>
#scalar = affine_map<(d0) -> ()>
func.func @two_outputs(%x: memref<256xf64>, %s: memref<f64>, %y: memref<256xf64>, %z: memref<256xf64>) {
  linalg.generic {indexing_maps = [#id, #scalar, #id, #id], iterator_types = ["parallel"]}
      ins(%x, %s : memref<256xf64>, memref<f64>) outs(%y, %z : memref<256xf64>, memref<256xf64>) {
  ^bb0(%a: f64, %b: f64, %c: f64, %d: f64):
    %0 = arith.addf %a, %b : f64
    %1 = arith.addf %a, %c : f64
    linalg.yield %0, %1 : f64, f64
  }
  return
}

// -----

// Left alone: an output below min-bytes, a reduction, a transposed read, linalg.index,
// a strided (non-contiguous) output.
// CHECK-LABEL: func.func @left_alone
// CHECK-COUNT-5: linalg.generic
// CHECK-NOT:     nontemporal
#id2 = affine_map<(d0, d1) -> (d0, d1)>
#tr = affine_map<(d0, d1) -> (d1, d0)>
#row = affine_map<(d0, d1) -> (d0)>
func.func @left_alone(%small: memref<8x8xf32>, %x: memref<64x64xf32>, %y: memref<64x64xf32>,
                      %r: memref<64xf32>, %i: memref<64x64xi32>, %g: memref<64x64xf32, strided<[128, 1]>>) {
  linalg.generic {indexing_maps = [#id2], iterator_types = ["parallel", "parallel"]} outs(%small : memref<8x8xf32>) {
  ^bb0(%o: f32):
    %0 = arith.addf %o, %o : f32
    linalg.yield %0 : f32
  }
  linalg.generic {indexing_maps = [#id2, #row], iterator_types = ["parallel", "reduction"]}
      ins(%x : memref<64x64xf32>) outs(%r : memref<64xf32>) {
  ^bb0(%a: f32, %o: f32):
    %0 = arith.addf %a, %o : f32
    linalg.yield %0 : f32
  }
  linalg.generic {indexing_maps = [#tr, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<64x64xf32>) outs(%y : memref<64x64xf32>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  }
  linalg.generic {indexing_maps = [#id2], iterator_types = ["parallel", "parallel"]} outs(%i : memref<64x64xi32>) {
  ^bb0(%o: i32):
    %0 = linalg.index 0 : index
    %1 = arith.index_cast %0 : index to i32
    linalg.yield %1 : i32
  }
  linalg.generic {indexing_maps = [#id2, #id2], iterator_types = ["parallel", "parallel"]}
      ins(%x : memref<64x64xf32>) outs(%g : memref<64x64xf32, strided<[128, 1]>>) {
  ^bb0(%a: f32, %o: f32):
    linalg.yield %a : f32
  }
  return
}

// -----

// x86 without AVX-512 (min-constants=3 there: half its vector registers): a small op
// with at least min-constants constants gets the vector loop too, with normal stores (so
// that mirax-pin-constants keeps them out of it) and no head or backward run (those serve
// the non-temporal stores), then its masked tail; one with fewer is left to LLVM.
// CHECK-LABEL: func.func @pinned
// CHECK:         nontemporal
// CHECK-COUNT-2: linalg.generic
// SMALL-LABEL: func.func @pinned
// SMALL:         scf.for
// SMALL:         scf.for
// SMALL:           vector.store {{.+}} {alignment = 64 : i64, nontemporal = true}
// SMALL:         scf.for
// SMALL-NOT:     memref.extract_aligned_pointer_as_index
// SMALL:         scf.for %{{.+}} = %c0{{.*}} to
// SMALL:           math.fma %{{.+}} : vector<16xf32>
// SMALL-NOT:       nontemporal
// SMALL:           vector.store
// SMALL:         scf.for
// SMALL-NEXT:      arith.subi
// SMALL:           vector.maskedstore
// SMALL:         linalg.generic
// SMALL:           arith.mulf %{{.+}} : f32
// SMALL:         return
#id3 = affine_map<(d0) -> (d0)>
func.func @pinned(%x: memref<512xf32>, %y: memref<512xf32>, %a: memref<64xf32>, %b: memref<64xf32>,
                  %c: memref<64xf32>) {
  %q = arith.constant 0.25 : f32
  linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel"]}
      ins(%x : memref<512xf32>) outs(%y : memref<512xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.mulf %in, %q : f32
    linalg.yield %0 : f32
  }
  linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel"]}
      ins(%a : memref<64xf32>) outs(%b : memref<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %k1 = arith.constant 1.5 : f32
    %k2 = arith.constant 3.0 : f32
    %0 = math.fma %in, %k1, %k2 : f32
    %1 = arith.mulf %0, %q : f32
    linalg.yield %1 : f32
  }
  linalg.generic {indexing_maps = [#id3, #id3], iterator_types = ["parallel"]}
      ins(%a : memref<64xf32>) outs(%c : memref<64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %0 = arith.mulf %in, %q : f32
    linalg.yield %0 : f32
  }
  return
}
