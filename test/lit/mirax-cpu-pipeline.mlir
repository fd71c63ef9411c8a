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

// A donated argument (mirax.aliasing_output: the state a compiled step updates) holds
// the result: the C interface takes the two inputs and no out-parameter.
// CHECK-LABEL: llvm.func @_mlir_ciface_donated
// CHECK-SAME: (%{{[^:]+}}: !llvm.ptr {mirax.donated = 0 : i64}, %{{[^:]+}}: !llvm.ptr) attributes
// CHECK: llvm.call @donated
func.func @donated(%w: tensor<8xf32> {mirax.aliasing_output = 0 : i64}, %g: tensor<8xf32>) -> tensor<8xf32> attributes {llvm.emit_c_interface} {
  %0 = "mirax.multiply"(%g, %g) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %1 = "mirax.subtract"(%w, %0) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %1 : tensor<8xf32>
}
