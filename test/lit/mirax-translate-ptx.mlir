// RUN: %mirax-translate --mirax-to-ptx --func=scale %s | FileCheck %s --check-prefix=ELEM
// RUN: %mirax-translate --mirax-to-ptx --func=rowsum %s | FileCheck %s --check-prefix=ROW
// RUN: %mirax-translate --mirax-to-ptx --func=matmul --chip=sm_90 %s | FileCheck %s --check-prefix=MM
// RUN: %mirax-translate --mirax-to-ptx --func=rowsum %s | FileCheck %s --check-prefix=NOMALLOC

// Workgroup buffers are .shared arrays (attributions of the gpu.func), never a device malloc.
// NOMALLOC-NOT: malloc
// NOMALLOC: .visible .entry
// NOMALLOC-NOT: malloc

// NVIDIA PTX from the same gpu kernels, through upstream's NVVM passes in-process.

// ELEM: // kernel scale_kernel: entry scale_kernel, block (256, 1, 1)
// ELEM: .target sm_80
// ELEM: .visible .entry scale_kernel(
// ELEM: ld.global
// ELEM: st.global
// ELEM-NOT: bar.sync
// ELEM-NOT: malloc
func.func @scale(%x: tensor<8x300xf32>) -> tensor<8x300xf32> {
  %0 = "mirax.add"(%x, %x) : (tensor<8x300xf32>, tensor<8x300xf32>) -> tensor<8x300xf32>
  return %0 : tensor<8x300xf32>
}

// A row reduction: partial sums in shared memory, barriers between the phases.
// ROW: .visible .entry rowsum_kernel(
// ROW: .shared .align {{[0-9]+}} .b8 __wg_rowsum_kernel_{{[0-9]+}}[1024];
// ROW: st.shared
// ROW: bar.sync 0;
// ROW: ld.shared
func.func @rowsum(%x: tensor<4x1000xf32>) -> tensor<4xf32> {
  %0 = "mirax.sum"(%x) {axes = array<i64: 1>, keepdims = false} : (tensor<4x1000xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// The tiled matmul: A and B tiles in shared memory (32x16 and 16x32 floats), barriers,
// the 2x2 block of C in registers (no global loads in the K loop besides the tiles).
// MM: // kernel matmul_kernel: entry matmul_kernel, block (16, 16, 1)
// MM: .target sm_90
// MM: .visible .entry matmul_kernel(
// MM-NEXT: .param .u64 .ptr .align 1 matmul_kernel_param_0,
// MM-NEXT: .param .u64 .ptr .align 1 matmul_kernel_param_1,
// MM-NEXT: .param .u64 .ptr .align 1 matmul_kernel_param_2
// MM-NEXT: )
// MM-DAG: .shared .align {{[0-9]+}} .b8 __wg_matmul_kernel_{{[0-9]+}}[2048];
// MM-DAG: .shared .align {{[0-9]+}} .b8 __wg_matmul_kernel_{{[0-9]+}}[2048];
// MM: bar.sync 0;
// MM: ld.shared
// MM: mul.rn.f32
// MM: add.rn.f32
func.func @matmul(%a: tensor<64x32xf32>, %b: tensor<32x96xf32>) -> tensor<64x96xf32> {
  %0 = "mirax.matmul"(%a, %b) : (tensor<64x32xf32>, tensor<32x96xf32>) -> tensor<64x96xf32>
  return %0 : tensor<64x96xf32>
}
