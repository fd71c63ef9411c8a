// RUN: %mirax-opt %s --mirax-outline-kernels="min-ops=1 chunk-ops=6" | FileCheck %s
// RUN: %mirax-opt %s --mirax-outline-kernels | FileCheck %s --check-prefix=SMALL
// RUN: %mirax-opt %s --mirax-outline-kernels="min-ops=1 chunk-ops=6" --convert-scf-to-cf --convert-math-to-llvm --finalize-memref-to-llvm --convert-arith-to-llvm --convert-cf-to-llvm --convert-func-to-llvm --reconcile-unrealized-casts | FileCheck %s --check-prefix=LLVM

// A function of three loop nests (after bufferization) split into parts of about
// chunk-ops nested ops: each part is a private noinline function, called in order.
// Values a part reads are its arguments; a value later parts read (the alloc) is a
// result; constants are cloned into each part that uses them.
// CHECK-LABEL: func.func @f(
// CHECK-SAME: %[[A:.+]]: memref<8xf32>, %[[B:.+]]: memref<8xf32>)
// CHECK: %[[T:.+]] = call @f_part0(%[[A]]) : (memref<8xf32>) -> memref<8xf32>
// CHECK: call @f_part1(%[[T]], %[[B]])
// CHECK-NOT: scf.for
// CHECK: return
// CHECK: func.func private @f_part0(%[[A0:.+]]: memref<8xf32>) -> memref<8xf32> attributes {passthrough = ["noinline"]}
// CHECK-DAG: arith.constant 0 : index
// CHECK-DAG: %[[T0:.+]] = memref.alloc
// CHECK: scf.for
// CHECK: memref.load %[[A0]]
// CHECK: memref.store %{{.+}}, %[[T0]]
// CHECK: return %[[T0]] : memref<8xf32>
// CHECK: func.func private @f_part1(%[[T1:.+]]: memref<8xf32>, %[[B1:.+]]: memref<8xf32>) attributes {passthrough = ["noinline"]}
// CHECK: scf.for
// CHECK: memref.load %[[T1]]
// CHECK: scf.for
// CHECK: return

// Below min-ops (4000 by default) a function stays whole.
// SMALL-LABEL: func.func @f(
// SMALL-NOT: call
// SMALL-COUNT-3: scf.for
// SMALL-NOT: func.func private

// The parts stay separate functions in LLVM (noinline): LLVM optimizes each alone.
// LLVM: llvm.func @f_part0({{.*}} attributes {passthrough = ["noinline"]
// LLVM: llvm.func @f_part1({{.*}} attributes {passthrough = ["noinline"]
func.func @f(%a: memref<8xf32>, %b: memref<8xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %t = memref.alloc() : memref<8xf32>
  scf.for %i = %c0 to %c8 step %c1 {
    %x = memref.load %a[%i] : memref<8xf32>
    %y = math.exp %x : f32
    %z = arith.addf %y, %x : f32
    memref.store %z, %t[%i] : memref<8xf32>
  }
  scf.for %i = %c0 to %c8 step %c1 {
    %x = memref.load %t[%i] : memref<8xf32>
    %y = math.sin %x : f32
    memref.store %y, %b[%i] : memref<8xf32>
  }
  scf.for %i = %c0 to %c8 step %c1 {
    %x = memref.load %b[%i] : memref<8xf32>
    %y = arith.mulf %x, %x : f32
    memref.store %y, %b[%i] : memref<8xf32>
  }
  return
}
