// Cast between float32 and bool on the device (cast.cc: every other pair, on the CPU). Bool is 0/1; NaN is true,
// as C++'s `value != 0.0`.
__kernel void bool_to_f32(__global const uchar* x, __global float* y, long n) {
  const long i = get_global_id(0);
  if (i < n) y[i] = x[i] != 0 ? 1.0f : 0.0f;
}

__kernel void f32_to_bool(__global const float* x, __global uchar* y, long n) {
  const long i = get_global_id(0);
  if (i < n) y[i] = x[i] != 0.0f;
}
