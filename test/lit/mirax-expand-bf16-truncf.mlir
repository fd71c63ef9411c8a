// RUN: mirax-opt %s --mirax-expand-bf16-truncf | FileCheck %s

// f32 -> bf16 truncations, scalar and vector, become integer rounding to nearest even
// (x86 without AVX512-BF16 otherwise calls the compiler runtime's __truncsfbf2, which
// the kernels cannot link); NaN gives the quiet NaN 0x7FC0. Other truncations (f32 ->
// f16) are left alone.

// CHECK-LABEL: func.func @scalar
// CHECK-SAME: (%[[X:.+]]: f32) -> bf16
// CHECK-NOT: arith.truncf
// CHECK: %[[B:.+]] = arith.bitcast %[[X]] : f32 to i32
// CHECK: %[[S:.+]] = arith.shrui %[[B]], %c16_i32 : i32
// CHECK: %[[L:.+]] = arith.andi %[[S]], %c1_i32 : i32
// CHECK: %[[R:.+]] = arith.addi %[[L]], %c32767_i32 : i32
// CHECK: %[[SUM:.+]] = arith.addi %[[B]], %[[R]] : i32
// CHECK: %[[HI:.+]] = arith.shrui %[[SUM]], %c16_i32{{.*}} : i32
// CHECK: %[[H:.+]] = arith.trunci %[[HI]] : i32 to i16
// CHECK: %[[NAN:.+]] = arith.cmpf uno, %[[X]], %[[X]] : f32
// CHECK: %[[SEL:.+]] = arith.select %[[NAN]], %c32704_i16, %[[H]] : i16
// CHECK: %[[Y:.+]] = arith.bitcast %[[SEL]] : i16 to bf16
// CHECK: return %[[Y]] : bf16
func.func @scalar(%x: f32) -> bf16 {
  %0 = arith.truncf %x : f32 to bf16
  return %0 : bf16
}

// CHECK-LABEL: func.func @vector
// CHECK: arith.bitcast %{{.+}} : vector<8xf32> to vector<8xi32>
// CHECK: arith.shrui %{{.+}}, %{{.+}} : vector<8xi32>
// CHECK: arith.trunci %{{.+}} : vector<8xi32> to vector<8xi16>
// CHECK: arith.cmpf uno, %{{.+}}, %{{.+}} : vector<8xf32>
// CHECK: arith.select %{{.+}}, %{{.+}}, %{{.+}} : vector<8xi1>, vector<8xi16>
// CHECK: arith.bitcast %{{.+}} : vector<8xi16> to vector<8xbf16>
func.func @vector(%x: vector<8xf32>) -> vector<8xbf16> {
  %0 = arith.truncf %x : vector<8xf32> to vector<8xbf16>
  return %0 : vector<8xbf16>
}

// f64 first to an f32 rounded to odd (toward zero, the last bit set when inexact), then
// as above: one rounding, where a plain f32 rounding first could round twice.
// CHECK-LABEL: func.func @wide
// CHECK-SAME: (%[[X:.+]]: f64) -> bf16
// CHECK: %[[T:.+]] = arith.truncf %[[X]] : f64 to f32
// CHECK: %[[BACK:.+]] = arith.extf %[[T]] : f32 to f64
// CHECK: %[[B:.+]] = arith.bitcast %[[T]] : f32 to i32
// CHECK: %[[AB:.+]] = math.absf %[[BACK]] : f64
// CHECK: %[[AX:.+]] = math.absf %[[X]] : f64
// CHECK: %[[AWAY:.+]] = arith.cmpf ogt, %[[AB]], %[[AX]] : f64
// CHECK: %[[DOWN:.+]] = arith.subi %[[B]], %{{.+}} : i32
// CHECK: %[[INEXACT:.+]] = arith.cmpf une, %[[BACK]], %[[X]] : f64
// CHECK: %[[ODD:.+]] = arith.ori %[[DOWN]], %{{.+}} : i32
// CHECK: arith.shrui %[[ODD]], %c16_i32 : i32
// CHECK: arith.cmpf uno, %[[X]], %[[X]] : f64
// CHECK-NOT: arith.truncf %{{.+}} : f64 to bf16
func.func @wide(%x: f64) -> bf16 {
  %0 = arith.truncf %x : f64 to bf16
  return %0 : bf16
}

// CHECK-LABEL: func.func @others
// CHECK: arith.truncf %{{.+}} : f32 to f16
func.func @others(%y: f32) -> f16 {
  %0 = arith.truncf %y : f32 to f16
  return %0 : f16
}
