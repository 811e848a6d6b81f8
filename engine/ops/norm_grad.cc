// Fused normalisation gradients (domain ai.traind.training), each one parallel pass structure instead of the
// dozen broadcast elementwise / reduction nodes the standard-op rules emit:
//
//   BatchNormalizationGrad(dY, X, Scale) -> (dX, dScale, dB)   training mode, statistics over all axes but 1
//                                                               (channels_last = 1: but the last, [N, spatial..., C])
//   LayerNormalizationGrad(dY, X, Scale) -> (dX, dScale, dB)   over axes axis..rank-1, Scale of that shape
//
// With xhat = (x - mean) * inv, inv = 1 / sqrt(var + epsilon) (biased variance, recomputed from X in double, as
// the forward kernels compute it) and dxhat = dY * scale:
//   dScale = sum(dY * xhat),  dB = sum(dY)                              (over the statistics' groups)
//   dX = inv * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat))         (within each group)
// Every output is optional. Accumulations are in double.
#include "engine/ops/norm_grad.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/ops/norm_ops.h"
#include "engine/ops/row_statistics.h"
#include "engine/runtime/dispatch.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {

namespace {

absl::Status CheckSameShape(const char* op, const Tensor& dy, const Tensor& x, const Tensor& scale) {
  if (dy.shape() != x.shape() || dy.dtype() != x.dtype() || scale.dtype() != x.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": dY ", dy.DebugString(), " must match X ", x.DebugString(),
                                                   " and Scale ", scale.DebugString(), " its dtype"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BatchNormGradShape> CheckBatchNormGradInputs(const Tensor& dy, const Tensor& x, const Tensor& scale) {
  TRAIND_RETURN_IF_ERROR(CheckSameShape("BatchNormalizationGrad", dy, x, scale));
  if (x.rank() < 2 || scale.num_elements() != x.dim(1)) {
    return absl::InvalidArgumentError(absl::StrCat("BatchNormalizationGrad: X ", x.DebugString(), " and Scale ",
                                                   scale.DebugString(), " must be [N, C, ...] and [C]"));
  }
  BatchNormGradShape shape;
  shape.batch = x.dim(0);
  shape.channels = x.dim(1);
  shape.row = DimProduct(x.shape(), 2, x.shape().size());
  if (shape.batch * shape.row == 0) return absl::InvalidArgumentError("BatchNormalizationGrad: empty batch");
  return shape;
}

absl::StatusOr<LayerNormGradShape> CheckLayerNormGradInputs(const Tensor& dy, const Tensor& x, const Tensor& scale,
                                                            int64_t axis) {
  TRAIND_RETURN_IF_ERROR(CheckSameShape("LayerNormalizationGrad", dy, x, scale));
  TRAIND_ASSIGN_OR_RETURN(const int64_t normalized_axis, NormalizeAxis(axis, x.rank()));
  LayerNormGradShape shape;
  shape.rows = DimProduct(x.shape(), 0, static_cast<size_t>(normalized_axis));
  shape.row = DimProduct(x.shape(), static_cast<size_t>(normalized_axis), x.shape().size());
  if (scale.num_elements() != shape.row) {
    return absl::InvalidArgumentError(absl::StrCat("LayerNormalizationGrad: Scale ", scale.DebugString(),
                                                   " must have the normalized size of X ", x.DebugString()));
  }
  return shape;
}

namespace {

// Allocates the outputs the graph uses: dX shaped as X, dScale and dBias shaped as Scale; unused ones stay null.
template <typename T>
absl::Status AllocateRequestedGradients(KernelContext& context, const Tensor& x, const Tensor& scale, T** dx,
                                        T** dscale, T** dbias) {
  T** outputs[3] = {dx, dscale, dbias};
  for (int i = 0; i < 3; ++i) {
    if (!context.wants_output(i)) continue;
    TRAIND_ASSIGN_OR_RETURN(Tensor * out, context.AllocateOutput(i, x.dtype(), i == 0 ? x.shape() : scale.shape()));
    *outputs[i] = out->mutable_data<T>();
  }
  return absl::OkStatus();
}


// The four sums BatchNormalizationGrad needs over one contiguous run, in one read of x and dy: (x - shift),
// (x - shift)^2, dy and dy * (x - shift), added to moments[0..3]. One 64-byte vector of lanes of T per sum (GCC
// vector extensions: as arrays of lanes, GCC vectorised across iterations and shuffled every element), flushed into
// the double totals every kChunk elements, so each lane adds at most kChunk / lanes values in T.
template <typename T>
void AddBatchNormMoments(const T* __restrict x, const T* __restrict dy, int64_t n, T shift, double* moments) {
  typedef T Lanes __attribute__((vector_size(64)));
  constexpr int64_t kLanes = 64 / sizeof(T);
  constexpr int64_t kChunk = 1024;
  for (int64_t chunk = 0; chunk < n; chunk += kChunk) {
    const int64_t end = std::min(n, chunk + kChunk);
    Lanes s = {}, q = {}, g = {}, gx = {};
    int64_t i = chunk;
    for (; i + kLanes <= end; i += kLanes) {
      Lanes d, grad;
      std::memcpy(&d, x + i, sizeof(d));  // unaligned vector loads
      std::memcpy(&grad, dy + i, sizeof(grad));
      d -= shift;
      s += d;
      q += d * d;
      g += grad;
      gx += grad * d;
    }
    double totals[4] = {0, 0, 0, 0};
    for (; i < end; ++i) {
      const double d = static_cast<double>(x[i] - shift);
      totals[0] += d;
      totals[1] += d * d;
      totals[2] += static_cast<double>(dy[i]);
      totals[3] += static_cast<double>(dy[i]) * d;
    }
    for (int64_t j = 0; j < kLanes; ++j) {
      totals[0] += static_cast<double>(s[j]);
      totals[1] += static_cast<double>(q[j]);
      totals[2] += static_cast<double>(g[j]);
      totals[3] += static_cast<double>(gx[j]);
    }
    for (int k = 0; k < 4; ++k) moments[k] += totals[k];
  }
}

// ------------------------------------------------------------------------------------------------
// BatchNormalizationGrad

class BatchNormGradKernel final : public Kernel {
 public:
  // `channels_last`: dY, X and dX are [N, spatial..., C] in memory (the channels-last plan pass).
  BatchNormGradKernel(float epsilon, bool channels_last) : epsilon_(epsilon), channels_last_(channels_last) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* dy, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* scale, context.RequiredInput(2));
    Tensor dy_channels_first, x_channels_first;  // Views in ONNX's order, for the checks.
    if (channels_last_) {
      dy_channels_first = dy->Reshaped(ChannelsFirstShape(dy->shape()));
      x_channels_first = x->Reshaped(ChannelsFirstShape(x->shape()));
    }
    TRAIND_ASSIGN_OR_RETURN(const BatchNormGradShape shape,
                            channels_last_ ? CheckBatchNormGradInputs(dy_channels_first, x_channels_first, *scale)
                                           : CheckBatchNormGradInputs(*dy, *x, *scale));
    const int64_t batch = shape.batch, channels = shape.channels, row = shape.row;
    const int64_t count = batch * row;
    // Rows of all channels in memory: channels-last, or NCHW without spatial extent ([N, C] after a Linear), whose
    // per-(n, c) rows would be single elements.
    const bool rows_of_channels = channels_last_ || row == 1;
    return DispatchAmong<TRAIND_FLOAT_TYPES>(x->dtype(), "BatchNormalizationGrad", [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      T *dx = nullptr, *dscale = nullptr, *dbias = nullptr;
      TRAIND_RETURN_IF_ERROR(AllocateRequestedGradients(context, *x, *scale, &dx, &dscale, &dbias));
      const T* in = x->data<T>();
      const T* grad = dy->data<T>();
      const T* gamma = scale->data<T>();
      const double n = static_cast<double>(count);
      std::vector<T> shifts(static_cast<size_t>(channels));
      // Per channel: sum (x - shift), sum (x - shift)^2, sum dy, sum dy * (x - shift), statistics around a value
      // near the channel's mean (no cancellation when |mean| >> stddev): SampledChannelShifts.
      std::vector<double> moments(static_cast<size_t>(4 * channels), 0.0);
      SampledChannelShifts<T>(in, count, channels, rows_of_channels, row, shifts.data());
      auto sum_moments = [&] {
        std::fill(moments.begin(), moments.end(), 0.0);
        if (rows_of_channels) {
          ChannelsLastMoments(in, grad, count, channels, shifts.data(), moments.data(), context);
        } else {
          ChannelsFirstMoments(in, grad, batch, channels, row, shifts.data(), moments.data(), context);
        }
      };
      sum_moments();
      // A shift far out in its channel (more than 2 standard deviations from the mean) leaves the sums
      // dominated by the shift, and dScale = sum(dy * (x - shift)) - mean * sum(dy) cancels most of their bits:
      // then once more, every channel shifted by its mean.
      bool shift_far_out = false;
      for (int64_t c = 0; c < channels; ++c) {
        const double shifted_mean = moments[4 * c] / n;
        const double var = std::max(0.0, moments[4 * c + 1] / n - shifted_mean * shifted_mean);
        shift_far_out = shift_far_out || shifted_mean * shifted_mean > 4.0 * var;
      }
      if (shift_far_out) {
        for (int64_t c = 0; c < channels; ++c) {
          shifts[c] = static_cast<T>(static_cast<double>(shifts[c]) + moments[4 * c] / n);
        }
        sum_moments();
      }
      // dx = inv * gamma * (dy - mean(dy) - xhat * mean(dy * xhat)) as one affine map of (dy, x - shift) per
      // channel: a * dy + b * (x - shift) + k, centred on the shift like the statistics.
      std::vector<T> dy_coefficients(static_cast<size_t>(channels)), x_coefficients(static_cast<size_t>(channels));
      std::vector<T> constants(static_cast<size_t>(channels));
      for (int64_t c = 0; c < channels; ++c) {
        const double* m = &moments[4 * c];
        const double sum = m[0], squares = m[1], sum_dy = m[2], sum_dy_x = m[3];
        const double shifted_mean = sum / n;
        const double var = std::max(0.0, squares / n - shifted_mean * shifted_mean);
        const double inv = 1.0 / std::sqrt(var + epsilon_);
        const double sum_dy_xhat = (sum_dy_x - shifted_mean * sum_dy) * inv;
        if (dscale != nullptr) dscale[c] = static_cast<T>(sum_dy_xhat);
        if (dbias != nullptr) dbias[c] = static_cast<T>(sum_dy);
        const double a = static_cast<double>(gamma[c]) * inv;
        const double mean_dy = sum_dy / n, mean_dy_xhat = sum_dy_xhat / n;
        const double b_coefficient = -a * mean_dy_xhat * inv;
        dy_coefficients[c] = static_cast<T>(a);
        x_coefficients[c] = static_cast<T>(b_coefficient);
        constants[c] = static_cast<T>(-a * mean_dy - b_coefficient * shifted_mean);
      }
      if (dx == nullptr) return absl::OkStatus();
      if (rows_of_channels) {
        // Rows of all channels; the channel is the vectorised inner loop.
        const int64_t grain = std::max<int64_t>(1, kParallelElementThreshold / std::max<int64_t>(1, channels));
        context.threads().ParallelFor(count, grain, [&](int64_t begin, int64_t end) {
          typedef T Lanes __attribute__((vector_size(64)));
          constexpr int64_t kLanes = 64 / sizeof(T);
          const int64_t vector_channels = channels / kLanes * kLanes;
          // Local copies: the stores below could alias the vectors' own pointers, which GCC would then reload.
          const T* const a_data = dy_coefficients.data();
          const T* const b_data = x_coefficients.data();
          const T* const k_data = constants.data();
          const T* const shift_data = shifts.data();
          for (int64_t r = begin; r < end; ++r) {
            const T* g = grad + r * channels;
            const T* xs = in + r * channels;
            T* out = dx + r * channels;
            int64_t c = 0;
            for (; c < vector_channels; c += kLanes) {
              Lanes ta, tb, tk, shift, g_v, x_v;
              std::memcpy(&ta, a_data + c, sizeof(ta));
              std::memcpy(&tb, b_data + c, sizeof(tb));
              std::memcpy(&tk, k_data + c, sizeof(tk));
              std::memcpy(&shift, shift_data + c, sizeof(shift));
              std::memcpy(&g_v, g + c, sizeof(g_v));
              std::memcpy(&x_v, xs + c, sizeof(x_v));
              const Lanes result = ta * g_v + tb * (x_v - shift) + tk;
              std::memcpy(out + c, &result, sizeof(result));
            }
            for (; c < channels; ++c) {
              out[c] = dy_coefficients[c] * g[c] + x_coefficients[c] * (xs[c] - shifts[c]) + constants[c];
            }
          }
        });
        return absl::OkStatus();
      }
      const int64_t rows = batch * channels;
      const int64_t grain = std::max<int64_t>(1, kParallelElementThreshold / std::max<int64_t>(1, row));
      context.threads().ParallelFor(rows, grain, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const int64_t c = r % channels;
          const T ta = dy_coefficients[c], tb = x_coefficients[c], tk = constants[c], shift = shifts[c];
          const T* __restrict g = grad + r * row;
          const T* __restrict xs = in + r * row;
          T* __restrict out = dx + r * row;
          for (int64_t i = 0; i < row; ++i) out[i] = ta * g[i] + tb * (xs[i] - shift) + tk;
        }
      });
      return absl::OkStatus();
    });
  }

