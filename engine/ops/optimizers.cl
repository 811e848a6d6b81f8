// traind's fused AdamW and SGD (optimizers.cc; the arithmetic of engine/training/optimizer.h's AdamWUpdate and
// SgdUpdate, PyTorch 1.13's), float32. First the global gradient L2 norm: partial sums of squares per work group,
// then one group adds them up and decides, on the device, whether the step is skipped and the clipping scale; the
// updates read that decision, so nothing comes back to the host but the `skipped` flag (and not even that where
// Module::TrainStep checked the gradients: Module::GradientsCheckedFinite).
//
// Skipped exactly when a gradient element is not finite, as on the CPU (whose float64 sum cannot overflow): a
// non-finite element adds NaN, so the sum is NaN; the float32 squares of large finite gradients may overflow to
// +inf, which is not a skip (the clipping scale is then 0, the CPU's float64 one a denormal at most).

__kernel void sum_of_squares_partial(__global const float* g, __global float* partial, long n, long partial_offset,
                                     __local float* scratch) {
  float sum = 0.0f;
  for (long i = get_global_id(0); i < n; i += get_global_size(0)) sum += isfinite(g[i]) ? g[i] * g[i] : NAN;
  sum = group_sum(sum, scratch);
  if (get_local_id(0) == 0) partial[partial_offset + get_group_id(0)] = sum;
}

// One work group. state[0]: 1 when the step is skipped; state[1]: the gradient scale (clip_grad_norm_'s
// min(1, max_norm / (norm + 1e-6)) with max_grad_norm > 0, else 1).
__kernel void finish_norm(__global const float* partial, long count, __global float* state, __global uchar* skipped,
                          float max_grad_norm, __local float* scratch) {
  float sum = 0.0f;
  for (long i = get_local_id(0); i < count; i += get_local_size(0)) sum += partial[i];
  sum = group_sum(sum, scratch);
  if (get_local_id(0) == 0) {
    const bool skip = isnan(sum);
    state[0] = skip ? 1.0f : 0.0f;
    state[1] = max_grad_norm > 0.0f ? min(max_grad_norm / (sqrt(sum) + 1e-6f), 1.0f) : 1.0f;
    skipped[0] = skip;
  }
}

__kernel void adamw_update_f32(__global const float* p, __global const float* g, __global const float* m,
                               __global const float* v, __global float* p_out, __global float* m_out,
                               __global float* v_out, long n, __global const float* state, float beta1,
                               float one_minus_beta1, float beta2, float one_minus_beta2, float eps, float decay,
                               float step_size, float bias2_sqrt) {
  const long i = get_global_id(0);
  if (i >= n) return;
  if (state[0] != 0.0f) {  // skipped: every output is its input
    p_out[i] = p[i];
    m_out[i] = m[i];
    v_out[i] = v[i];
    return;
  }
  const float gradient = g[i] * state[1];
  const float decayed = p[i] * decay;
  const float m_i = beta1 * m[i] + one_minus_beta1 * gradient;
  const float v_i = beta2 * v[i] + one_minus_beta2 * gradient * gradient;
  p_out[i] = decayed - step_size * m_i / (sqrt(v_i) / bias2_sqrt + eps);
  m_out[i] = m_i;
  v_out[i] = v_i;
}

// With momentum (`buffer` used): buf = d on the first step, else momentum * buf + (1 - dampening) * d; then
// d = d + momentum * buf (Nesterov) or buf; p -= lr * d, with d = g * scale + weight_decay * p.
__kernel void sgd_update_f32(__global const float* p, __global const float* g, __global const float* buffer,
                             __global float* p_out, __global float* buffer_out, long n,
                             __global const float* state, float lr, float weight_decay, float momentum, float keep,
                             int nesterov, int first_step, int has_momentum) {
  const long i = get_global_id(0);
  if (i >= n) return;
  if (state[0] != 0.0f) {
    p_out[i] = p[i];
    if (has_momentum) buffer_out[i] = buffer[i];
    return;
  }
  float d = g[i] * state[1] + weight_decay * p[i];
  if (has_momentum) {
    const float b = first_step ? d : momentum * buffer[i] + keep * d;
    d = nesterov ? d + momentum * b : b;
    buffer_out[i] = b;
  }
  p_out[i] = p[i] - lr * d;
}
