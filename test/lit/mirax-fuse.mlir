// RUN: %mirax-opt %s -split-input-file --convert-mirax-to-linalg --mirax-fuse | FileCheck %s

// gelu as `mr.trace` writes it: the constants' broadcasts, the divisions and erf fuse
// into ONE linalg.generic that reads x once.
// CHECK-LABEL: func.func @gelu
// CHECK-SAME: (%[[X:.+]]: tensor<4x8xf32>)
// CHECK: %[[G:.+]] = linalg.generic
// CHECK-SAME: ins(%[[X]] : tensor<4x8xf32>)
// CHECK: math.erf
// CHECK: linalg.yield
// CHECK-NOT: linalg.generic
// CHECK: return %[[G]]
func.func @gelu(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = "mirax.constant"() {value = dense<2.000000e+00> : tensor<f32>} : () -> tensor<f32>
  %1 = "mirax.broadcast_to"(%0) {shape = array<i64: 4, 8>} : (tensor<f32>) -> tensor<4x8xf32>
  %2 = "mirax.constant"() {value = dense<1.41421354> : tensor<f32>} : () -> tensor<f32>
  %3 = "mirax.broadcast_to"(%2) {shape = array<i64: 4, 8>} : (tensor<f32>) -> tensor<4x8xf32>
  %4 = "mirax.divide"(%arg0, %3) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %5 = "mirax.erf"(%4) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %6 = "mirax.constant"() {value = dense<1.000000e+00> : tensor<f32>} : () -> tensor<f32>
  %7 = "mirax.broadcast_to"(%6) {shape = array<i64: 4, 8>} : (tensor<f32>) -> tensor<4x8xf32>
  %8 = "mirax.add"(%7, %5) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %9 = "mirax.multiply"(%arg0, %8) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %10 = "mirax.divide"(%9, %1) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %10 : tensor<4x8xf32>
}

// -----

