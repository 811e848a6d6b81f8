// Conv (conv_ops.cc) on the device, float32, 1 or 2 spatial dims: im2col over a chunk of images, then CLBlast's
// batched GEMM per group (engine/gpu/blas.h), then the bias.
//
// col holds, per image of the chunk, [C * kernel_h * kernel_w, out_height * out_width]: row (c, kh, kw), column
// (oh, ow) is the input element that tap reads, 0 in the padding.
__kernel void im2col_f32(__global const float* x, __global float* col, long n, long channels, long first_image,
                         TRAIND_WINDOW_ARGS) {
  const long i = get_global_id(0);
  if (i >= n) return;
  const long positions = out_height * out_width;
  const long rows = channels * kernel_h * kernel_w;
  const long p = i % positions, r = (i / positions) % rows, image = first_image + i / (positions * rows);
  const long kw = r % kernel_w, kh = (r / kernel_w) % kernel_h, c = r / (kernel_w * kernel_h);
  const long ih = (p / out_width) * stride_h - pad_h + kh * dilation_h;
  const long iw = (p % out_width) * stride_w - pad_w + kw * dilation_w;
  col[i] = (ih >= 0 && ih < height && iw >= 0 && iw < width)
               ? x[((image * channels + c) * height + ih) * width + iw]
               : 0.0f;
}

// y[n, m, p] += bias[m] over y of [N, M, positions].
__kernel void add_channel_bias_f32(__global float* y, __global const float* bias, long n, long channels,
                                   long positions) {
  const long i = get_global_id(0);
  if (i < n) y[i] += bias[(i / positions) % channels];
}
