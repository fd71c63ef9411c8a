// (input of mirax-donate-arguments.mlir: not a test of its own)
func.func @mismatch(%w: tensor<16xf32> {mirax.aliasing_output = 0 : i64}, %g: tensor<8xf32>) -> tensor<8xf32> {
  return %g : tensor<8xf32>
}
