// Where (float32 values, bool condition, broadcasting) and Clip (float32), as clip_where.cc.
__kernel void where_f32(__global const uchar* condition, __global const float* x, __global const float* y,
                        __global float* output, long n, long8 dims, long8 c_strides, long8 x_strides,
                        long8 y_strides) {
  const long i = get_global_id(0);
  if (i < n) {
    output[i] = condition[broadcast_offset(i, dims, c_strides)] ? x[broadcast_offset(i, dims, x_strides)]
                                                                : y[broadcast_offset(i, dims, y_strides)];
  }
}

// max-then-min, so low > high yields high everywhere (numpy.clip).
__kernel void clip_f32(__global const float* x, __global float* y, long n, float low, float high) {
  const long i = get_global_id(0);
  if (i < n) {
    const float v = x[i] < low ? low : x[i];
    y[i] = v > high ? high : v;
  }
}
