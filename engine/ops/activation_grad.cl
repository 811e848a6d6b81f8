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

// Exact GELU's backward: dY * (Phi(X) + X * phi(X)), Phi = 0.5 * (1 + erf(X / sqrt(2))), phi = exp(-X^2/2)/sqrt(2pi).
__kernel void gelu_grad_f32(__global const float* dy, __global const float* x, __global float* dx, long n) {
  const long i = get_global_id(0);
  if (i < n) {
    const float v = x[i];
    const float cdf = 0.5f * (1.0f + erf(v * 0.70710678118654752f));
    dx[i] = dy[i] * (cdf + v * 0.39894228040143268f * exp(-0.5f * v * v));
  }
}
