// MaxPoolGrad (domain ai.traind.training): MaxPool's input gradient without the Indices output.
//
//   MaxPoolGrad(dY, X) -> dX, attributes exactly those of the forward MaxPool.
//
// Each output window's maximum is found again in X — the first maximum in row-major window order, as the forward
// kernel and PyTorch choose it — and its dY is added to that input element. Recomputing costs one read of X;
// in exchange the forward MaxPool runs its fast oneDNN path (an Indices output would force the direct loop) and
// no int64 index tensor is kept alive from the forward to the backward pass.
#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/ops/pool_ops.h"
#include "engine/ops/pool_window.h"
#include "engine/ops/spatial_attributes.h"
#include "engine/runtime/dispatch.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {
namespace {

// For each spatial dim and output index: the first and last valid tap and the window start.
struct TapTable {
  std::vector<int64_t> first[3], last[3], start[3];

  explicit TapTable(const Window3& w) {
    for (int j = 0; j < 3; ++j) {
      for (int64_t o = 0; o < w.output[j]; ++o) {
        int64_t a, b;
        TapRange(o, w.strides[j], w.pad_begin[j], w.kernel[j], w.dilations[j], 0, w.input[j], &a, &b);
        first[j].push_back(a);
        last[j].push_back(b);
        start[j].push_back(o * w.strides[j] - w.pad_begin[j]);
      }
    }
  }
};

// One output row of the 2x2 case: each window's element values a b / e d and its gradient become the four
// gradient values, every one written (the gradient or 0). Selects only, no && / || (GCC does not if-convert
// short-circuit conditions, and a branch per element defeats vectorisation); kept separate from the row loop,
// with restrict pointers, so that it vectorises (stride-2 loads and stores become permutes).
template <typename T>
void MaxPool2x2BackwardRow(const T* __restrict top, const T* __restrict bottom, const T* __restrict g,
                           T* __restrict dx_top, T* __restrict dx_bottom, int64_t outputs) {
  for (int64_t ow = 0; ow < outputs; ++ow) {
    const T a = top[2 * ow], b = top[2 * ow + 1], e = bottom[2 * ow], d = bottom[2 * ow + 1], grad = g[ow];
    // Row-major window order a, b, e, d; a later element wins only when strictly greater than every earlier one
    // (the first maximum wins, as in the forward kernel).
    const bool b_wins = b > a;
    const T ab = b_wins ? b : a;
    const bool e_wins = e > ab;
    const T abe = e_wins ? e : ab;
    const bool d_wins = d > abe;
    const T unless_d = d_wins ? T(0) : grad;         // the gradient if d does not win
    const T unless_e_or_d = e_wins ? T(0) : unless_d;  // ... and e does not either
    dx_top[2 * ow] = b_wins ? T(0) : unless_e_or_d;
    dx_top[2 * ow + 1] = b_wins ? unless_e_or_d : T(0);
    dx_bottom[2 * ow] = e_wins ? unless_d : T(0);
    dx_bottom[2 * ow + 1] = d_wins ? grad : T(0);
  }
}

template <typename T>
void MaxPool2x2BackwardPlane(const Window3& w, const T* x, const T* dy, T* dx) {
  const int64_t width = w.input[2];
  const int64_t outputs = w.output[2];
  const int64_t covered_rows = 2 * w.output[1], covered_columns = 2 * outputs;
  if (outputs < k2x2ShortRow) {  // Short rows: packed (see k2x2ShortRow).
    T top[2 * k2x2PackedWindows], bottom[2 * k2x2PackedWindows];
    T dx_top[2 * k2x2PackedWindows], dx_bottom[2 * k2x2PackedWindows];
    const int64_t pairs_per_block = k2x2PackedWindows / outputs;
    for (int64_t first = 0; first < w.output[1]; first += pairs_per_block) {
      const int64_t pairs = std::min(pairs_per_block, w.output[1] - first);
      PackRowPairs(w, x, first, pairs, top, bottom);
      MaxPool2x2BackwardRow(top, bottom, dy + first * outputs, dx_top, dx_bottom, pairs * outputs);
      for (int64_t k = 0; k < pairs; ++k) {
        T* target = dx + 2 * (first + k) * width;
        std::copy_n(dx_top + k * covered_columns, covered_columns, target);
        std::copy_n(dx_bottom + k * covered_columns, covered_columns, target + width);
        for (int64_t column = covered_columns; column < width; ++column) target[column] = target[width + column] = T(0);
      }
    }
  } else {
    for (int64_t oh = 0; oh < w.output[1]; ++oh) {
      const T* top = x + 2 * oh * width;
      T* dx_top = dx + 2 * oh * width;
      MaxPool2x2BackwardRow(top, top + width, dy + oh * outputs, dx_top, dx_top + width, outputs);
      for (int64_t column = covered_columns; column < width; ++column) dx_top[column] = dx_top[width + column] = T(0);
    }
  }
  std::fill(dx + covered_rows * width, dx + w.input[1] * width, T(0));  // Rows no window reaches.
}

template <typename T>
void MaxPoolBackwardPlane(const Window3& w, const TapTable& taps, const T* x, const T* dy, T* dx) {
  if (IsSimple2x2(w)) return MaxPool2x2BackwardPlane(w, x, dy, dx);
  const int64_t in_size = w.input[0] * w.input[1] * w.input[2];
  std::fill_n(dx, in_size, T(0));
  int64_t o = 0;
  for (int64_t od = 0; od < w.output[0]; ++od) {
    const int64_t d0 = taps.first[0][od], d1 = taps.last[0][od], sd = taps.start[0][od];
    for (int64_t oh = 0; oh < w.output[1]; ++oh) {
      const int64_t h0 = taps.first[1][oh], h1 = taps.last[1][oh], sh = taps.start[1][oh];
      for (int64_t ow = 0; ow < w.output[2]; ++ow, ++o) {
        const int64_t w0 = taps.first[2][ow], w1 = taps.last[2][ow], sw = taps.start[2][ow];
        T best = std::numeric_limits<T>::lowest();
        int64_t best_offset = -1;
        for (int64_t kd = d0; kd < d1; ++kd) {
          const int64_t id = sd + kd * w.dilations[0];
          for (int64_t kh = h0; kh < h1; ++kh) {
            const int64_t row = (id * w.input[1] + sh + kh * w.dilations[1]) * w.input[2] + sw;
            for (int64_t kw = w0; kw < w1; ++kw) {
              const int64_t offset = row + kw * w.dilations[2];
              // Strictly greater: the first maximum wins.
              if (x[offset] > best || best_offset < 0) {
                best = x[offset];
                best_offset = offset;
              }
            }
          }
        }
        if (best_offset >= 0) dx[best_offset] += dy[o];
      }
    }
  }
}

class MaxPoolGradKernel final : public Kernel {
 public:
  // `channels_last`: dY, X and dX are [N, H, W, C] in memory (the channels-last plan pass), 2-D windows only.
  MaxPoolGradKernel(PoolAttributes attributes, bool channels_last)
      : attributes_(std::move(attributes)), channels_last_(channels_last) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* dy, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(1));
    if (channels_last_) return ComputeChannelsLast(context, *dy, *x);
    TRAIND_ASSIGN_OR_RETURN(const PoolShape shape, CheckMaxPoolGradInputs(*dy, *x, attributes_));
    if (shape.window.rank() > 3) return absl::UnimplementedError("MaxPoolGrad: more than 3 spatial dims");
    const WindowGeometry& geometry = shape.window;
    const Shape& y_shape = shape.output;
    const Window3 window(geometry);
    const TapTable taps(window);
    const int64_t planes = x->dim(0) * x->dim(1);
    const int64_t in_size = DimProduct(x->shape(), 2, x->shape().size());
    const int64_t out_size = DimProduct(y_shape, 2, y_shape.size());
    return DispatchAmong<TRAIND_FLOAT_TYPES>(x->dtype(), "MaxPoolGrad", [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      TRAIND_ASSIGN_OR_RETURN(Tensor * dx, context.AllocateOutput(0, x->dtype(), x->shape()));
      const T* in = x->data<T>();
      const T* grad = dy->data<T>();
      T* out = dx->mutable_data<T>();
      context.threads().ParallelFor(
          planes, std::max<int64_t>(1, kParallelElementThreshold / std::max<int64_t>(1, in_size)),
          [&](int64_t begin, int64_t end) {
            for (int64_t p = begin; p < end; ++p) {
              MaxPoolBackwardPlane<T>(window, taps, in + p * in_size, grad + p * out_size, out + p * in_size);
            }
          });
      return absl::OkStatus();
    });
  }

 private:
  // Each dY element added to the input element its window's first maximum came from, per image (one thread per
  // image: overlapping windows add to the same elements).
  absl::Status ComputeChannelsLast(KernelContext& context, const Tensor& dy, const Tensor& x) const {
    if (x.rank() != 4 || dy.rank() != 4) {
      return absl::InvalidArgumentError(absl::StrCat("MaxPoolGrad (channels_last): dY ", dy.DebugString(), " and X ",
                                                     x.DebugString(), " must be [N, H, W, C]"));
    }
    const Tensor dy_channels_first = dy.Reshaped(ChannelsFirstShape(dy.shape()));
    const Tensor x_channels_first = x.Reshaped(ChannelsFirstShape(x.shape()));
    TRAIND_ASSIGN_OR_RETURN(const PoolShape shape, CheckMaxPoolGradInputs(dy_channels_first, x_channels_first, attributes_));
    const Window3 window(shape.window);
    const int64_t batch = x.dim(0), channels = x.dim(3);
    const int64_t in_size = window.input_size() * channels, out_size = window.output_size() * channels;
    return DispatchAmong<TRAIND_FLOAT_TYPES>(x.dtype(), "MaxPoolGrad", [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      TRAIND_ASSIGN_OR_RETURN(Tensor * dx, context.AllocateOutput(0, x.dtype(), x.shape()));
      const T* in = x.data<T>();
      const T* grad = dy.data<T>();
      T* out = dx->mutable_data<T>();
      context.threads().ParallelFor(batch, 1, [&](int64_t begin, int64_t end) {
        std::vector<T> best(static_cast<size_t>(channels));
        std::vector<int64_t> best_offsets(static_cast<size_t>(channels));
        for (int64_t n = begin; n < end; ++n) {
          T* image_dx = out + n * in_size;
          std::fill_n(image_dx, in_size, T(0));
          const T* image_dy = grad + n * out_size;
          ChannelsLastMaxWindows<T>(window, channels, in + n * in_size, best.data(), best_offsets.data(),
                                    [&](int64_t position, const T*, const int64_t* offsets) {
                                      const T* g = image_dy + position * channels;
                                      for (int64_t c = 0; c < channels; ++c) {
                                        if (offsets[c] >= 0) image_dx[offsets[c] * channels + c] += g[c];
                                      }
                                    });
        }
      });
      return absl::OkStatus();
    });
  }

  PoolAttributes attributes_;
  bool channels_last_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateMaxPoolGradKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(PoolAttributes attributes, ParsePoolAttributes(init, /*max=*/true));
  TRAIND_ASSIGN_OR_RETURN(const int64_t channels_last, init.GetInt("channels_last", 0));
  if (channels_last != 0 && channels_last != 1) {
    return init.Error(absl::StrCat("attribute 'channels_last' must be 0 or 1, got ", channels_last));
  }
  return std::unique_ptr<Kernel>(new MaxPoolGradKernel(std::move(attributes), channels_last == 1));
}

}  // namespace traind::engine
