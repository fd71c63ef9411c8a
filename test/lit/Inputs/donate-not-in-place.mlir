// (input of mirax-donate-arguments.mlir: not a test of its own)
func.func @elsewhere(%w: memref<16xf32> {mirax.donated = 0 : i64}) -> memref<16xf32> {
  %a = memref.alloc() : memref<16xf32>
  memref.copy %w, %a : memref<16xf32> to memref<16xf32>
  return %a : memref<16xf32>
}