 private:
  // [N, C, row] in memory. Both passes walk the tensors in memory order, one [b, c] row at a time (a
  // channel-by-channel walk starts a new stream every row and runs at a fraction of the memory bandwidth). Each
  // row's moments are kept, and a channel's rows are added in batch order, so the results do not depend on the
  // split among threads.
  template <typename T>
  static void ChannelsFirstMoments(const T* in, const T* grad, int64_t batch, int64_t channels, int64_t row,
                                   const T* shifts, double* moments, KernelContext& context) {
    const int64_t rows = batch * channels;
    const int64_t grain = std::max<int64_t>(1, kParallelElementThreshold / std::max<int64_t>(1, row));
    std::vector<double> row_moments(static_cast<size_t>(4 * rows), 0.0);
    context.threads().ParallelFor(rows, grain, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        AddBatchNormMoments(in + r * row, grad + r * row, row, shifts[r % channels], &row_moments[4 * r]);
      }
    });
    for (int64_t c = 0; c < channels; ++c) {
      for (int64_t b = 0; b < batch; ++b) {
        for (int k = 0; k < 4; ++k) moments[4 * c + k] += row_moments[4 * (b * channels + c) + k];
      }
    }
  }

  // [count, C] in memory. Summed per fixed block of rows (independent of the thread count), the blocks added in
  // order in double: deterministic whatever the split among threads.
  template <typename T>
  static void ChannelsLastMoments(const T* in, const T* grad, int64_t count, int64_t channels, const T* shifts,
                                  double* moments, KernelContext& context) {
    const int64_t rows_per_block = ChannelsLastRowsPerBlock(channels);
    const int64_t blocks = (count + rows_per_block - 1) / rows_per_block;
    std::vector<double> partials(static_cast<size_t>(blocks * 4 * channels), 0.0);
    context.threads().ParallelFor(blocks, 1, [&](int64_t block_begin, int64_t block_end) {
      for (int64_t block = block_begin; block < block_end; ++block) {
        const int64_t first = block * rows_per_block, last = std::min(count, first + rows_per_block);
        AddChannelsLastMoments(in, grad, channels, first, last, shifts, partials.data() + block * 4 * channels);
      }
    });
    for (int64_t block = 0; block < blocks; ++block) {
      const double* part = partials.data() + block * 4 * channels;
      for (int64_t c = 0; c < channels; ++c) {
        for (int k = 0; k < 4; ++k) moments[4 * c + k] += part[k * channels + c];
      }
    }
  }

  float epsilon_;
  bool channels_last_;
};

