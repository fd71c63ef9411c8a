// RUN: %mirax-translate --mirax-to-msl --func=scale %s | FileCheck %s --check-prefix=ELEM
// RUN: %mirax-translate --mirax-to-msl --func=rowsum %s | FileCheck %s --check-prefix=ROW
// RUN: %mirax-translate --mirax-to-msl --func=matmul %s | FileCheck %s --check-prefix=MM
// RUN: %mirax-translate --mirax-to-msl --func=sine %s | FileCheck %s --check-prefix=SIN

// Metal Shading Language through SPIRV-Cross, with what the runtime needs beside the
// source: the entry, the threadgroup size (MSL has no LocalSize) and the buffer map.

// An elementwise kernel: one buffer per argument, thread and threadgroup ids.
// ELEM: // kernel scale_kernel: entry scale_kernel, threadgroup (256, 1, 1), buffers [0, 1]
// ELEM: #include <metal_stdlib>
// ELEM: kernel void scale_kernel(device {{.+}} {{\[\[}}buffer(0){{\]\]}}, device {{.+}} {{\[\[}}buffer(1){{\]\]}}, uint3 gl_LocalInvocationID {{\[\[}}thread_position_in_threadgroup{{\]\]}}, uint3 gl_WorkGroupID {{\[\[}}threadgroup_position_in_grid{{\]\]}})
// ELEM-NOT: threadgroup_barrier
func.func @scale(%x: tensor<8x300xf32>) -> tensor<8x300xf32> {
  %0 = "mirax.add"(%x, %x) : (tensor<8x300xf32>, tensor<8x300xf32>) -> tensor<8x300xf32>
  return %0 : tensor<8x300xf32>
}

// A row reduction: the partial sums in threadgroup memory, barriers between the phases.
// ROW: // kernel rowsum_kernel: entry rowsum_kernel, threadgroup (256, 1, 1)
// ROW: kernel void rowsum_kernel(
// ROW: threadgroup {{.+}} _workgroup_mem_{{[0-9]+}};
// ROW: threadgroup_barrier(mem_flags::mem_threadgroup);
// ROW: threadgroup_barrier(mem_flags::mem_threadgroup);
func.func @rowsum(%x: tensor<4x1000xf32>) -> tensor<4xf32> {
  %0 = "mirax.sum"(%x) {axes = array<i64: 1>, keepdims = false} : (tensor<4x1000xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// The tiled matmul: 16x16 threads, A and B tiles in threadgroup memory, C in registers.
// MM: // kernel matmul_kernel: entry matmul_kernel, threadgroup (16, 16, 1), buffers [0, 1, 2]
// MM: kernel void matmul_kernel(
// MM-DAG: threadgroup {{.+}} _workgroup_mem_{{[0-9]+}};
// MM-DAG: threadgroup {{.+}} _workgroup_mem_{{[0-9]+}};
// MM: for (
// MM: threadgroup_barrier(mem_flags::mem_threadgroup);
// MM: [[ACC:_[0-9]+]]._m0[{{.+}}] += (_workgroup_mem_{{[0-9]+}}._m0[{{.+}}] * _workgroup_mem_{{[0-9]+}}._m0[{{.+}}]);
// MM: threadgroup_barrier(mem_flags::mem_threadgroup);
// MM: = [[ACC]]._m0[
func.func @matmul(%a: tensor<64x32xf32>, %b: tensor<32x96xf32>) -> tensor<64x96xf32> {
  %0 = "mirax.matmul"(%a, %b) : (tensor<64x32xf32>, tensor<32x96xf32>) -> tensor<64x96xf32>
  return %0 : tensor<64x96xf32>
}

// sin with its argument reduced in 32-bit integers: SPIR-V's UMulExtended is Metal's
// mulhi beside the plain product (Metal's own sin is not called).
// SIN: kernel void sine_kernel(
// SIN-COUNT-6: mulhi(
// SIN-NOT: sin(
func.func @sine(%x: tensor<64xf32>) -> tensor<64xf32> {
  %0 = "mirax.sin"(%x) : (tensor<64xf32>) -> tensor<64xf32>
  return %0 : tensor<64xf32>
}
