// A direct 2-D convolution for channels-last activations with a short reduction — the first layer of an image net:
// 3x3 or 5x5 over one channel (digits), 3x3 over three (RGB). Each output position's channels are summed in vector
// registers with the weights of every tap held in registers across an output row. oneDNN's brgconv runs such a
// layer far below the core's peak (its GEMM formulation has a reduction of only C * KH * KW): the 28x28 digits'
// 3x3 convolution to 32 channels took 0.27-0.30 ms on a Zen 5 core where this takes 0.17 ms.
#ifndef TRAIND_ENGINE_OPS_DIRECT_CONV_H_
#define TRAIND_ENGINE_OPS_DIRECT_CONV_H_

#include <cstdint>

#include "engine/core/thread_pool.h"

namespace traind::engine {

// One 2-D convolution, group 1, dilation 1. Dims in ONNX's meaning: X [N, H, W, C] and Y [N, OH, OW, M] in memory
// (channels last), W [M, C, KH, KW], bias [M] or none; OH and OW as Conv computes them from the padding.
struct DirectConvGeometry {
  int64_t batch, height, width, in_channels;
  int64_t out_height, out_width, out_channels;
  int64_t kernel_height, kernel_width;
  int64_t stride_height, stride_width;
  int64_t pad_top, pad_left;  // The bottom and right padding follow from the output size.
};

// Whether DirectConv runs this geometry: C * KH * KW of 9 with M of 16, 32 or 48, or of 25 or 27 with M = 16 (the
// weights must fit in registers), every dim positive.
bool DirectConvApplies(const DirectConvGeometry& g);

// y = conv(x, w) + bias, each output value summed over the taps in (kh, kw, c) order starting from the bias.
// Only where DirectConvApplies.
void DirectConv(const DirectConvGeometry& g, const float* x, const float* w, const float* bias, float* y,
                const ThreadPool& threads);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_DIRECT_CONV_H_
