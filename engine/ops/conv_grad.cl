// ConvGrad (conv_grad.cc) on the device, float32, 1 or 2 spatial dims: dW from a batched GEMM of dY and im2col(X)
// (conv_ops.cl) summed over the images, dX from a batched GEMM of W^T and dY folded back by col2im, dB a sum of dY.
// Every sum is in a fixed order (no atomics): the results do not depend on scheduling.

// dx[image, c, ih, iw] = the sum of the col entries of every tap that read (ih, iw): a gather, one item per input
// element of the chunk.
__kernel void col2im_f32(__global const float* col, __global float* dx, long n, long channels, long first_image,
                         TRAIND_WINDOW_ARGS) {
  const long i = get_global_id(0);
  if (i >= n) return;
  const long iw = i % width, ih = (i / width) % height, c = (i / (width * height)) % channels;
  const long local_image = i / (width * height * channels);
  const long positions = out_height * out_width;
  const long rows = channels * kernel_h * kernel_w;
  __global const float* image_col = col + local_image * rows * positions;
  float sum = 0.0f;
  for (long kh = 0; kh < kernel_h; ++kh) {
    const long th = ih + pad_h - kh * dilation_h;
    if (th < 0 || th % stride_h != 0 || th / stride_h >= out_height) continue;
    for (long kw = 0; kw < kernel_w; ++kw) {
      const long tw = iw + pad_w - kw * dilation_w;
      if (tw < 0 || tw % stride_w != 0 || tw / stride_w >= out_width) continue;
      sum += image_col[((c * kernel_h + kh) * kernel_w + kw) * positions + (th / stride_h) * out_width + tw / stride_w];
    }
  }
  dx[first_image * channels * height * width + i] = sum;
}

// dB[m] = sum over images and positions of dY[n, m, p]: a work group per channel.
__kernel void channel_sum_f32(__global const float* dy, __global float* db, long images, long channels,
                              long positions, __local float* scratch) {
  const long m = get_group_id(0);
  float sum = 0.0f;
  for (long e = get_local_id(0); e < images * positions; e += get_local_size(0)) {
    sum += dy[((e / positions) * channels + m) * positions + e % positions];
  }
  sum = group_sum(sum, scratch);
  if (get_local_id(0) == 0) db[m] = sum;
}

// out[offset + e] (+)= sum over b < count of partial[b * size + e]: the per-image dW of one chunk added up in
// image order.
__kernel void sum_batches_f32(__global const float* partial, __global float* out, long offset, long size, long count,
                              int accumulate) {
  const long e = get_global_id(0);
  if (e >= size) return;
  float sum = accumulate ? out[offset + e] : 0.0f;
  for (long b = 0; b < count; ++b) sum += partial[b * size + e];
  out[offset + e] = sum;
}
