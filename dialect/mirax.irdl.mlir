// The mirax dialect, generated from dialect/*.py by `python -m mirax.dialect`.
// Do not edit: test_dialect.py fails when this file is stale.
irdl.dialect @mirax {
  irdl.operation @abs {
    // |x|
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @add {
    // x + y
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @all_gather {
    // x of every process of the group, concatenated along axis 0 (0-d: stacked)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_group = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"group" = %attr_group}
  }
  irdl.operation @all_max {
    // the elementwise maximum of x over the processes of the group
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_group = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"group" = %attr_group}
  }
  irdl.operation @all_min {
    // the elementwise minimum of x over the processes of the group
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_group = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"group" = %attr_group}
  }
  irdl.operation @all_sum {
    // the elementwise sum of x over the processes of the group
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_group = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"group" = %attr_group}
  }
  irdl.operation @arange {
    // start + i * step
    %out = irdl.base "!builtin.tensor"
    %attr_start = irdl.base "#builtin.float"
    %attr_step = irdl.base "#builtin.float"
    irdl.results(result: %out)
    irdl.attributes {"start" = %attr_start, "step" = %attr_step}
  }
  irdl.operation @arctan2 {
    // atan2(x, y)
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @argmax {
    // index (uint32) of the first maximum along the one axis in `axes`
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_axes = irdl.base "#builtin.dense_array"
    %attr_keepdims = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"axes" = %attr_axes, "keepdims" = %attr_keepdims}
  }
  irdl.operation @argmin {
    // index (uint32) of the first minimum along the one axis in `axes`
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_axes = irdl.base "#builtin.dense_array"
    %attr_keepdims = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"axes" = %attr_axes, "keepdims" = %attr_keepdims}
  }
  irdl.operation @argsort {
    // indices (uint32) that sort `x` along `axis`: stable, NaN last
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_axis = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"axis" = %attr_axis}
  }
  irdl.operation @argtopk {
    // indices (uint32) of the k largest of `x` along `axis`, ascending: argsort's last k
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_axis = irdl.base "#builtin.integer"
    %attr_k = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"axis" = %attr_axis, "k" = %attr_k}
  }
  irdl.operation @astype {
    // dtype conversion (C casts; float to int truncates)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_dtype = irdl.base "#builtin.type"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"dtype" = %attr_dtype}
  }
  irdl.operation @bitcast {
    // the bits read as another dtype; between widths the last axis scales (little-endian)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_dtype = irdl.base "#builtin.type"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"dtype" = %attr_dtype}
  }
  irdl.operation @bitwise_and {
    // x & y, bit by bit
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @bitwise_or {
    // x | y, bit by bit
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @bitwise_xor {
    // x ^ y, bit by bit
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @broadcast_to {
    // numpy broadcasting to `shape`
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_shape = irdl.base "#builtin.dense_array"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"shape" = %attr_shape}
  }
  irdl.operation @ceil {
    // ceil(x)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @cholesky {
    // Cholesky factor of the symmetric matrix of one triangle
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_upper = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"upper" = %attr_upper}
  }
  irdl.operation @concatenate {
    // join two arrays along `axis` (N arrays are a chain)
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_axis = irdl.base "#builtin.integer"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
    irdl.attributes {"axis" = %attr_axis}
  }
  irdl.operation @conjugate {
    // complex conjugate
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @constant {
    // an array given by its value
    %out = irdl.base "!builtin.tensor"
    %attr_value = irdl.base "#builtin.dense_int_or_fp_elements"
    irdl.results(result: %out)
    irdl.attributes {"value" = %attr_value}
  }
  irdl.operation @conv {
    // channels-last convolution (MLX conv_general): (N, S..., C_in) x (C_out, K..., C_in/groups) -> (N, O..., C_out)
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_stride = irdl.base "#builtin.dense_array"
    %attr_padding_lo = irdl.base "#builtin.dense_array"
    %attr_padding_hi = irdl.base "#builtin.dense_array"
    %attr_kernel_dilation = irdl.base "#builtin.dense_array"
    %attr_input_dilation = irdl.base "#builtin.dense_array"
    %attr_groups = irdl.base "#builtin.integer"
    %attr_flip = irdl.base "#builtin.integer"
    irdl.operands(input: %in0, weight: %in1)
    irdl.results(result: %out)
    irdl.attributes {"stride" = %attr_stride, "padding_lo" = %attr_padding_lo, "padding_hi" = %attr_padding_hi, "kernel_dilation" = %attr_kernel_dilation, "input_dilation" = %attr_input_dilation, "groups" = %attr_groups, "flip" = %attr_flip}
  }
  irdl.operation @cos {
    // cos(x)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @cummax {
    // running maximum along `axis` (optionally reversed, exclusive: the first is the lowest value); NaN propagates
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_axis = irdl.base "#builtin.integer"
    %attr_reverse = irdl.base "#builtin.integer"
    %attr_inclusive = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"axis" = %attr_axis, "reverse" = %attr_reverse, "inclusive" = %attr_inclusive}
  }
  irdl.operation @cummin {
    // running minimum along `axis` (optionally reversed, exclusive: the first is the highest value); NaN propagates
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_axis = irdl.base "#builtin.integer"
    %attr_reverse = irdl.base "#builtin.integer"
    %attr_inclusive = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"axis" = %attr_axis, "reverse" = %attr_reverse, "inclusive" = %attr_inclusive}
  }
  irdl.operation @cumprod {
    // running product along `axis` (optionally reversed, exclusive)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_axis = irdl.base "#builtin.integer"
    %attr_reverse = irdl.base "#builtin.integer"
    %attr_inclusive = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"axis" = %attr_axis, "reverse" = %attr_reverse, "inclusive" = %attr_inclusive}
  }
  irdl.operation @cumsum {
    // running sum along `axis` (optionally reversed, exclusive)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_axis = irdl.base "#builtin.integer"
    %attr_reverse = irdl.base "#builtin.integer"
    %attr_inclusive = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"axis" = %attr_axis, "reverse" = %attr_reverse, "inclusive" = %attr_inclusive}
  }
  irdl.operation @depends {
    // x, evaluated after `dependency`
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0, dependency: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @divide {
    // x / y (inexact dtypes)
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @eig {
    // eigendecomposition of square matrices: complex w (output 0), V (output 1)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_output = irdl.base "#builtin.integer"
    %attr_vectors = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"output" = %attr_output, "vectors" = %attr_vectors}
  }
  irdl.operation @eigh {
    // symmetric/Hermitian eigendecomposition of one triangle: w (output 0, ascending), V (output 1)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_output = irdl.base "#builtin.integer"
    %attr_upper = irdl.base "#builtin.integer"
    %attr_vectors = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"output" = %attr_output, "upper" = %attr_upper, "vectors" = %attr_vectors}
  }
  irdl.operation @equal {
    // x equal y
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @erf {
    // erf(x)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @erfinv {
    // inverse of erf
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @exp {
    // exp(x)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @expm1 {
    // expm1(x)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @flatten {
    // merge axes start_axis..end_axis into one
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_start_axis = irdl.base "#builtin.integer"
    %attr_end_axis = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"start_axis" = %attr_start_axis, "end_axis" = %attr_end_axis}
  }
  irdl.operation @floor {
    // floor(x)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @floor_divide {
    // floor(x / y)
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @greater {
    // x greater y
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @greater_equal {
    // x greater_equal y
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @imag {
    // imaginary part
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @inv {
    // inverse of square matrices (tri: of the upper/lower triangle)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_tri = irdl.base "#builtin.integer"
    %attr_upper = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"tri" = %attr_tri, "upper" = %attr_upper}
  }
  irdl.operation @left_shift {
    // x << y (0 for counts outside [0, bits))
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @less {
    // x less y
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @less_equal {
    // x less_equal y
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @log {
    // log(x)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @log1p {
    // log1p(x)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @logical_and {
    // x and y (bool)
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @logical_not {
    // x == 0
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @logical_or {
    // x or y (bool)
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @lu {
    // LU factorization with partial pivoting: packed LU (0), pivots (1), row permutation (2)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_output = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"output" = %attr_output}
  }
  irdl.operation @matmul {
    // batched matrix product (..., M, K) x (..., K, N) -> (..., M, N)
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @max {
    // maximum over `axes` (NaN propagates; complex: by real part, then imaginary part)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_axes = irdl.base "#builtin.dense_array"
    %attr_keepdims = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"axes" = %attr_axes, "keepdims" = %attr_keepdims}
  }
  irdl.operation @maximum {
    // max(x, y), NaN-propagating
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @min {
    // minimum over `axes` (NaN propagates; complex: by real part, then imaginary part)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_axes = irdl.base "#builtin.dense_array"
    %attr_keepdims = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"axes" = %attr_axes, "keepdims" = %attr_keepdims}
  }
  irdl.operation @minimum {
    // min(x, y), NaN-propagating
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @multiply {
    // x * y
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @negative {
    // -x
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @not_equal {
    // x not_equal y
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @optimization_barrier {
    // x, opaque to CSE and folding until bufferization
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @pad {
    // constant padding: `low`/`high` elements before/after each axis
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_low = irdl.base "#builtin.dense_array"
    %attr_high = irdl.base "#builtin.dense_array"
    irdl.operands(x: %in0, value: %in1)
    irdl.results(result: %out)
    irdl.attributes {"low" = %attr_low, "high" = %attr_high}
  }
  irdl.operation @power {
    // x ** y
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @prod {
    // product over `axes`
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_axes = irdl.base "#builtin.dense_array"
    %attr_keepdims = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"axes" = %attr_axes, "keepdims" = %attr_keepdims}
  }
  irdl.operation @qr {
    // reduced QR factorization: Q (output 0), R (output 1)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_output = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"output" = %attr_output}
  }
  irdl.operation @random_bits {
    // uint32 Threefry-2x32 bits of `shape` per key (key: uint32[..., 2])
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_shape = irdl.base "#builtin.dense_array"
    irdl.operands(key: %in0)
    irdl.results(result: %out)
    irdl.attributes {"shape" = %attr_shape}
  }
  irdl.operation @real {
    // real part
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @reciprocal {
    // 1/x
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @recv {
    // an array shaped like `like`, received from process src
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_src = irdl.base "#builtin.integer"
    %attr_group = irdl.base "#builtin.integer"
    irdl.operands(like: %in0)
    irdl.results(result: %out)
    irdl.attributes {"src" = %attr_src, "group" = %attr_group}
  }
  irdl.operation @remainder {
    // x mod y with the sign of y
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @reshape {
    // same elements, new shape (row-major)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_shape = irdl.base "#builtin.dense_array"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"shape" = %attr_shape}
  }
  irdl.operation @right_shift {
    // x >> y, arithmetic for signed x (0 or -1 for counts outside [0, bits))
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @round {
    // round half to even
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @rsqrt {
    // rsqrt(x)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @scatter {
    // x with `updates` written at `indices` along `axis` (the last of repeats wins; out-of-range updates are dropped)
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %in2 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_axis = irdl.base "#builtin.integer"
    irdl.operands(x: %in0, indices: %in1, updates: %in2)
    irdl.results(result: %out)
    irdl.attributes {"axis" = %attr_axis}
  }
  irdl.operation @scatter_add {
    // x with updates added at `indices` along `axis` (out-of-range updates are dropped)
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %in2 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_axis = irdl.base "#builtin.integer"
    irdl.operands(x: %in0, indices: %in1, updates: %in2)
    irdl.results(result: %out)
    irdl.attributes {"axis" = %attr_axis}
  }
  irdl.operation @scatter_max {
    // x the maximum with the updates at `indices` along `axis` (repeats combine; out-of-range updates are dropped)
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %in2 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_axis = irdl.base "#builtin.integer"
    irdl.operands(x: %in0, indices: %in1, updates: %in2)
    irdl.results(result: %out)
    irdl.attributes {"axis" = %attr_axis}
  }
  irdl.operation @scatter_min {
    // x the minimum with the updates at `indices` along `axis` (repeats combine; out-of-range updates are dropped)
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %in2 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_axis = irdl.base "#builtin.integer"
    irdl.operands(x: %in0, indices: %in1, updates: %in2)
    irdl.results(result: %out)
    irdl.attributes {"axis" = %attr_axis}
  }
  irdl.operation @scatter_prod {
    // x multiplied by the updates at `indices` along `axis` (repeats combine; out-of-range updates are dropped)
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %in2 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_axis = irdl.base "#builtin.integer"
    irdl.operands(x: %in0, indices: %in1, updates: %in2)
    irdl.results(result: %out)
    irdl.attributes {"axis" = %attr_axis}
  }
  irdl.operation @send {
    // send x to process dst of the group; the result is x
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_dst = irdl.base "#builtin.integer"
    %attr_group = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"dst" = %attr_dst, "group" = %attr_group}
  }
  irdl.operation @sigmoid {
    // 1/(1+exp(-x))
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @sign {
    // -1, 0 or 1 (x/|x| for complex)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @sin {
    // sin(x)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @slice {
    // x[start:stop:strides] with normalized, in-bounds start/stop and positive strides
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_start = irdl.base "#builtin.dense_array"
    %attr_stop = irdl.base "#builtin.dense_array"
    %attr_strides = irdl.base "#builtin.dense_array"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"start" = %attr_start, "stop" = %attr_stop, "strides" = %attr_strides}
  }
  irdl.operation @solve {
    // solution X of A X = B for square A (..., N, N) and B (..., N, K)
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(a: %in0, b: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @sort {
    // `x` sorted along `axis` (NaN last; as numpy's sort)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_axis = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"axis" = %attr_axis}
  }
  irdl.operation @sqrt {
    // sqrt(x)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @square {
    // x*x
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @stop_gradient {
    // identity whose derivative is zero
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @subtract {
    // x - y
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(lhs: %in0, rhs: %in1)
    irdl.results(result: %out)
  }
  irdl.operation @sum {
    // sum over `axes`
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_axes = irdl.base "#builtin.dense_array"
    %attr_keepdims = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"axes" = %attr_axes, "keepdims" = %attr_keepdims}
  }
  irdl.operation @sum_scatter {
    // the sum of x over the group, of which process r keeps block r of axis 0
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_group = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"group" = %attr_group}
  }
  irdl.operation @svd {
    // singular value decomposition: U (output 0), S (output 1), Vt (output 2)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_output = irdl.base "#builtin.integer"
    %attr_full = irdl.base "#builtin.integer"
    %attr_compute_uv = irdl.base "#builtin.integer"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"output" = %attr_output, "full" = %attr_full, "compute_uv" = %attr_compute_uv}
  }
  irdl.operation @take {
    // numpy take along `axis` (negative indices wrap, out-of-range ones clamp)
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_axis = irdl.base "#builtin.integer"
    irdl.operands(x: %in0, indices: %in1)
    irdl.results(result: %out)
    irdl.attributes {"axis" = %attr_axis}
  }
  irdl.operation @take_along_axis {
    // numpy take_along_axis (same-shaped indices; negative wrap, out-of-range clamp)
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_axis = irdl.base "#builtin.integer"
    irdl.operands(x: %in0, indices: %in1)
    irdl.results(result: %out)
    irdl.attributes {"axis" = %attr_axis}
  }
  irdl.operation @tan {
    // tan(x)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @tanh {
    // tanh(x)
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
  }
  irdl.operation @transpose {
    // permute axes
    %in0 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    %attr_permutation = irdl.base "#builtin.dense_array"
    irdl.operands(x: %in0)
    irdl.results(result: %out)
    irdl.attributes {"permutation" = %attr_permutation}
  }
  irdl.operation @where {
    // x where condition else y
    %in0 = irdl.base "!builtin.tensor"
    %in1 = irdl.base "!builtin.tensor"
    %in2 = irdl.base "!builtin.tensor"
    %out = irdl.base "!builtin.tensor"
    irdl.operands(condition: %in0, x: %in1, y: %in2)
    irdl.results(result: %out)
  }
}
