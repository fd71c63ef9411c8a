// RUN: %mirax-opt %s --mirax-cpu-pipeline | FileCheck %s
// RUN: %mirax-opt %s --pass-pipeline='builtin.module(mirax-cpu-pipeline)' | FileCheck %s

// The function takes its inputs, then its output as memrefs, with a C interface.
// CHECK-LABEL: llvm.func @gelu_like
// CHECK-NOT: mirax.
// CHECK-NOT: linalg.
// CHECK: llvm.return
// CHECK-LABEL: llvm.func @_mlir_ciface_gelu_like
// CHECK-SAME: (%{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr, %{{.+}}: !llvm.ptr)
// CHECK: llvm.call @gelu_like
func.func @gelu_like(%x: tensor<8xf32>, %y: tensor<8xf32>) -> tensor<8xf32> attributes {llvm.emit_c_interface} {
  %0 = "mirax.tanh"(%x) : (tensor<8xf32>) -> tensor<8xf32>
  %1 = "mirax.multiply"(%0, %y) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %2 = "mirax.add"(%1, %x) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %2 : tensor<8xf32>
}
