// AccumulateGradient without reset (accumulate_gradient.cc): buffer + gradient.
__kernel void accumulate_f32(__global const float* buffer, __global const float* gradient, __global float* sum,
                             long n) {
  const long i = get_global_id(0);
  if (i < n) sum[i] = buffer[i] + gradient[i];
}
