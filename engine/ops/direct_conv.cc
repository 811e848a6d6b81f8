#include "engine/ops/direct_conv.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace traind::engine {
namespace {

typedef float Lanes __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;

// The vector registers the weights may take (of 32): the rest hold an output position's accumulators and the
// broadcast input value.
constexpr int64_t kWeightRegisters = 27;

// One output row: every output position sums its kTaps taps (in [kh][kw][c] order, from the bias) into kVectors
// accumulators, the weights of all taps held in registers across the row. Consecutive positions are independent
// chains that overlap in the core's out-of-order window. Tap t of position ow reads window[ow * pixel_step +
// offsets[t]].
template <int kVectors, int kTaps>
void ConvRow(const float* window, const int64_t* offsets, int64_t pixel_step, const float* packed,
             const Lanes (&start)[kVectors], int64_t out_width, float* out) {
  static_assert(kVectors * kTaps <= kWeightRegisters);
  constexpr int64_t kChannels = kVectors * kLanes;
  Lanes weights[kTaps][kVectors];
  for (int t = 0; t < kTaps; ++t) {
    for (int v = 0; v < kVectors; ++v) {
      std::memcpy(&weights[t][v], packed + t * kChannels + v * kLanes, sizeof(Lanes));
    }
  }
  int64_t tap_offsets[kTaps];
  std::copy_n(offsets, kTaps, tap_offsets);
  for (int64_t ow = 0; ow < out_width; ++ow, out += kChannels) {
    Lanes acc[kVectors];
    for (int v = 0; v < kVectors; ++v) acc[v] = start[v];
    const float* first = window + ow * pixel_step;
    for (int t = 0; t < kTaps; ++t) {
      const float value = first[tap_offsets[t]];
      for (int v = 0; v < kVectors; ++v) acc[v] += value * weights[t][v];
    }
    std::memcpy(out, acc, sizeof(acc));
  }
}

// Output rows [row_begin, row_end) of the N * OH rows. `packed` holds the weights as [kh][kw][c][M].
template <int kVectors, int kTaps>
void ConvRows(const DirectConvGeometry& g, const float* x, const float* packed, const float* bias, float* y,
              int64_t row_begin, int64_t row_end) {
  constexpr int64_t kChannels = kVectors * kLanes;
  const int64_t c = g.in_channels;
  // The KH input rows under one output row, zero-padded: window column j holds input column j - pad_left, for
  // the columns the windows cover.
  const int64_t window_width = (g.out_width - 1) * g.stride_width + g.kernel_width;
  const int64_t window_row = window_width * c;
  const int64_t first_valid = std::min(g.pad_left, window_width);
  const int64_t end_valid = std::min(g.pad_left + g.width, window_width);
  std::vector<float> window(static_cast<size_t>(g.kernel_height * window_row));
  int64_t offsets[kTaps];
  for (int64_t kh = 0, t = 0; kh < g.kernel_height; ++kh) {
    for (int64_t k = 0; k < g.kernel_width * c; ++k) offsets[t++] = kh * window_row + k;
  }
  Lanes start[kVectors];
  for (int v = 0; v < kVectors; ++v) {
    start[v] = Lanes{};
    if (bias != nullptr) std::memcpy(&start[v], bias + v * kLanes, sizeof(Lanes));
  }
  for (int64_t row = row_begin; row < row_end; ++row) {
    const int64_t n = row / g.out_height, oh = row % g.out_height;
    for (int64_t kh = 0; kh < g.kernel_height; ++kh) {
      float* dst = window.data() + kh * window_row;
      const int64_t ih = oh * g.stride_height - g.pad_top + kh;
      if (ih < 0 || ih >= g.height || end_valid <= first_valid) {
        std::fill_n(dst, window_row, 0.0f);
        continue;
      }
      std::fill_n(dst, first_valid * c, 0.0f);
      std::memcpy(dst + first_valid * c, x + ((n * g.height + ih) * g.width + first_valid - g.pad_left) * c,
                  static_cast<size_t>((end_valid - first_valid) * c) * sizeof(float));
      std::fill(dst + end_valid * c, dst + window_row, 0.0f);
    }
    ConvRow<kVectors, kTaps>(window.data(), offsets, g.stride_width * c, packed, start, g.out_width,
                             y + row * g.out_width * kChannels);
  }
}

using ConvRowsFn = void (*)(const DirectConvGeometry&, const float*, const float*, const float*, float*, int64_t,
                            int64_t);

// The instantiation for this geometry's taps (C * KH * KW) and output vectors (M / 16), or null.
ConvRowsFn SelectConvRows(const DirectConvGeometry& g) {
  if (g.out_channels <= 0 || g.out_channels % kLanes != 0) return nullptr;
  const int64_t taps = g.in_channels * g.kernel_height * g.kernel_width, vectors = g.out_channels / kLanes;
  if (taps == 9 && vectors == 1) return &ConvRows<1, 9>;  // 3x3 over 1 channel
  if (taps == 9 && vectors == 2) return &ConvRows<2, 9>;
  if (taps == 9 && vectors == 3) return &ConvRows<3, 9>;
  if (taps == 25 && vectors == 1) return &ConvRows<1, 25>;  // 5x5 over 1 channel
  if (taps == 27 && vectors == 1) return &ConvRows<1, 27>;  // 3x3 over 3 channels
  return nullptr;
}

}  // namespace

bool DirectConvApplies(const DirectConvGeometry& g) {
  const bool positive = g.batch > 0 && g.height > 0 && g.width > 0 && g.in_channels > 0 && g.out_height > 0 &&
                        g.out_width > 0 && g.kernel_height > 0 && g.kernel_width > 0 && g.stride_height > 0 &&
                        g.stride_width > 0 && g.pad_top >= 0 && g.pad_left >= 0;
  return positive && SelectConvRows(g) != nullptr;
}

void DirectConv(const DirectConvGeometry& g, const float* x, const float* w, const float* bias, float* y,
                const ThreadPool& threads) {
  const ConvRowsFn conv_rows = SelectConvRows(g);
  const int64_t m = g.out_channels, c = g.in_channels, kh_count = g.kernel_height, kw_count = g.kernel_width;
  // [kh][kw][c][M]: the M weights of one tap are the vectors its input value multiplies.
  alignas(64) float packed[kWeightRegisters * kLanes];
  for (int64_t o = 0; o < m; ++o) {
    for (int64_t ci = 0; ci < c; ++ci) {
      for (int64_t kh = 0; kh < kh_count; ++kh) {
        for (int64_t kw = 0; kw < kw_count; ++kw) {
          packed[((kh * kw_count + kw) * c + ci) * m + o] = w[((o * c + ci) * kh_count + kh) * kw_count + kw];
        }
      }
    }
  }
  const int64_t grain = std::max<int64_t>(1, kParallelElementThreshold / std::max<int64_t>(1, g.out_width * m));
  threads.ParallelFor(g.batch * g.out_height, grain,
                      [&](int64_t begin, int64_t end) { conv_rows(g, x, packed, bias, y, begin, end); });
}

}  // namespace traind::engine
