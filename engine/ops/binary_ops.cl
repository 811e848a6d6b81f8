// Broadcasting binary elementwise ops on float32 (binary_ops.cc: the CPU kernels and gradient rules). Each op has
// a kernel for operands of the output's shape and one that broadcasts (broadcast_offset, prelude.cl).
#define TRAIND_BINARY(name, type, expression)                                                              \
  __kernel void name##_same(__global const float* a, __global const float* b, __global type* output,       \
                            long n) {                                                                      \
    const long i = get_global_id(0);                                                                       \
    if (i < n) {                                                                                           \
      const float x = a[i], y = b[i];                                                                      \
      output[i] = (expression);                                                                            \
    }                                                                                                      \
  }                                                                                                        \
  __kernel void name(__global const float* a, __global const float* b, __global type* output, long n,      \
                     long8 dims, long8 a_strides, long8 b_strides) {                                       \
    const long i = get_global_id(0);                                                                       \
    if (i < n) {                                                                                           \
      const float x = a[broadcast_offset(i, dims, a_strides)], y = b[broadcast_offset(i, dims, b_strides)]; \
      output[i] = (expression);                                                                            \
    }                                                                                                      \
  }

TRAIND_BINARY(add_f32, float, x + y)
TRAIND_BINARY(sub_f32, float, x - y)
TRAIND_BINARY(mul_f32, float, x * y)
TRAIND_BINARY(div_f32, float, x / y)
TRAIND_BINARY(pow_f32, float, pow(x, y))
// Numpy semantics, as the CPU: NaN in either input propagates.
TRAIND_BINARY(min_f32, float, (x != x || x < y) ? x : y)
TRAIND_BINARY(max_f32, float, (x != x || x > y) ? x : y)
TRAIND_BINARY(equal_f32, uchar, x == y)
TRAIND_BINARY(less_f32, uchar, x < y)
TRAIND_BINARY(greater_f32, uchar, x > y)
TRAIND_BINARY(less_or_equal_f32, uchar, x <= y)
TRAIND_BINARY(greater_or_equal_f32, uchar, x >= y)

// output = input / divisor (Mean divides once at the end, as on the CPU).
__kernel void divide_f32(__global const float* input, __global float* output, long n, float divisor) {
  const long i = get_global_id(0);
  if (i < n) output[i] = input[i] / divisor;
}
