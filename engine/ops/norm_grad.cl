// BatchNormalizationGrad and LayerNormalizationGrad (norm_grad.cc), float32. With xhat = (x - mean) * inv and
// dxhat = dY * scale: dScale = sum(dY * xhat), dB = sum(dY), dX = inv * (dxhat - mean(dxhat) - xhat *
// mean(dxhat * xhat)). Statistics recomputed from X around a value of the group, as the forward kernels do.

// A work group per channel of [N, C, ...]: the four sums, then dX as one affine map of (dY, x - shift).
__kernel void batch_norm_grad_f32(__global const float* dy, __global const float* x, __global const float* scale,
                                  __global float* dx, __global float* dscale, __global float* dbias, long batch,
                                  long channels, long row, float epsilon, __local float* scratch) {
  const long c = get_group_id(0);
  const long count = batch * row;
  const float shift = x[c * row];
  float sum = 0.0f, squares = 0.0f, sum_dy = 0.0f, sum_dy_x = 0.0f;
  for (long e = get_local_id(0); e < count; e += get_local_size(0)) {
    const long offset = ((e / row) * channels + c) * row + e % row;
    const float d = x[offset] - shift, g = dy[offset];
    sum += d;
    squares += d * d;
    sum_dy += g;
    sum_dy_x += g * d;
  }
  sum = group_sum(sum, scratch);
  squares = group_sum(squares, scratch);
  sum_dy = group_sum(sum_dy, scratch);
  sum_dy_x = group_sum(sum_dy_x, scratch);
  const float n = (float)count;
  const float shifted_mean = sum / n;
  const float var = max(0.0f, squares / n - shifted_mean * shifted_mean);
  const float inv = 1.0f / sqrt(var + epsilon);
  const float sum_dy_xhat = (sum_dy_x - shifted_mean * sum_dy) * inv;
  if (get_local_id(0) == 0) {
    dscale[c] = sum_dy_xhat;
    dbias[c] = sum_dy;
  }
  const float a = scale[c] * inv;
  const float b = -a * (sum_dy_xhat / n) * inv;
  const float k = -a * (sum_dy / n) - b * shifted_mean;
  for (long e = get_local_id(0); e < count; e += get_local_size(0)) {
    const long offset = ((e / row) * channels + c) * row + e % row;
    dx[offset] = a * dy[offset] + b * (x[offset] - shift) + k;
  }
}

// A work group per row: dX of the row, and the row's (shift, shifted mean, inv) for layer_norm_grad_parameters.
__kernel void layer_norm_grad_f32(__global const float* dy, __global const float* x, __global const float* scale,
                                  __global float* dx, __global float* stats, long row, float epsilon,
                                  __local float* scratch) {
  const long r = get_group_id(0);
  __global const float* xs = x + r * row;
  __global const float* g = dy + r * row;
  const float shift = xs[0];
  float sum = 0.0f, squares = 0.0f;
  for (long k = get_local_id(0); k < row; k += get_local_size(0)) {
    const float d = xs[k] - shift;
    sum += d;
    squares += d * d;
  }
  sum = group_sum(sum, scratch);
  squares = group_sum(squares, scratch);
  const float shifted_mean = sum / (float)row;
  const float var = max(0.0f, squares / (float)row - shifted_mean * shifted_mean);
  const float inv = 1.0f / sqrt(var + epsilon);
  float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
  for (long k = get_local_id(0); k < row; k += get_local_size(0)) {
    const float xhat = ((xs[k] - shift) - shifted_mean) * inv;
    const float dxhat = g[k] * scale[k];
    sum_dxhat += dxhat;
    sum_dxhat_xhat += dxhat * xhat;
  }
  sum_dxhat = group_sum(sum_dxhat, scratch);
  sum_dxhat_xhat = group_sum(sum_dxhat_xhat, scratch);
  const float mean_dxhat = sum_dxhat / (float)row, mean_dxhat_xhat = sum_dxhat_xhat / (float)row;
  for (long k = get_local_id(0); k < row; k += get_local_size(0)) {
    const float xhat = ((xs[k] - shift) - shifted_mean) * inv;
    dx[r * row + k] = inv * (g[k] * scale[k] - mean_dxhat - xhat * mean_dxhat_xhat);
  }
  if (get_local_id(0) == 0) {
    stats[3 * r] = shift;
    stats[3 * r + 1] = shifted_mean;
    stats[3 * r + 2] = inv;
  }
}

// An item per column k: dScale[k] and dB[k] summed over the rows in order.
__kernel void layer_norm_grad_parameters_f32(__global const float* dy, __global const float* x,
                                             __global const float* stats, __global float* dscale,
                                             __global float* dbias, long rows, long row) {
  const long k = get_global_id(0);
  if (k >= row) return;
  float total_scale = 0.0f, total_bias = 0.0f;
  for (long r = 0; r < rows; ++r) {
    const float xhat = ((x[r * row + k] - stats[3 * r]) - stats[3 * r + 1]) * stats[3 * r + 2];
    const float g = dy[r * row + k];
    total_scale += g * xhat;
    total_bias += g;
  }
  dscale[k] = total_scale;
  dbias[k] = total_bias;
}
