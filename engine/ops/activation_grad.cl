// Fused activation gradients (activation_grad.cc): dX from dY and X, elementwise, float32.
__kernel void relu_grad_f32(__global const float* dy, __global const float* x, __global float* dx, long n) {
  const long i = get_global_id(0);
  if (i < n) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

// GELU's backward: dY * 2/sqrt(pi) * exp(-X^2).
__kernel void erf_grad_f32(__global const float* dy, __global const float* x, __global float* dx, long n) {
  const long i = get_global_id(0);
  if (i < n) dx[i] = dy[i] * 1.1283791670955126f * exp(-x[i] * x[i]);
}