// ------------------------------------------------------------------------------------------------
// LayerNormalizationGrad

class LayerNormGradKernel final : public Kernel {
 public:
  LayerNormGradKernel(int64_t axis, float epsilon) : axis_(axis), epsilon_(epsilon) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* dy, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* scale, context.RequiredInput(2));
    TRAIND_ASSIGN_OR_RETURN(const LayerNormGradShape shape, CheckLayerNormGradInputs(*dy, *x, *scale, axis_));
    const int64_t rows = shape.rows, row = shape.row;
    return DispatchAmong<TRAIND_FLOAT_TYPES>(x->dtype(), "LayerNormalizationGrad", [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      T *dx = nullptr, *dscale = nullptr, *dbias = nullptr;
      TRAIND_RETURN_IF_ERROR(AllocateRequestedGradients(context, *x, *scale, &dx, &dscale, &dbias));
      if (row == 0) return absl::OkStatus();
      const T* in = x->data<T>();
      const T* grad = dy->data<T>();
      const T* gamma = scale->data<T>();
      // Rows split into one block per thread; each block sums its dScale / dB into its own double partials,
      // added up afterwards (no shared accumulator, a deterministic order).
      const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(rows, context.threads().num_threads()));
      const bool wants_parameters = dscale != nullptr || dbias != nullptr;
      std::vector<double> partials(wants_parameters ? static_cast<size_t>(blocks * 2 * row) : 0, 0.0);
      context.threads().ParallelFor(blocks, 1, [&](int64_t block_begin, int64_t block_end) {
        typedef T Lanes __attribute__((vector_size(64)));
        constexpr int64_t kLanes = 64 / sizeof(T);
        // dScale / dB of up to kRowsPerFlush rows are summed in T (vectorised), then added into the block's double
        // partials: each T sum holds at most kRowsPerFlush values, so the rounding stays that of a few adds.
        constexpr int64_t kRowsPerFlush = 32;
        std::vector<T> xhat(static_cast<size_t>(row));
        std::vector<T> rows_scale(wants_parameters ? static_cast<size_t>(row) : 0);
        std::vector<T> rows_bias(wants_parameters ? static_cast<size_t>(row) : 0);
        for (int64_t block = block_begin; block < block_end; ++block) {
          double* partial_scale = wants_parameters ? partials.data() + block * 2 * row : nullptr;
          double* partial_bias = wants_parameters ? partial_scale + row : nullptr;
          const int64_t first = rows * block / blocks, last = rows * (block + 1) / blocks;
          for (int64_t r = first; r < last; ++r) {
            const T* __restrict xs = in + r * row;
            const T* __restrict g = grad + r * row;
            T* __restrict xh_row = xhat.data();
            T shift = xs[0];
            double shifted_mean = 0, var = 0;
            ShiftedRowStatistics(xs, row, &shift, &shifted_mean, &var);
            const double inv = 1.0 / std::sqrt(var + epsilon_);
            // Per element in T, in vectors of T (unaligned loads and stores through memcpy), centred on a value of
            // the row like the statistics; the row sums in independent lanes of T added up in double.
            const T offset = static_cast<T>(shifted_mean), inv_t = static_cast<T>(inv);
            Lanes lane_dxhat = {}, lane_dxhat_xhat = {};
            int64_t i = 0;
            for (; i + kLanes <= row; i += kLanes) {
              Lanes x_v, g_v, gamma_v;
              std::memcpy(&x_v, xs + i, sizeof(x_v));
              std::memcpy(&g_v, g + i, sizeof(g_v));
              std::memcpy(&gamma_v, gamma + i, sizeof(gamma_v));
              const Lanes xh = ((x_v - shift) - offset) * inv_t;
              std::memcpy(xh_row + i, &xh, sizeof(xh));
              const Lanes dxhat = g_v * gamma_v;
              lane_dxhat += dxhat;
              lane_dxhat_xhat += dxhat * xh;
              if (wants_parameters) {
                Lanes scale_v, bias_v;
                std::memcpy(&scale_v, rows_scale.data() + i, sizeof(scale_v));
                std::memcpy(&bias_v, rows_bias.data() + i, sizeof(bias_v));
                scale_v += g_v * xh;
                bias_v += g_v;
                std::memcpy(rows_scale.data() + i, &scale_v, sizeof(scale_v));
                std::memcpy(rows_bias.data() + i, &bias_v, sizeof(bias_v));
              }
            }
            double sum_dxhat = 0, sum_dxhat_xhat = 0;
            for (; i < row; ++i) {
              const T xh = ((xs[i] - shift) - offset) * inv_t;
              xh_row[i] = xh;
              const double dxhat = static_cast<double>(g[i] * gamma[i]);
              sum_dxhat += dxhat;
              sum_dxhat_xhat += dxhat * static_cast<double>(xh);
              if (wants_parameters) {
                rows_scale[i] += g[i] * xh;
                rows_bias[i] += g[i];
              }
            }
            sum_dxhat += HorizontalSum<T>(lane_dxhat);
            sum_dxhat_xhat += HorizontalSum<T>(lane_dxhat_xhat);
            if (wants_parameters && ((r - first + 1) % kRowsPerFlush == 0 || r + 1 == last)) {
              for (int64_t k = 0; k < row; ++k) {
                partial_scale[k] += static_cast<double>(rows_scale[k]);
                partial_bias[k] += static_cast<double>(rows_bias[k]);
                rows_scale[k] = T(0);
                rows_bias[k] = T(0);
              }
            }
            if (dx == nullptr) continue;
            const T mean_dxhat = static_cast<T>(sum_dxhat / static_cast<double>(row));
            const T mean_dxhat_xhat = static_cast<T>(sum_dxhat_xhat / static_cast<double>(row));
            T* __restrict out = dx + r * row;
            for (int64_t k = 0; k < row; ++k) {
              out[k] = inv_t * (g[k] * gamma[k] - mean_dxhat - xh_row[k] * mean_dxhat_xhat);
            }
          }
        }
      });
      if (wants_parameters) {
        for (int64_t i = 0; i < row; ++i) {
          double total_scale = 0, total_bias = 0;
          for (int64_t block = 0; block < blocks; ++block) {
            total_scale += partials[block * 2 * row + i];
            total_bias += partials[block * 2 * row + row + i];
          }
          if (dscale != nullptr) dscale[i] = static_cast<T>(total_scale);
          if (dbias != nullptr) dbias[i] = static_cast<T>(total_bias);
        }
      }
      return absl::OkStatus();
    });
  }

 private:
  int64_t axis_;
  float epsilon_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateBatchNormalizationGradKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(float epsilon, ParseNormEpsilon(init));
  TRAIND_ASSIGN_OR_RETURN(const int64_t channels_last, init.GetInt("channels_last", 0));
  if (channels_last != 0 && channels_last != 1) {
    return init.Error(absl::StrCat("attribute 'channels_last' must be 0 or 1, got ", channels_last));
  }
  return std::unique_ptr<Kernel>(new BatchNormGradKernel(epsilon, channels_last == 1));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateLayerNormalizationGradKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(int64_t axis, init.GetInt("axis", -1));
  TRAIND_ASSIGN_OR_RETURN(float epsilon, ParseNormEpsilon(init));
  return std::unique_ptr<Kernel>(new LayerNormGradKernel(axis, epsilon));
}

}  // namespace traind::engine