// A row broadcast fuses too: x - max(x) keeps the reduction, then one generic for the
// broadcast subtraction and exp reading the row maxima through a projected map.
// CHECK-LABEL: func.func @sub_max_exp
// CHECK: linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]
// CHECK: %[[E:.+]] = linalg.generic {indexing_maps = [#{{.+}}, #{{.+}}, #{{.+}}], iterator_types = ["parallel", "parallel"]}
// CHECK: math.exp
// CHECK-NOT: linalg.generic
// CHECK: return %[[E]]
func.func @sub_max_exp(%arg0: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = "mirax.max"(%arg0) {axes = array<i64: 1>, keepdims = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %2 = "mirax.broadcast_to"(%0) {shape = array<i64: 4, 8>} : (tensor<4x1xf32>) -> tensor<4x8xf32>
  %3 = "mirax.subtract"(%arg0, %2) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = "mirax.exp"(%3) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %4 : tensor<4x8xf32>
}

// -----

// Fused bodies stay bounded (max-fused-ops; 256 by default): upstream fusion copies the
// growing body at every step, so one kernel for a chain of n ops would cost O(n^2) to
// build. Here, at most 4 body ops: the chain of six square roots (each body: sqrt + yield)
// is cut into kernels of one or two; the cut value is materialized between them.
// RUN: %mirax-opt %s -split-input-file --convert-mirax-to-linalg --mirax-fuse="max-fused-ops=4" | FileCheck %s --check-prefix=BOUND
// BOUND-LABEL: func.func @long_chain
// BOUND-COUNT-3: linalg.generic
// BOUND-NOT: linalg.generic
// BOUND-NOT: tensor.cast
// BOUND: return
func.func @long_chain(%arg0: tensor<16xf32>) -> tensor<16xf32> {
  %0 = "mirax.sqrt"(%arg0) : (tensor<16xf32>) -> tensor<16xf32>
  %1 = "mirax.sqrt"(%0) : (tensor<16xf32>) -> tensor<16xf32>
  %2 = "mirax.sqrt"(%1) : (tensor<16xf32>) -> tensor<16xf32>
  %3 = "mirax.sqrt"(%2) : (tensor<16xf32>) -> tensor<16xf32>
  %4 = "mirax.sqrt"(%3) : (tensor<16xf32>) -> tensor<16xf32>
  %5 = "mirax.sqrt"(%4) : (tensor<16xf32>) -> tensor<16xf32>
  return %5 : tensor<16xf32>
}

// -----

// mirax-math-approx runs after fusion and writes each f32 exp/log/erf/tanh out as
// ~25 ops, so the bound counts them so: at most 60 body ops holds two exps (2 x 25 + a
// yield), not three.
// RUN: %mirax-opt %s -split-input-file --convert-mirax-to-linalg --mirax-fuse="max-fused-ops=60" | FileCheck %s --check-prefix=WEIGHT
// WEIGHT-LABEL: func.func @exp_chain
// WEIGHT-COUNT-2: linalg.generic
// WEIGHT-NOT: linalg.generic
// WEIGHT: return
func.func @exp_chain(%arg0: tensor<16xf32>) -> tensor<16xf32> {
  %0 = "mirax.exp"(%arg0) : (tensor<16xf32>) -> tensor<16xf32>
  %1 = "mirax.exp"(%0) : (tensor<16xf32>) -> tensor<16xf32>
  %2 = "mirax.exp"(%1) : (tensor<16xf32>) -> tensor<16xf32>
  %3 = "mirax.exp"(%2) : (tensor<16xf32>) -> tensor<16xf32>
  return %3 : tensor<16xf32>
}

// -----

// A broadcast constant and a broadcast row vector that CSE shared between two chains:
// each elementwise user gets its own copy and fuses it, so neither broadcast is a
// tensor of its own (upstream fusion takes single-use producers only).
// CHECK-LABEL: func.func @shared_broadcasts
// CHECK-SAME: (%[[X:.+]]: tensor<4x8xf32>, %[[Y:.+]]: tensor<4x8xf32>, %[[W:.+]]: tensor<8xf32>)
// CHECK: %[[C:.+]] = arith.constant 2.0
// CHECK: %[[R0:.+]] = linalg.generic {{.*}} ins(%[[X]], %[[W]] : tensor<4x8xf32>, tensor<8xf32>)
// CHECK: arith.mulf %{{.+}}, %[[C]]
// CHECK: %[[R1:.+]] = linalg.generic {{.*}} ins(%[[Y]], %[[W]] : tensor<4x8xf32>, tensor<8xf32>)
// CHECK: arith.addf %{{.+}}, %[[C]]
// CHECK-NOT: linalg.generic
// CHECK: return %[[R0]], %[[R1]]
func.func @shared_broadcasts(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>, %w: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %c = "mirax.constant"() {value = dense<2.000000e+00> : tensor<f32>} : () -> tensor<f32>
  %b = "mirax.broadcast_to"(%c) {shape = array<i64: 4, 8>} : (tensor<f32>) -> tensor<4x8xf32>
  %wb = "mirax.broadcast_to"(%w) {shape = array<i64: 4, 8>} : (tensor<8xf32>) -> tensor<4x8xf32>
  %0 = "mirax.multiply"(%x, %b) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "mirax.add"(%0, %wb) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "mirax.add"(%y, %b) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = "mirax.multiply"(%2, %wb) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %1, %3 : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// A value both returned and read again (an optimizer's new moment, then the parameter
// update reading it) fuses into its reader, which yields it as a second result: one
// loop over the parameter instead of two.
// CHECK-LABEL: func.func @returned_and_read
// CHECK-SAME: (%[[P:.+]]: tensor<16xf32>, %[[M:.+]]: tensor<16xf32>, %[[G:.+]]: tensor<16xf32>)
// CHECK: %[[R:.+]]:2 = linalg.generic {{.*}} ins(%[[P]], %[[M]], %[[G]] : {{.*}}) outs(%{{.+}}, %{{.+}} : tensor<16xf32>, tensor<16xf32>)
// CHECK: %[[MM:.+]] = arith.mulf
// CHECK: %[[M1:.+]] = arith.addf %[[MM]]
// CHECK: %[[P1:.+]] = arith.subf %{{.+}}, %[[M1]]
// CHECK: linalg.yield %[[P1]], %[[M1]]
// CHECK-NOT: linalg.generic
// CHECK: return %[[R]]#0, %[[R]]#1
func.func @returned_and_read(%p: tensor<16xf32>, %m: tensor<16xf32>, %g: tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>) {
  %c = "mirax.constant"() {value = dense<9.000000e-01> : tensor<f32>} : () -> tensor<f32>
  %b = "mirax.broadcast_to"(%c) {shape = array<i64: 16>} : (tensor<f32>) -> tensor<16xf32>
  %0 = "mirax.multiply"(%m, %b) : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  %1 = "mirax.add"(%0, %g) : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  %2 = "mirax.subtract"(%p, %1) : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  return %2, %1 : tensor<16xf32>, tensor<16xf32>
}

// -----

// A transpose read by one elementwise op fuses into it (as a generic reading x through
// the permutation: mirax-vectorize-transposes then runs it as register blocks); of two
// transposes read by one op, only one (the other stays a transpose of its own).
// CHECK-DAG: #[[TR:.+]] = affine_map<(d0, d1) -> (d1, d0)>
// CHECK-DAG: #[[ID:.+]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @transpose_plus_one
// CHECK-NOT: linalg.transpose
// CHECK: linalg.generic {indexing_maps = [#[[TR]], #[[ID]], #[[ID]]]
// CHECK: arith.addf
// CHECK-NOT: linalg.generic
// CHECK-LABEL: func.func @two_transposes
// CHECK: linalg.transpose
// CHECK: linalg.generic {indexing_maps = [#[[TR]], #[[ID]], #[[ID]]]
func.func @transpose_plus_one(%x: tensor<64x128xf32>, %y: tensor<128x64xf32>) -> tensor<128x64xf32> {
  %t = "mirax.transpose"(%x) {permutation = array<i64: 1, 0>} : (tensor<64x128xf32>) -> tensor<128x64xf32>
  %r = "mirax.add"(%t, %y) : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<128x64xf32>
  return %r : tensor<128x64xf32>
}
func.func @two_transposes(%x: tensor<64x128xf32>, %y: tensor<64x128xf32>) -> tensor<128x64xf32> {
  %t = "mirax.transpose"(%x) {permutation = array<i64: 1, 0>} : (tensor<64x128xf32>) -> tensor<128x64xf32>
  %u = "mirax.transpose"(%y) {permutation = array<i64: 1, 0>} : (tensor<64x128xf32>) -> tensor<128x64xf32>
  %r = "mirax.add"(%t, %u) : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<128x64xf32>
  return %r : tensor<128x64xf32>
}

// -----

// ...except the transpose of `x.T @ g`, a weight's gradient: matmul_codegen computes it
// as `g.T @ x` (no transpose at all), so it stays for that (the SGD update after it would
// read the product through the permutation).
// CHECK-LABEL: func.func @gradient_update
// CHECK: linalg.transpose
// CHECK: linalg.matmul
// CHECK: linalg.transpose
// CHECK: linalg.generic
func.func @gradient_update(%x: tensor<256x64xf32>, %g: tensor<256x32xf32>, %w: tensor<32x64xf32>) -> tensor<32x64xf32> {
  %xt = "mirax.transpose"(%x) {permutation = array<i64: 1, 0>} : (tensor<256x64xf32>) -> tensor<64x256xf32>
  %p = "mirax.matmul"(%xt, %g) : (tensor<64x256xf32>, tensor<256x32xf32>) -> tensor<64x32xf32>
  %dw = "mirax.transpose"(%p) {permutation = array<i64: 1, 0>} : (tensor<64x32xf32>) -> tensor<32x64xf32>
  %r = "mirax.subtract"(%w, %dw) : (tensor<32x64xf32>, tensor<32x64xf32>) -> tensor<32x64xf32>
  return %r : tensor<32x64xf32>
}

// -----

// max-buffers bounds the tensors one fused generic reads and writes (a GPU kernel's
// buffer bindings: Metal's 31, lavapipe's 32; past the limit a Vulkan driver may crash):
// at most 4 here, so the product of six inputs is three generics of three inputs or fewer.
// RUN: %mirax-opt %s -split-input-file --convert-mirax-to-linalg --mirax-fuse="max-buffers=4" | FileCheck %s --check-prefix=BUFFERS
// BUFFERS-LABEL: func.func @many_inputs
// BUFFERS: linalg.generic {{.*}} ins(%arg0, %arg1, %arg2 :
// BUFFERS: linalg.generic {{.*}} ins(%{{.+}}, %arg3, %arg4 :
// BUFFERS: linalg.generic {{.*}} ins(%{{.+}}, %arg5 :
// BUFFERS-NOT: linalg.generic
// BUFFERS: return
func.func @many_inputs(%a: tensor<16xf32>, %b: tensor<16xf32>, %c: tensor<16xf32>, %d: tensor<16xf32>, %e: tensor<16xf32>, %f: tensor<16xf32>) -> tensor<16xf32> {
  %0 = "mirax.multiply"(%a, %b) : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  %1 = "mirax.multiply"(%0, %c) : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  %2 = "mirax.multiply"(%1, %d) : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  %3 = "mirax.multiply"(%2, %e) : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  %4 = "mirax.multiply"(%3, %f) : (tensor<16xf32>, tensor<16xf32>) -> tensor<16xf32>
  return %4 : tensor<16xf32>
}
