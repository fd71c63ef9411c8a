// RUN: %mirax-opt %s --mirax-gpu-pipeline="exact-floats=1" | FileCheck %s --check-prefix=EXACT
// RUN: %mirax-opt %s --mirax-gpu-pipeline | FileCheck %s --check-prefix=PLAIN

// For Vulkan (mirax's runtime sets exact-floats): Mesa's drivers reassociate float
// arithmetic unless an op is decorated NoContraction, which undid exp's two-part ln2
// (x - m ln2_hi - m ln2_lo became x - m (ln2_hi + ln2_lo): 4e-6 relative error). Every
// float op of the kernels is decorated, and a product added once is written as an fma
// first (what the driver would have contracted). Metal keeps plain ops (SPIRV-Cross
// writes a decorated op as a call to an optnone helper; MSL runs without fast math).
// EXACT-LABEL: spirv.func @ex_kernel
// EXACT: spirv.Load "StorageBuffer"
// EXACT-NOT: spirv.{{F[A-Z][a-z]+|GL.Fma}} %{{[^{]*}}: f32
// EXACT: %[[Y:.+]] = spirv.Load "StorageBuffer" %{{.+}} : f32
// EXACT-NOT: spirv.{{F[A-Z][a-z]+|GL.Fma}} %{{[^{]*}}: f32
// EXACT: %[[R:.+]] = spirv.GL.Fma %{{.+}}, %[[Y]], %{{.+}} {no_contraction} : f32
// EXACT: spirv.Store "StorageBuffer" %{{.+}}, %[[R]] : f32
// PLAIN-LABEL: spirv.func @ex_kernel
// PLAIN-NOT: no_contraction
// PLAIN: spirv.FMul
// PLAIN: spirv.FAdd
// PLAIN: spirv.Return
func.func @ex(%x: tensor<64xf32>, %y: tensor<64xf32>) -> tensor<64xf32> {
  %0 = "mirax.exp"(%x) : (tensor<64xf32>) -> tensor<64xf32>
  %1 = "mirax.multiply"(%0, %y) : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  %2 = "mirax.add"(%1, %x) : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  return %2 : tensor<64xf32>
}
