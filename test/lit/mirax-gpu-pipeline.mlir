// RUN: %mirax-opt %s -split-input-file --mirax-gpu-pipeline="stage=gpu" | FileCheck %s --check-prefix=GPU
// RUN: %mirax-opt %s -split-input-file --mirax-gpu-pipeline | FileCheck %s --check-prefix=SPIRV

// Softmax is one kernel: one workgroup per row, the partial maxima and sums in
// workgroup memory (address space 3) with barriers between the phases; a thread's
// running partial in a private variable during its loop (mirax-gpu-private-partials,
// which also drops the barrier that then orders only the thread's own slot),
// each set of partials folded in a tree (mirax-gpu-tree-reductions: 8 rounds of
// halving, not a 256-step loop in every thread).
// GPU-LABEL: func.func @softmax
// GPU-COUNT-1: gpu.launch_func @softmax_kernel::@softmax_kernel blocks in (%{{.+}}, %{{.+}}, %{{.+}}) threads in (%c256
// GPU-NOT: gpu.launch_func
// GPU: gpu.module @softmax_kernel
// GPU: gpu.func @softmax_kernel({{.*}}) kernel
// GPU: %[[PARTIALS:.+]] = memref.alloc() {{.*}}: memref<1x256xf32, 3>
// GPU: memref.store %{{.+}}, %[[PARTIALS]][%c0, %thread_id_x]
// GPU-NOT: gpu.barrier
// GPU: %[[REG:.+]] = memref.alloca() : memref<1xf32, 6>
// GPU: memref.load %[[PARTIALS]]
// GPU: memref.store %{{.+}}, %[[REG]]
// GPU: scf.for
// GPU-NOT: %[[PARTIALS]][
// GPU: arith.maximumf
// GPU: memref.store %{{.+}}, %[[REG]]
// GPU-NEXT: }
// GPU-NEXT: %[[LAST:.+]] = memref.load %[[REG]]
// GPU-NEXT: memref.store %[[LAST]], %[[PARTIALS]]
// GPU-NEXT: gpu.barrier
// GPU-NOT: to %c256 step %c1
// GPU: %[[TID:.+]] = gpu.thread_id x
// GPU-NEXT: %[[HALF:.+]] = arith.cmpi ult, %[[TID]], %c128
// GPU-NEXT: scf.if %[[HALF]]
// GPU: arith.maximumf
// GPU: gpu.barrier
// GPU: arith.cmpi ult, %[[TID]], %c64
// GPU: arith.cmpi ult, %[[TID]], %c1
// GPU: arith.maximumf
// GPU: gpu.barrier
// GPU: math.fma
// GPU: arith.cmpi ult, %{{.+}}, %c128
// GPU: arith.addf
// GPU-NOT: to %c256 step %c1
// GPU: gpu.return
// SPIRV-LABEL: spirv.module @__spv__softmax_kernel
// SPIRV: spirv.GlobalVariable {{.*}} : !spirv.ptr<!spirv.struct<(!spirv.array<256 x f32{{.*}}Workgroup>
// SPIRV: spirv.func @softmax_kernel
// SPIRV: spirv.ControlBarrier <Workgroup>, <Workgroup>, <AcquireRelease|WorkgroupMemory>
// SPIRV: spirv.GL.Fma
// SPIRV: spirv.EntryPoint "GLCompute" @softmax_kernel
// SPIRV: spirv.ExecutionMode @softmax_kernel "LocalSize", 256, 1, 1
func.func @softmax(%arg0: tensor<6x1000xf32>) -> tensor<6x1000xf32> {
  %0 = "mirax.max"(%arg0) {axes = array<i64: 1>, keepdims = true} : (tensor<6x1000xf32>) -> tensor<6x1xf32>
  %1 = "mirax.broadcast_to"(%0) {shape = array<i64: 6, 1000>} : (tensor<6x1xf32>) -> tensor<6x1000xf32>
  %2 = "mirax.subtract"(%arg0, %1) : (tensor<6x1000xf32>, tensor<6x1000xf32>) -> tensor<6x1000xf32>
  %3 = "mirax.exp"(%2) : (tensor<6x1000xf32>) -> tensor<6x1000xf32>
  %4 = "mirax.sum"(%3) {axes = array<i64: 1>, keepdims = true} : (tensor<6x1000xf32>) -> tensor<6x1xf32>
  %5 = "mirax.broadcast_to"(%4) {shape = array<i64: 6, 1000>} : (tensor<6x1xf32>) -> tensor<6x1000xf32>
  %6 = "mirax.divide"(%3, %5) : (tensor<6x1000xf32>, tensor<6x1000xf32>) -> tensor<6x1000xf32>
  return %6 : tensor<6x1000xf32>
}

// -----

// Matmul: 32x32 blocks of C over the grid, 16x16 threads, the A and B tiles of each
// K step (16) copied cooperatively into workgroup memory between barriers; each thread's
// 2x2 block of C accumulates in a private array (registers) across the K loop.
// GPU-LABEL: func.func @matmul
// GPU: gpu.launch_func @matmul_kernel{{.*}} blocks in (%c3, %c2, %c1) threads in (%c16, %c16, %c1)
// GPU: gpu.func @matmul_kernel{{.*}} kernel
// GPU: %[[ACC:.+]] = memref.alloca() : memref<2x2xf32, 6>
// GPU: scf.for %{{.+}} = %c0 to %c32 step %c16
// GPU-DAG: memref<32x16xf32, 3>
// GPU-DAG: memref<16x32xf32, 3>
// GPU: gpu.barrier
// GPU: memref.load %[[ACC]]
// GPU: arith.mulf
// GPU: memref.store %{{.+}}, %[[ACC]]
// GPU: gpu.barrier
// GPU: memref.load %[[ACC]]
// GPU: memref.store %{{.+}}, %arg0
// SPIRV-LABEL: spirv.module @__spv__matmul_kernel
// SPIRV: spirv.ControlBarrier
// SPIRV: spirv.FMul
// SPIRV: spirv.ExecutionMode @matmul_kernel{{.*}} "LocalSize", 16, 16, 1
func.func @matmul(%a: tensor<64x32xf32>, %b: tensor<32x96xf32>) -> tensor<64x96xf32> {
  %0 = "mirax.matmul"(%a, %b) : (tensor<64x32xf32>, tensor<32x96xf32>) -> tensor<64x96xf32>
  return %0 : tensor<64x96xf32>
}

// -----

// Elementwise: blocks x threads sized to the array, no workgroup memory, no barrier.
// GPU-LABEL: func.func @gelu_like
// GPU: gpu.launch_func @gelu_like_kernel::@gelu_like_kernel blocks in (%c2, %c8, %c1) threads in (%c256, %c1, %c1)
// GPU-NOT: , 3>
// GPU-NOT: gpu.barrier
// SPIRV-LABEL: spirv.module @__spv__gelu_like_kernel
// SPIRV: spirv.func @gelu_like_kernel
// SPIRV: spirv.ExecutionMode @gelu_like_kernel "LocalSize", 256, 1, 1
func.func @gelu_like(%x: tensor<8x300xf32>) -> tensor<8x300xf32> {
  %0 = "mirax.tanh"(%x) : (tensor<8x300xf32>) -> tensor<8x300xf32>
  %1 = "mirax.multiply"(%0, %x) : (tensor<8x300xf32>, tensor<8x300xf32>) -> tensor<8x300xf32>
  return %1 : tensor<8x300xf32>
}
