// RUN: %mirax-translate --mirax-to-spirv %s -o %t.spv
// RUN: spirv-val --target-env vulkan1.1 %t.spv
// RUN: spirv-dis %t.spv | FileCheck %s

// The SPIR-V binary of a row-reduction kernel: a compute entry point with a 256-wide
// workgroup, a Workgroup-storage array for the partial sums and a control barrier.
// CHECK: OpCapability Shader
// CHECK: OpEntryPoint GLCompute %{{.+}} "rowsum_kernel"
// CHECK: OpExecutionMode %{{.+}} LocalSize 256 1 1
// CHECK: OpTypePointer Workgroup
// CHECK: OpControlBarrier
func.func @rowsum(%x: tensor<4x1000xf32>) -> tensor<4xf32> {
  %0 = "mirax.sum"(%x) {axes = array<i64: 1>, keepdims = false} : (tensor<4x1000xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}
