// ScaledDotProductAttentionGrad's step between its products (attention_ops_gpu.cc): dS = scale * P * (dP - sum(dP * P))
// over each row of n, in place over dP (Softmax's gradient, SoftmaxGrad's order of operations, then the scale); one
// work item per row.
__kernel void scaled_softmax_grad_rows_f32(__global float* dp, __global const float* p, long rows, long n,
                                           float scale) {
  const long r = get_global_id(0);
  if (r >= rows) return;
  __global float* d = dp + r * n;
  __global const float* y = p + r * n;
  float sum = 0.0f;
  for (long a = 0; a < n; ++a) sum += d[a] * y[a];
  for (long a = 0; a < n; ++a) d[a] = scale * (y[a] * (d[a] - sum));
}
