// MaxPool and AveragePool over 1 or 2 spatial dims, GlobalAveragePool and GlobalMaxPool (pool_ops.cc), float32, one
// work item per output element. MaxPool keeps the first maximum in window order (strictly greater), as the CPU.
__kernel void max_pool_f32(__global const float* x, __global float* y, long n, TRAIND_WINDOW_ARGS) {
  const long i = get_global_id(0);
  if (i >= n) return;
  const long ow = i % out_width, oh = (i / out_width) % out_height, plane = i / (out_width * out_height);
  long h0, h1, w0, w1;
  tap_range(oh, stride_h, pad_h, kernel_h, dilation_h, 0, height, &h0, &h1);
  tap_range(ow, stride_w, pad_w, kernel_w, dilation_w, 0, width, &w0, &w1);
  __global const float* src = x + plane * height * width;
  const long sh = oh * stride_h - pad_h, sw = ow * stride_w - pad_w;
  float best = -FLT_MAX;
  bool found = false;
  for (long kh = h0; kh < h1; ++kh) {
    __global const float* row = src + (sh + kh * dilation_h) * width;
    for (long kw = w0; kw < w1; ++kw) {
      const float v = row[sw + kw * dilation_w];
      if (v > best || !found) {
        best = v;
        found = true;
      }
    }
  }
  y[i] = best;
}

__kernel void average_pool_f32(__global const float* x, __global float* y, long n, int count_include_pad,
                               TRAIND_WINDOW_ARGS) {
  const long i = get_global_id(0);
  if (i >= n) return;
  const long ow = i % out_width, oh = (i / out_width) % out_height, plane = i / (out_width * out_height);
  long h0, h1, w0, w1;
  tap_range(oh, stride_h, pad_h, kernel_h, dilation_h, 0, height, &h0, &h1);
  tap_range(ow, stride_w, pad_w, kernel_w, dilation_w, 0, width, &w0, &w1);
  __global const float* src = x + plane * height * width;
  const long sh = oh * stride_h - pad_h, sw = ow * stride_w - pad_w;
  float sum = 0.0f;
  for (long kh = h0; kh < h1; ++kh) {
    __global const float* row = src + (sh + kh * dilation_h) * width;
    for (long kw = w0; kw < w1; ++kw) sum += row[sw + kw * dilation_w];
  }
  long count = (h1 - h0) * (w1 - w0);
  if (count_include_pad) {
    // Taps inside the padded input count; taps past the end padding (ceil_mode) do not.
    long ph0, ph1, pw0, pw1;
    tap_range(oh, stride_h, pad_h, kernel_h, dilation_h, -pad_h, height + pad_end_h, &ph0, &ph1);
    tap_range(ow, stride_w, pad_w, kernel_w, dilation_w, -pad_w, width + pad_end_w, &pw0, &pw1);
    count = (ph1 - ph0) * (pw1 - pw0);
  }
  y[i] = count == 0 ? 0.0f : sum / (float)count;
}

// A work group per (image, channel) plane.
__kernel void global_average_pool_f32(__global const float* x, __global float* y, long plane,
                                      __local float* scratch) {
  const long p = get_group_id(0);
  float sum = 0.0f;
  for (long i = get_local_id(0); i < plane; i += get_local_size(0)) sum += x[p * plane + i];
  sum = group_sum(sum, scratch);
  if (get_local_id(0) == 0) y[p] = sum / (float)plane;
}

__kernel void global_max_pool_f32(__global const float* x, __global float* y, long planes, long plane) {
  const long p = get_global_id(0);
  if (p >= planes) return;
  float best = -INFINITY;
  for (long i = 0; i < plane; ++i) {
    const float v = x[p * plane + i];
    best = (v > best || isnan(v)) ? v : best;
  }
  y[p] = best;
}
