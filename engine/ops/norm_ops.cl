// BatchNormalization (training mode with running statistics, and inference) and LayerNormalization (norm_ops.cc),
// float32. Statistics are sums of (x - shift) and its square with shift a value of the group, as on the CPU (no
// cancellation when |mean| >> stddev), reduced by a work group per group; the biased variance, as ONNX specifies.

// A work group per feature: the batch statistics, the running ones blended in (running = input * momentum +
// batch * (1 - momentum)), and for batch_norm_apply the (shift, shifted mean, scale / sqrt(var + epsilon)).
__kernel void batch_norm_statistics_f32(__global const float* x, __global const float* scale,
                                        __global const float* mean_in, __global const float* var_in,
                                        __global float* running_mean, __global float* running_var,
                                        __global float* stats, long batch, long features, long row, float momentum,
                                        float epsilon, __local float* scratch) {
  const long f = get_group_id(0);
  const long count = batch * row;
  const float shift = x[f * row];
  float sum = 0.0f, squares = 0.0f;
  for (long e = get_local_id(0); e < count; e += get_local_size(0)) {
    const float d = x[((e / row) * features + f) * row + e % row] - shift;
    sum += d;
    squares += d * d;
  }
  sum = group_sum(sum, scratch);
  squares = group_sum(squares, scratch);
  if (get_local_id(0) == 0) {
    const float shifted_mean = sum / (float)count;
    const float batch_var = max(0.0f, squares / (float)count - shifted_mean * shifted_mean);
    running_mean[f] = mean_in[f] * momentum + (shifted_mean + shift) * (1.0f - momentum);
    running_var[f] = var_in[f] * momentum + batch_var * (1.0f - momentum);
    stats[3 * f] = shift;
    stats[3 * f + 1] = shifted_mean;
    stats[3 * f + 2] = scale[f] / sqrt(batch_var + epsilon);
  }
}

__kernel void batch_norm_apply_f32(__global const float* x, __global float* y, __global const float* stats,
                                   __global const float* bias, long n, long features, long row) {
  const long i = get_global_id(0);
  if (i >= n) return;
  const long f = (i / row) % features;
  y[i] = ((x[i] - stats[3 * f]) - stats[3 * f + 1]) * stats[3 * f + 2] + bias[f];
}

__kernel void batch_norm_inference_f32(__global const float* x, __global float* y, __global const float* scale,
                                       __global const float* bias, __global const float* mean,
                                       __global const float* var, long n, long features, long row, float epsilon) {
  const long i = get_global_id(0);
  if (i >= n) return;
  const long f = (i / row) % features;
  y[i] = (x[i] - mean[f]) * (scale[f] / sqrt(var[f] + epsilon)) + bias[f];
}

// A work group per row of `row` elements: Mean and InvStdDev out (stash_type float), then the normalised row.
__kernel void layer_norm_f32(__global const float* x, __global const float* scale, __global const float* bias,
                             __global float* y, __global float* mean_out, __global float* inv_std_out, long row,
                             float epsilon, int scale_is_scalar, int has_bias, int bias_is_scalar,
                             __local float* scratch) {
  const long r = get_group_id(0);
  __global const float* src = x + r * row;
  const float shift = src[0];
  float sum = 0.0f, squares = 0.0f;
  for (long k = get_local_id(0); k < row; k += get_local_size(0)) {
    const float d = src[k] - shift;
    sum += d;
    squares += d * d;
  }
  sum = group_sum(sum, scratch);
  squares = group_sum(squares, scratch);
  const float shifted_mean = sum / (float)row;
  const float var = max(0.0f, squares / (float)row - shifted_mean * shifted_mean);
  const float inv = 1.0f / sqrt(var + epsilon);
  if (get_local_id(0) == 0) {
    mean_out[r] = shift + shifted_mean;
    inv_std_out[r] = inv;
  }
  for (long k = get_local_id(0); k < row; k += get_local_size(0)) {
    const float g = scale[scale_is_scalar ? 0 : k];
    const float b = has_bias ? bias[bias_is_scalar ? 0 : k] : 0.0f;
    y[r * row + k] = ((src[k] - shift) - shifted_mean) * inv * g + b;
  }
}
