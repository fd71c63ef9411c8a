// RUN: %mirax-opt %s --mirax-gpu-pipeline | FileCheck %s

// bfloat16 on the GPU: SPIR-V has no bfloat16 type, so its buffers hold i16 (the same
// bits), a loaded value widens to f32 by a 16-bit shift, the arithmetic is f32's, and
// the result rounds to nearest even in integer ops (NaN kept a NaN) before an i16 store.
// CHECK-LABEL: spirv.func @bf_mul_kernel
// CHECK-NOT: bf16
// CHECK: %[[A:.+]] = spirv.Load "StorageBuffer" %{{.+}} : i16
// CHECK: %[[AW:.+]] = spirv.UConvert %[[A]] : i16 to i32
// CHECK: %[[AS:.+]] = spirv.ShiftLeftLogical %[[AW]], %{{.+}} : i32, i32
// CHECK: %[[AF:.+]] = spirv.Bitcast %[[AS]] : i32 to f32
// CHECK: %[[BF:.+]] = spirv.Bitcast %{{.+}} : i32 to f32
// CHECK: %[[P:.+]] = spirv.FMul %[[AF]], %[[BF]] : f32
// CHECK: %[[PB:.+]] = spirv.Bitcast %[[P]] : f32 to i32
// CHECK: spirv.IAdd %[[PB]], %{{.+}} : i32
// CHECK: %[[H:.+]] = spirv.SConvert %{{.+}} : i32 to i16
// CHECK: %[[R:.+]] = spirv.Select %{{.+}}, %{{.+}}, %[[H]] : i1, i16
// CHECK: spirv.Store "StorageBuffer" %{{.+}}, %[[R]] : i16
// CHECK-NOT: bf16
func.func @bf_mul(%x: tensor<64xbf16>, %y: tensor<64xbf16>) -> tensor<64xbf16> {
  %0 = "mirax.multiply"(%x, %y) : (tensor<64xbf16>, tensor<64xbf16>) -> tensor<64xbf16>
  return %0 : tensor<64xbf16>
}
