// Pooling window helpers shared by the pooling kernels (pool_ops.cc) and their fused gradients (pool_grad.cc).
#ifndef TRAIND_ENGINE_OPS_POOL_WINDOW_H_
#define TRAIND_ENGINE_OPS_POOL_WINDOW_H_

#include <algorithm>
#include <cstdint>
#include <limits>

#include "engine/ops/spatial_attributes.h"

namespace traind::engine {

// A window geometry padded to exactly 3 spatial dims with leading unit dims, so one loop nest
// serves 1-D, 2-D and 3-D pooling.
struct Window3 {
  int64_t input[3], output[3], kernel[3], strides[3], dilations[3], pad_begin[3], pad_end[3];

  explicit Window3(const WindowGeometry& g) {
    const size_t lead = 3 - g.rank();  // Unit dims in front of the real spatial dims.
    for (size_t j = 0; j < lead; ++j) {
      input[j] = output[j] = kernel[j] = strides[j] = dilations[j] = 1;
      pad_begin[j] = pad_end[j] = 0;
    }
    for (size_t i = 0; i < g.rank(); ++i) {
      input[lead + i] = g.input[i];
      output[lead + i] = g.output[i];
      kernel[lead + i] = g.kernel[i];
      strides[lead + i] = g.strides[i];
      dilations[lead + i] = g.dilations[i];
      pad_begin[lead + i] = g.pad_begin[i];
      pad_end[lead + i] = g.pad_end[i];
    }
  }
  int64_t input_size() const { return input[0] * input[1] * input[2]; }
  int64_t output_size() const { return output[0] * output[1] * output[2]; }
};

// The kernel taps of output position `o` along one dim whose input coordinate lies in
// [low, high): taps [*first, *last). Tap t reads coordinate o * stride - pad_begin + t * dilation.
inline void TapRange(int64_t o, int64_t stride, int64_t pad_begin, int64_t kernel, int64_t dilation, int64_t low,
                     int64_t high, int64_t* first, int64_t* last) {
  const int64_t start = o * stride - pad_begin;
  // Smallest tap at or past `low`, and smallest tap at or past `high` (ceiling divisions).
  const int64_t begin_tap = start >= low ? 0 : (low - start + dilation - 1) / dilation;
  const int64_t end_tap = start >= high ? 0 : (high - start + dilation - 1) / dilation;
  *first = std::min(begin_tap, kernel);
  *last = std::max(std::min(end_tap, kernel), *first);
}

// The common 2x2, stride 2 pooling with every window inside the input (no padding, no dilation), which MaxPool and
// MaxPoolGrad run with branch-free vector code over runs of windows (the `*2x2*Row` kernels): the first maximum
// of a window in row-major order a b / e d, found with selects.
inline bool IsSimple2x2(const Window3& w) {
  return w.input[0] == 1 && w.kernel[1] == 2 && w.kernel[2] == 2 && w.strides[1] == 2 && w.strides[2] == 2 &&
         w.dilations[1] == 1 && w.dilations[2] == 1 && w.pad_begin[1] == 0 && w.pad_begin[2] == 0 &&
         2 * w.output[1] <= w.input[1] && 2 * w.output[2] <= w.input[2];
}

// Rows of fewer windows than this (7 or 14 in small CNNs) would run only a row kernel's scalar tail: the 2x2
// kernels pack the covered columns of up to k2x2PackedWindows windows' row pairs back to back (PackRowPairs; the
// copies stay in L1) and run the row kernel once over all of them.
constexpr int64_t k2x2ShortRow = 32;
constexpr int64_t k2x2PackedWindows = 1024;

// Copies the covered columns (2 * output[2]) of row pairs [first, first + pairs) of a plane `x` into `top` and
// `bottom`, back to back.
template <typename T>
void PackRowPairs(const Window3& w, const T* x, int64_t first, int64_t pairs, T* top, T* bottom) {
  const int64_t width = w.input[2], covered = 2 * w.output[2];
  for (int64_t k = 0; k < pairs; ++k) {
    const T* source = x + 2 * (first + k) * width;
    std::copy_n(source, covered, top + k * covered);
    std::copy_n(source + width, covered, bottom + k * covered);
  }
}

// The taps of every 2-D window (w.input[0] == 1, all output[0] == 1), output positions in row-major order and each
// window's taps in row-major order: tap(position, offset, first) per tap, offset = ih * W + iw its input position
// and `first` true for the window's first tap; then done(position, any) once the window's taps are through (any:
// the window had a tap).
template <typename Tap, typename Done>
void ForEachWindowTap(const Window3& w, Tap tap, Done done) {
  int64_t position = 0;
  for (int64_t oh = 0; oh < w.output[1]; ++oh) {
    int64_t h0, h1;
    TapRange(oh, w.strides[1], w.pad_begin[1], w.kernel[1], w.dilations[1], 0, w.input[1], &h0, &h1);
    for (int64_t ow = 0; ow < w.output[2]; ++ow, ++position) {
      int64_t w0, w1;
      TapRange(ow, w.strides[2], w.pad_begin[2], w.kernel[2], w.dilations[2], 0, w.input[2], &w0, &w1);
      const int64_t sh = oh * w.strides[1] - w.pad_begin[1];
      const int64_t sw = ow * w.strides[2] - w.pad_begin[2];
      bool first = true;
      for (int64_t kh = h0; kh < h1; ++kh) {
        const int64_t ih = sh + kh * w.dilations[1];
        for (int64_t kw = w0; kw < w1; ++kw) {
          tap(position, ih * w.input[2] + sw + kw * w.dilations[2], first);
          first = false;
        }
      }
      done(position, !first);
    }
  }
}

// Channels-last max pooling of one image [H, W, C] (2-D windows: w.input[0] == 1, all output[0] == 1): for every
// output position, per channel the first maximum of its window in row-major tap order (PoolReference's rule: the
// first tap, then strictly greater; no tap at all leaves lowest()), the channels as the inner, vectorised loop.
// Calls visit(output_position, best, best_offsets) with `channels` values each; best_offsets[c] is the input
// position (ih * W + iw) of channel c's maximum, or -1 without a tap. `best` / `best_offsets` are scratch of
// `channels` elements.
template <typename T, typename Visit>
void ChannelsLastMaxWindows(const Window3& w, int64_t channels, const T* __restrict image, T* __restrict best,
                            int64_t* __restrict best_offsets, Visit visit) {
  ForEachWindowTap(
      w,
      [&](int64_t, int64_t offset, bool first) {
        // Local restrict pointers: through the captured references GCC assumes they may alias and blends slower.
        const T* __restrict tap = image + offset * channels;
        T* __restrict values = best;
        int64_t* __restrict offsets = best_offsets;
        const int64_t n = channels;
        if (first) {
          for (int64_t c = 0; c < n; ++c) {
            values[c] = tap[c];
            offsets[c] = offset;
          }
          return;
        }
        for (int64_t c = 0; c < n; ++c) {
          const bool greater = tap[c] > values[c];
          values[c] = greater ? tap[c] : values[c];
          offsets[c] = greater ? offset : offsets[c];
        }
      },
      [&](int64_t position, bool any) {
        if (!any) {
          for (int64_t c = 0; c < channels; ++c) {
            best[c] = std::numeric_limits<T>::lowest();
            best_offsets[c] = -1;
          }
        }
        visit(position, static_cast<const T*>(best), static_cast<const int64_t*>(best_offsets));
      });
}

// ChannelsLastMaxWindows' maxima without their positions (the forward pass has no use for them): the same rule,
// written straight into `out` ([OH, OW, C]). Without the int64 offsets the inner loop is one compare-and-blend per
// vector of channels instead of three; MaxPool over cnn's 32- and 64-channel maps ran 2-3x faster.
// One output row of the 2x2, stride-2 max pool of a channels-last image: the maxima of the windows over the input
// rows `top` and `bottom` (each at least 2 * out_width positions of `channels` values) into out [out_width, C]. The
// four taps of a window are two adjacent positions of two adjacent rows, with no tap arithmetic per window.
template <typename T>
inline void ChannelsLastMax2x2Row(const T* __restrict top, const T* __restrict bottom, int64_t out_width,
                                  int64_t channels, T* __restrict out) {
  for (int64_t ow = 0; ow < out_width; ++ow, out += channels, top += 2 * channels, bottom += 2 * channels) {
    for (int64_t c = 0; c < channels; ++c) {
      T best = top[c];
      best = top[channels + c] > best ? top[channels + c] : best;
      best = bottom[c] > best ? bottom[c] : best;
      out[c] = bottom[channels + c] > best ? bottom[channels + c] : best;
    }
  }
}

template <typename T>
void ChannelsLastMaxValues(const Window3& w, int64_t channels, const T* __restrict image, T* __restrict out) {
  // The common 2x2 window of stride 2 with every tap inside (no padding).
  if (w.kernel[1] == 2 && w.kernel[2] == 2 && w.strides[1] == 2 && w.strides[2] == 2 && w.dilations[1] == 1 &&
      w.dilations[2] == 1 && w.pad_begin[1] == 0 && w.pad_begin[2] == 0 && 2 * w.output[1] <= w.input[1] &&
      2 * w.output[2] <= w.input[2]) {
    const int64_t row = w.input[2] * channels;
    for (int64_t oh = 0; oh < w.output[1]; ++oh) {
      const T* top = image + 2 * oh * row;
      ChannelsLastMax2x2Row(top, top + row, w.output[2], channels, out + oh * w.output[2] * channels);
    }
    return;
  }
  ForEachWindowTap(
      w,
      [&](int64_t position, int64_t offset, bool first) {
        const T* __restrict tap = image + offset * channels;
        T* __restrict best = out + position * channels;
        const int64_t n = channels;
        if (first) {
          std::copy_n(tap, n, best);
          return;
        }
        for (int64_t c = 0; c < n; ++c) best[c] = tap[c] > best[c] ? tap[c] : best[c];
      },
      [&](int64_t position, bool any) {
        if (!any) std::fill_n(out + position * channels, channels, std::numeric_limits<T>::lowest());
      });
}

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_POOL_WINDOW_H_
