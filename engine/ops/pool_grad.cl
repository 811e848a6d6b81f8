// MaxPoolGrad (pool_grad.cc), float32, 1 or 2 spatial dims: one work item per input element gathers the dY of every
// window whose first maximum it is, in output order (the CPU adds them in that order too).
inline long first_max(__global const float* src, long oh, long ow, long height, long width, long kernel_h,
                      long kernel_w, long stride_h, long stride_w, long dilation_h, long dilation_w, long pad_h,
                      long pad_w) {
  long h0, h1, w0, w1;
  tap_range(oh, stride_h, pad_h, kernel_h, dilation_h, 0, height, &h0, &h1);
  tap_range(ow, stride_w, pad_w, kernel_w, dilation_w, 0, width, &w0, &w1);
  const long sh = oh * stride_h - pad_h, sw = ow * stride_w - pad_w;
  float best = -FLT_MAX;
  long best_offset = -1;
  for (long kh = h0; kh < h1; ++kh) {
    for (long kw = w0; kw < w1; ++kw) {
      const long offset = (sh + kh * dilation_h) * width + sw + kw * dilation_w;
      if (src[offset] > best || best_offset < 0) {
        best = src[offset];
        best_offset = offset;
      }
    }
  }
  return best_offset;
}

__kernel void max_pool_grad_f32(__global const float* dy, __global const float* x, __global float* dx, long n,
                                TRAIND_WINDOW_ARGS) {
  const long i = get_global_id(0);
  if (i >= n) return;
  const long plane_size = height * width;
  const long plane = i / plane_size, offset = i % plane_size;
  const long ih = offset / width, iw = offset % width;
  __global const float* src = x + plane * plane_size;
  __global const float* grad = dy + plane * out_height * out_width;
  // Output rows whose window can reach row ih: oh * stride_h - pad_h <= ih <= oh * stride_h - pad_h + extent - 1.
  const long extent_h = (kernel_h - 1) * dilation_h + 1, extent_w = (kernel_w - 1) * dilation_w + 1;
  long oh_first = (ih + pad_h - extent_h + 1 + stride_h - 1);
  oh_first = oh_first <= 0 ? 0 : oh_first / stride_h;
  long ow_first = (iw + pad_w - extent_w + 1 + stride_w - 1);
  ow_first = ow_first <= 0 ? 0 : ow_first / stride_w;
  const long oh_last = min(out_height - 1, (ih + pad_h) / stride_h);
  const long ow_last = min(out_width - 1, (iw + pad_w) / stride_w);
  float sum = 0.0f;
  for (long oh = oh_first; oh <= oh_last; ++oh) {
    for (long ow = ow_first; ow <= ow_last; ++ow) {
      if (first_max(src, oh, ow, height, width, kernel_h, kernel_w, stride_h, stride_w, dilation_h, dilation_w,
                    pad_h, pad_w) == offset) {
        sum += grad[oh * out_width + ow];
      }
    }
  }
  dx[i] = sum;
}
