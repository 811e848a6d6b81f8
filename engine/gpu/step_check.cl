// What the host reads after a training step, in one download (GpuExecutor::SyncScalarCheckingFinite): out[0] is the
// loss, out[1 + g] becomes 1 when an element of checked group g (batch statistics, gradients) is not finite.
__kernel void begin_step_check(__global const float* scalar, int has_scalar, __global float* out, long count) {
  const long i = get_global_id(0);
  if (i >= count) return;
  out[i] = i == 0 && has_scalar ? scalar[0] : 0.0f;
}

// Every non-finite item writes the same 1 into out[flag]: racing writes of one value need no atomics.
__kernel void mark_non_finite(__global const float* x, long n, __global float* out, int flag) {
  const long i = get_global_id(0);
  if (i < n && !isfinite(x[i])) out[flag] = 1.0f;
}
