// Softmax and LogSoftmax of [outer, n, inner] along n (softmax_ops.cc, softmax_slab.h): one work item per
// (outer, inner) position: max first; log softmax = (x - max) - log(sum), exact for the largest entries.
__kernel void softmax_f32(__global const float* x, __global float* y, long positions, long n, long inner,
                          int log_softmax) {
  const long p = get_global_id(0);
  if (p >= positions) return;
  const long base = (p / inner) * n * inner + p % inner;
  float max = -INFINITY;
  for (long a = 0; a < n; ++a) {
    const float v = x[base + a * inner];
    max = v > max ? v : max;
  }
  float sum = 0.0f;
  for (long a = 0; a < n; ++a) {
    const float e = exp(x[base + a * inner] - max);
    if (!log_softmax) y[base + a * inner] = e;
    sum += e;
  }
  if (log_softmax) {
    const float log_sum = log(sum);
    for (long a = 0; a < n; ++a) y[base + a * inner] = (x[base + a * inner] - max) - log_sum;
  } else {
    const float scale = 1.0f / sum;
    for (long a = 0; a < n; ++a) y[base + a * inner] *= scale;
  }
}

// SoftmaxGrad of [outer, n, inner] along n: dX = Y * (dY - sum(dY * Y)), one work item per (outer, inner) position.
__kernel void softmax_grad_f32(__global const float* dy, __global const float* y, __global float* dx, long positions,
                               long n, long inner) {
  const long p = get_global_id(0);
  if (p >= positions) return;
  const long base = (p / inner) * n * inner + p % inner;
  float sum = 0.0f;
  for (long a = 0; a < n; ++a) sum += dy[base + a * inner] * y[base + a * inner];
  for (long a = 0; a < n; ++a) dx[base + a * inner] = y[base + a * inner] * (dy[base + a * inner] - sum);
}
