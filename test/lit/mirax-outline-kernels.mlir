// RUN: %mirax-opt %s --mirax-outline-kernels="min-ops=1" | FileCheck %s
// RUN: %mirax-opt %s --mirax-outline-kernels | FileCheck %s --check-prefix=SMALL
// RUN: %mirax-opt %s --mirax-outline-kernels="min-ops=1 c-interface=false" | FileCheck %s --check-prefix=NOCI
// RUN: %mirax-opt %s --mirax-outline-kernels="min-ops=1" --convert-scf-to-cf --convert-math-to-llvm --expand-strided-metadata --finalize-memref-to-llvm --convert-arith-to-llvm --convert-cf-to-llvm --convert-func-to-llvm --reconcile-unrealized-casts | FileCheck %s --check-prefix=LLVM

// A function of four loop nests (after bufferization): each nest moves into a private
// noinline function; allocations and deallocations stay. A memref of static layout is
// passed as its aligned pointer and rebuilt in the part; constants are cloned in. The
// fourth nest is the third on another buffer of the same type: one function serves both.
// The function had a C interface: it becomes _mlir_ciface_f itself, loading its
// descriptors from the pointers it is given.
// CHECK-LABEL: func.func @_mlir_ciface_f(
// CHECK-SAME: %[[PA:.+]]: !llvm.ptr, %[[PB:.+]]: !llvm.ptr)
// CHECK: %[[DA:.+]] = llvm.load %[[PA]] : !llvm.ptr -> !llvm.struct<(ptr, ptr, i64, array<1 x i64>, array<1 x i64>)>
// CHECK: %[[A:.+]] = builtin.unrealized_conversion_cast %[[DA]] {{.*}} to memref<8xf32>
// CHECK: %[[T:.+]] = memref.alloc() : memref<8xf32>
// CHECK: memref.extract_aligned_pointer_as_index %[[A]]
// CHECK: %[[AP:.+]] = llvm.inttoptr
// CHECK: memref.extract_aligned_pointer_as_index %[[T]]
// CHECK: %[[TP:.+]] = llvm.inttoptr
// CHECK: call @f_part0(%[[AP]], %[[TP]]) : (!llvm.ptr, !llvm.ptr) -> ()
// CHECK: %[[BP:.+]] = llvm.inttoptr
// CHECK: call @f_part1(%[[TP]], %[[BP]])
// CHECK: call @f_part2(%[[BP]])
// CHECK: call @f_part2(%[[TP]])
// CHECK-NOT: scf.for
// CHECK: memref.dealloc %[[T]]
// CHECK: return
// CHECK: func.func private @f_part0(%[[P0:.+]]: !llvm.ptr, %[[P1:.+]]: !llvm.ptr) attributes {passthrough = ["noinline"]}
// CHECK: llvm.insertvalue %[[P0]], %{{.+}}[1]
// CHECK: %[[M0:.+]] = builtin.unrealized_conversion_cast {{.*}} to memref<8xf32>
// CHECK: %[[M1:.+]] = builtin.unrealized_conversion_cast {{.*}} to memref<8xf32>
// CHECK-DAG: arith.constant 0 : index
// CHECK: scf.for
// CHECK: memref.load %[[M0]]
// CHECK: math.exp
// CHECK: memref.store %{{.+}}, %[[M1]]
// CHECK: func.func private @f_part1(
// CHECK: math.sin
// CHECK: func.func private @f_part2(%{{.+}}: !llvm.ptr)
// CHECK: arith.mulf
// CHECK-NOT: func.func

// Below min-ops (1000 by default) a function stays whole.
// SMALL-LABEL: func.func @f(
// SMALL-NOT: call
// SMALL-COUNT-4: scf.for
// SMALL-NOT: func.func private

// Without the C-interface rewrite the function keeps its name and signature.
// NOCI-LABEL: func.func @f(%{{.+}}: memref<8xf32>, %{{.+}}: memref<8xf32>) attributes {llvm.emit_c_interface}
// NOCI: call @f_part0

// Lowered to the LLVM dialect, the parts stay separate functions (noinline) and no
// call passes a descriptor.
// LLVM: llvm.func @_mlir_ciface_f(%{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr)
// LLVM: llvm.call @f_part0(%{{[0-9]+}}, %{{[0-9]+}}) : (!llvm.ptr, !llvm.ptr) -> ()
// LLVM: llvm.func @f_part0(%{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr) attributes {passthrough = ["noinline"]
// LLVM: llvm.func @f_part2(%{{.+}}: !llvm.ptr) attributes {passthrough = ["noinline"]
func.func @f(%a: memref<8xf32>, %b: memref<8xf32>) attributes {llvm.emit_c_interface} {
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
  scf.for %i = %c0 to %c8 step %c1 {
    %x = memref.load %t[%i] : memref<8xf32>
    %y = arith.mulf %x, %x : f32
    memref.store %y, %t[%i] : memref<8xf32>
  }
  memref.dealloc %t : memref<8xf32>
  return
}
