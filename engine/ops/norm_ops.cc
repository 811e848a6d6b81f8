// Normalization: BatchNormalization (inference, and opset-14+ training mode with running-stat
// outputs), InstanceNormalization and LayerNormalization (opset 17).
//
// All three are memory-bound: each is one parallel loop over independent groups (a channel, an
// (image, channel) plane, a row) whose inner loops are contiguous and vectorisable. Statistics use
// double accumulators; the variance is the biased one everywhere, as ONNX specifies.
#include "engine/ops/norm_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/autodiff/gradient_rule.h"
#include "engine/core/status_macros.h"
#include "engine/model/traind_schemas.h"
#include "engine/ops/pool_window.h"
#include "engine/ops/row_statistics.h"
#include "engine/runtime/dispatch.h"
#include "engine/runtime/fused_elementwise.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {
namespace {

absl::Status CheckVector(const char* op, const char* what, const Tensor* t, const Tensor& x, int64_t size) {
  if (t->dtype() != x.dtype()) {
    return absl::UnimplementedError(
        absl::StrCat(op, ": ", what, " dtype ", DataTypeName(t->dtype()), " differs from the input's"));
  }
  if (t->num_elements() != size) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", what, " ", t->DebugString(), " must have ", size, " elements"));
  }
  return absl::OkStatus();
}

// Scale and B broadcast to the normalized shape X.shape[axis:]. Supported: one element (true), or the full
// normalized shape up to leading 1s (false); other broadcasts are kUnimplemented.
absl::StatusOr<bool> CheckLayerNormParameter(const char* what, const Tensor& t, const Tensor& x,
                                             const Shape& normalized) {
  if (t.dtype() != x.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("LayerNormalization: ", what, " dtype differs from X"));
  }
  const Shape* shapes[] = {&t.shape(), &normalized};
  auto broadcast = BroadcastShapes(shapes);
  if (!broadcast.ok() || *broadcast != normalized) {
    return absl::InvalidArgumentError(absl::StrCat("LayerNormalization: ", what, " ", t.DebugString(),
                                                   " does not broadcast to ", ShapeToString(normalized)));
  }
  if (t.num_elements() == 1) return true;
  if (t.num_elements() == DimProduct(normalized, 0, normalized.size())) return false;
  return absl::UnimplementedError(
      absl::StrCat("LayerNormalization: partial broadcast of ", what, " ", t.DebugString()));
}

}  // namespace

absl::StatusOr<float> ParseNormEpsilon(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(float epsilon, init.GetFloat("epsilon", 1e-5f));
  if (!(epsilon >= 0.0f) || !std::isfinite(epsilon)) {
    return init.Error(absl::StrCat("attribute 'epsilon' must be finite and >= 0, got ", epsilon));
  }
  return epsilon;
}

absl::StatusOr<BatchNormAttributes> ParseBatchNormAttributes(const KernelInit& init) {
  BatchNormAttributes attributes;
  TRAIND_ASSIGN_OR_RETURN(attributes.epsilon, ParseNormEpsilon(init));
  TRAIND_ASSIGN_OR_RETURN(attributes.momentum, init.GetFloat("momentum", 0.9f));
  if (!std::isfinite(attributes.momentum)) return init.Error("attribute 'momentum' must be finite");
  if (init.opset() >= 14) {
    TRAIND_ASSIGN_OR_RETURN(int64_t training_mode, init.GetInt("training_mode", 0));
    if (training_mode != 0 && training_mode != 1) {
      return init.Error(absl::StrCat("attribute 'training_mode' must be 0 or 1, got ", training_mode));
    }
    attributes.training = training_mode == 1;
    if (!attributes.training && init.num_outputs() > 1) {
      return init.Error("running_mean / running_var outputs need training_mode=1");
    }
  } else {
    // Before opset 14 the training form is chosen by the extra outputs (mean, var, saved_mean,
    // saved_var), or by is_test=0 in opset 6; only the inference form is implemented.
    int64_t is_test = 1;
    if (init.opset() < 7) {
      TRAIND_ASSIGN_OR_RETURN(is_test, init.GetInt("is_test", 0));
    }
    if (init.num_outputs() > 1 || is_test == 0) {
      return init.Unsupported("training-mode BatchNormalization before opset 14");
    }
  }
  if (init.opset() < 9) {
    TRAIND_ASSIGN_OR_RETURN(int64_t spatial, init.GetInt("spatial", 1));
    if (spatial != 0 && spatial != 1) {
      return init.Error(absl::StrCat("attribute 'spatial' must be 0 or 1, got ", spatial));
    }
    attributes.spatial = spatial == 1;
  }
  return attributes;
}

absl::StatusOr<BatchNormShape> CheckBatchNormInputs(const Tensor& x, const Tensor* const parameters[4],
                                                    const BatchNormAttributes& attributes) {
  if (x.rank() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("BatchNormalization: input must be [N, C, ...], got ", x.DebugString()));
  }
  const int64_t inner = DimProduct(x.shape(), 2, x.shape().size());
  BatchNormShape shape;
  shape.batch = x.dim(0);
  shape.features = attributes.spatial ? x.dim(1) : x.dim(1) * inner;
  shape.row = attributes.spatial ? inner : 1;
  static const char* const kNames[] = {"scale", "B", "input_mean", "input_var"};
  for (int i = 0; i < 4; ++i) {
    TRAIND_RETURN_IF_ERROR(CheckVector("BatchNormalization", kNames[i], parameters[i], x, shape.features));
  }
  if (attributes.training && shape.batch * shape.row == 0) {
    return absl::InvalidArgumentError("BatchNormalization: training mode on an empty batch");
  }
  return shape;
}

absl::StatusOr<LayerNormAttributes> ParseLayerNormAttributes(const KernelInit& init) {
  LayerNormAttributes attributes;
  TRAIND_ASSIGN_OR_RETURN(attributes.axis, init.GetInt("axis", -1));
  TRAIND_ASSIGN_OR_RETURN(attributes.epsilon, ParseNormEpsilon(init));
  TRAIND_ASSIGN_OR_RETURN(int64_t stash_type, init.GetInt("stash_type", 1));
  if (stash_type != 1) return init.Unsupported(absl::StrCat("stash_type ", stash_type, " (only 1, float)"));
  return attributes;
}

absl::StatusOr<LayerNormShape> CheckLayerNormInputs(const Tensor& x, const Tensor& scale, const Tensor* bias,
                                                    int64_t axis) {
  TRAIND_ASSIGN_OR_RETURN(const int64_t normalized_axis, NormalizeAxis(axis, x.rank()));
  const Shape normalized(x.shape().begin() + normalized_axis, x.shape().end());
  LayerNormShape shape;
  shape.rows = DimProduct(x.shape(), 0, static_cast<size_t>(normalized_axis));
  shape.row = DimProduct(x.shape(), static_cast<size_t>(normalized_axis), x.shape().size());
  TRAIND_ASSIGN_OR_RETURN(shape.scale_is_scalar, CheckLayerNormParameter("Scale", scale, x, normalized));
  if (bias != nullptr) {
    TRAIND_ASSIGN_OR_RETURN(shape.bias_is_scalar, CheckLayerNormParameter("B", *bias, x, normalized));
  }
  shape.statistics = x.shape();
  for (size_t d = static_cast<size_t>(normalized_axis); d < shape.statistics.size(); ++d) shape.statistics[d] = 1;
  return shape;
}

namespace {

// Lanes of independent double accumulators: lets the compiler vectorise the reductions.
constexpr int kLanes = 8;

// Two-pass statistics (Sum for the mean, then SquaredDeviationSum) for groups that fit in cache.
template <typename T>
double Sum(const T* p, int64_t n) {
  double partial[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) partial[j] += static_cast<double>(p[i + j]);
  }
  double sum = 0;
  for (; i < n; ++i) sum += static_cast<double>(p[i]);
  for (int j = 0; j < kLanes; ++j) sum += partial[j];
  return sum;
}

template <typename T>
double SquaredDeviationSum(const T* p, int64_t n, double mean) {
  double partial[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      const double d = static_cast<double>(p[i + j]) - mean;
      partial[j] += d * d;
    }
  }
  double sum = 0;
  for (; i < n; ++i) {
    const double d = static_cast<double>(p[i]) - mean;
    sum += d * d;
  }
  for (int j = 0; j < kLanes; ++j) sum += partial[j];
  return sum;
}

// out[i] = ((in[i] - center) - center_offset) * scale + shift over a contiguous run: normalises
// around center + center_offset. Centering before scaling (rather than folding the mean into the
// shift) keeps precision when |mean| >> stddev; splitting the mean into a value of the data
// (`center`, so in[i] - center is exact for nearby values) and a small float offset keeps the
// mean's double precision too.
//
// Written as fixed-width blocks plus a tail: at -O2 GCC vectorises only loops whose vector code
// needs no scalar epilogue, so a plain loop over n stays scalar; the fixed inner block is
// vectorised (SLP). __restrict: in and out never overlap (outputs never alias inputs here).
template <typename T>
inline void Normalize(const T* __restrict in, T* __restrict out, int64_t n, T center, T center_offset, T scale,
                      T shift) {
  constexpr int kBlock = 16;
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (int j = 0; j < kBlock; ++j) out[i + j] = ((in[i + j] - center) - center_offset) * scale + shift;
  }
  for (; i < n; ++i) out[i] = ((in[i] - center) - center_offset) * scale + shift;
}

// dst[i] = ((src[i] - center) - center_offset) * scale * gamma[i] + beta[i]; blocked like Normalize.
template <typename T>
inline void NormalizeAffine(const T* __restrict src, T* __restrict dst, int64_t n, T center, T center_offset, T scale,
                            const T* __restrict gamma, const T* __restrict beta) {
  constexpr int kBlock = 16;
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (int j = 0; j < kBlock; ++j) {
      dst[i + j] = ((src[i + j] - center) - center_offset) * scale * gamma[i + j] + beta[i + j];
    }
  }
  for (; i < n; ++i) dst[i] = ((src[i] - center) - center_offset) * scale * gamma[i] + beta[i];
}

// Grain (in groups) so that each parallel chunk holds at least kParallelElementThreshold elements.
int64_t GroupGrain(int64_t group_size) {
  return std::max<int64_t>(1, kParallelElementThreshold / std::max<int64_t>(1, group_size));
}

// ------------------------------------------------------------------------------------------------
// BatchNormalization

class BatchNormKernel final : public Kernel {
 public:
  // `spatial` false (opsets 6-8): statistics per (channel, spatial position), i.e. the parameters
  // cover all of [C, D1, ...].
  // `matrix_kernel` runs [N, C] inputs (spatial statistics): see Compute.
  BatchNormKernel(BatchNormAttributes attributes, std::unique_ptr<Kernel> matrix_kernel)
      : attributes_(attributes), matrix_kernel_(std::move(matrix_kernel)) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    // An [N, C] input (BatchNorm1d after a Linear) is the channels-last layout with no spatial axes: the row walk
    // below would take one element per row (4096 x 256 took 32 ms), the channels-last kernel takes the channels
    // as its vector lanes.
    if (attributes_.spatial && x->rank() == 2) return matrix_kernel_->Compute(context);
    const Tensor* params[4];
    for (int i = 0; i < 4; ++i) {
      TRAIND_ASSIGN_OR_RETURN(params[i], context.RequiredInput(i + 1));
    }
    TRAIND_ASSIGN_OR_RETURN(const BatchNormShape shape, CheckBatchNormInputs(*x, params, attributes_));
    const int64_t batch = shape.batch, features = shape.features, row = shape.row;
    const float epsilon = attributes_.epsilon;
    return DispatchAmong<TRAIND_FLOAT_TYPES>(x->dtype(), "BatchNormalization", [&](auto tag) {
      using T = typename decltype(tag)::type;
      TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), x->shape()));
      const T* in = x->data<T>();
      T* out = y->mutable_data<T>();
      const T* scale = params[0]->data<T>();
      const T* bias = params[1]->data<T>();
      const T* mean = params[2]->data<T>();
      const T* var = params[3]->data<T>();
      if (!attributes_.training) {
        context.threads().ParallelFor(batch * features, GroupGrain(row), [&](int64_t b, int64_t e) {
          for (int64_t r = b; r < e; ++r) {
            const int64_t f = r % features;
            const T a = static_cast<T>(scale[f] / std::sqrt(static_cast<double>(var[f]) + epsilon));
            Normalize(in + r * row, out + r * row, row, mean[f], T(0), a, bias[f]);
          }
        });
        return absl::OkStatus();
      }
      // Training mode: normalise with this batch's statistics and blend them into the running
      // ones: running = input * momentum + batch * (1 - momentum).
      TRAIND_ASSIGN_OR_RETURN(Tensor * running_mean, context.AllocateOutput(1, x->dtype(), params[2]->shape()));
      TRAIND_ASSIGN_OR_RETURN(Tensor * running_var, context.AllocateOutput(2, x->dtype(), params[3]->shape()));
      T* running_mean_data = running_mean->mutable_data<T>();
      T* running_var_data = running_var->mutable_data<T>();
      const int64_t count = batch * row;
      // count > 0: CheckBatchNormInputs refuses training mode on an empty batch.
      // Both passes walk the tensor in memory order, one [n, f] row of `row` elements at a time: a channel's
      // rows lie a whole image apart, so a channel-by-channel walk would start a new stream every few KB and
      // defeat the prefetchers (it ran at a third of the memory bandwidth). Pass 1 sums each row into its own
      // pair of doubles; the rows of a channel are then added in batch order, so the statistics do not depend
      // on how the rows were split among threads.
      const int64_t rows = batch * features;
      std::vector<double> row_sums(static_cast<size_t>(2 * rows));
      std::vector<T> shifts(static_cast<size_t>(features));
      for (int64_t f = 0; f < features; ++f) shifts[f] = in[f * row];  // A value of each channel's group.
      context.threads().ParallelFor(rows, GroupGrain(row), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          double sum = 0, squares = 0;
          AccumulateShiftedSumAndSquares(in + r * row, row, shifts[r % features], &sum, &squares);
          row_sums[2 * r] = sum;
          row_sums[2 * r + 1] = squares;
        }
      });
      // Per channel: the normalisation as center (the shift), a small float offset, a scale and a shift.
      std::vector<T> offsets(static_cast<size_t>(features)), scales(static_cast<size_t>(features));
      const double momentum = attributes_.momentum;
      for (int64_t f = 0; f < features; ++f) {
        double sum = 0, squares = 0;
        for (int64_t n = 0; n < batch; ++n) {
          sum += row_sums[2 * (n * features + f)];
          squares += row_sums[2 * (n * features + f) + 1];
        }
        const double shifted_mean = sum / static_cast<double>(count);
        const double batch_mean = shifted_mean + static_cast<double>(shifts[f]);
        const double batch_var = std::max(0.0, squares / static_cast<double>(count) - shifted_mean * shifted_mean);
        running_mean_data[f] = static_cast<T>(mean[f] * momentum + batch_mean * (1.0 - momentum));
        running_var_data[f] = static_cast<T>(var[f] * momentum + batch_var * (1.0 - momentum));
        offsets[f] = static_cast<T>(shifted_mean);
        scales[f] = static_cast<T>(scale[f] / std::sqrt(batch_var + epsilon));
      }
      context.threads().ParallelFor(rows, GroupGrain(row), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const int64_t f = r % features;
          Normalize(in + r * row, out + r * row, row, shifts[f], offsets[f], scales[f], bias[f]);
        }
      });
      return absl::OkStatus();
    });
  }

 private:
  BatchNormAttributes attributes_;
  std::unique_ptr<Kernel> matrix_kernel_;
};

// ------------------------------------------------------------------------------------------------
// ChannelsLastBatchNormalization (domain ai.traind.training): BatchNormalization (opset 15, spatial) of an input
// that is [N, spatial..., C] in memory, made by the channels-last plan pass (engine/runtime/channels_last.h).
// Attributes epsilon, momentum, training_mode as ONNX's.
//
// A channel's elements lie C apart, so both passes walk the input row by row ([.., C] rows of all channels) with the
// channel as the vectorised inner loop. The statistics are summed per fixed block of rows (independent of the thread
// count; row_statistics.h), shifted by a sampled mean of each channel (SampledChannelShifts), and the blocks added in
// order in double: the result does not depend on how the blocks were spread over threads.

class ChannelsLastBatchNormKernel final : public Kernel {
 public:
  // `name` for messages: ChannelsLastBatchNormalization, or BatchNormalization on an [N, C] input (see
  // BatchNormKernel).
  ChannelsLastBatchNormKernel(BatchNormAttributes attributes, const char* name) : attributes_(attributes), name_(name) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    const Tensor* params[4];
    for (int i = 0; i < 4; ++i) {
      TRAIND_ASSIGN_OR_RETURN(params[i], context.RequiredInput(i + 1));
    }
    if (x->rank() < 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(name_, ": input must be [N, spatial..., C], got ", x->DebugString()));
    }
    const Tensor x_channels_first = x->Reshaped(ChannelsFirstShape(x->shape()));
    TRAIND_ASSIGN_OR_RETURN(const BatchNormShape shape, CheckBatchNormInputs(x_channels_first, params, attributes_));
    const int64_t channels = shape.features;
    const int64_t rows = channels == 0 ? 0 : x->num_elements() / channels;
    const float epsilon = attributes_.epsilon;
    if (pool_2x2_ && (x->rank() != 4 || x->dim(1) < 2 || x->dim(2) < 2)) {
      return absl::InvalidArgumentError(absl::StrCat(
          name_, " with a 2x2 max pool: input must be [N, H, W, C] with H and W at least 2, got ", x->DebugString()));
    }
    return DispatchAmong<TRAIND_FLOAT_TYPES>(x->dtype(), name_, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const Shape y_shape = pool_2x2_ ? Shape{x->dim(0), x->dim(1) / 2, x->dim(2) / 2, channels} : x->shape();
      TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), y_shape));
      const T* in = x->data<T>();
      T* out = y->mutable_data<T>();
      const T* scale = params[0]->data<T>();
      const T* bias = params[1]->data<T>();
      const T* mean = params[2]->data<T>();
      const T* var = params[3]->data<T>();
      // y = ((x - center) - offset) * factor + bias per channel.
      std::vector<T> centers(static_cast<size_t>(channels)), offsets(static_cast<size_t>(channels), T(0)),
          factors(static_cast<size_t>(channels));
      if (!attributes_.training) {
        for (int64_t c = 0; c < channels; ++c) {
          centers[c] = mean[c];
          factors[c] = static_cast<T>(scale[c] / std::sqrt(static_cast<double>(var[c]) + epsilon));
        }
      } else {
        TRAIND_ASSIGN_OR_RETURN(Tensor * running_mean, context.AllocateOutput(1, x->dtype(), params[2]->shape()));
        TRAIND_ASSIGN_OR_RETURN(Tensor * running_var, context.AllocateOutput(2, x->dtype(), params[3]->shape()));
        SampledChannelShifts<T>(in, rows, channels, /*channels_last=*/true, 1, centers.data());  // rows > 0 here
        const int64_t rows_per_block = ChannelsLastRowsPerBlock(channels);
        const int64_t blocks = (rows + rows_per_block - 1) / rows_per_block;
        const double count = static_cast<double>(rows);
        std::vector<double> partials(static_cast<size_t>(blocks * 2 * channels));
        std::vector<double> sums(static_cast<size_t>(2 * channels));  // per channel: sum d, then sum d^2
        auto sum_statistics = [&] {
          std::fill(partials.begin(), partials.end(), 0.0);
          context.threads().ParallelFor(blocks, 1, [&](int64_t block_begin, int64_t block_end) {
            for (int64_t block = block_begin; block < block_end; ++block) {
              AddChannelsLastMoments<T>(in, nullptr, channels, block * rows_per_block,
                                        std::min(rows, (block + 1) * rows_per_block), centers.data(),
                                        partials.data() + block * 2 * channels);
            }
          });
          std::fill(sums.begin(), sums.end(), 0.0);
          for (int64_t block = 0; block < blocks; ++block) {
            for (int64_t k = 0; k < 2 * channels; ++k) sums[k] += partials[block * 2 * channels + k];
          }
        };
        sum_statistics();
        // A shift far out in its channel (more than 2 standard deviations from the mean) would leave E[d^2] - E[d]^2
        // to cancel most of its bits: then once more, every channel centred on its mean.
        bool center_far_out = false;
        for (int64_t c = 0; c < channels; ++c) {
          const double shifted_mean = sums[c] / count;
          const double variance = std::max(0.0, sums[channels + c] / count - shifted_mean * shifted_mean);
          center_far_out = center_far_out || shifted_mean * shifted_mean > 4.0 * variance;
        }
        if (center_far_out) {
          for (int64_t c = 0; c < channels; ++c) {
            centers[c] = static_cast<T>(static_cast<double>(centers[c]) + sums[c] / count);
          }
          sum_statistics();
        }
        T* running_mean_data = running_mean->mutable_data<T>();
        T* running_var_data = running_var->mutable_data<T>();
        const double momentum = attributes_.momentum;
        for (int64_t c = 0; c < channels; ++c) {
          const double sum = sums[c], sum_squares = sums[channels + c];
          const double shifted_mean = sum / count;
          const double batch_mean = shifted_mean + static_cast<double>(centers[c]);
          const double batch_var = std::max(0.0, sum_squares / count - shifted_mean * shifted_mean);
          running_mean_data[c] = static_cast<T>(mean[c] * momentum + batch_mean * (1.0 - momentum));
          running_var_data[c] = static_cast<T>(var[c] * momentum + batch_var * (1.0 - momentum));
          offsets[c] = static_cast<T>(shifted_mean);
          factors[c] = static_cast<T>(scale[c] / std::sqrt(batch_var + epsilon));
        }
      }
      // Rows [first, last) of [C] values into dst (row first at dst[0]), in 64-byte vectors of channels (as arrays,
      // GCC re-checked the loop's bounds on every row).
      auto normalize_rows = [&](int64_t first, int64_t last, T* __restrict dst) {
        typedef T Lanes __attribute__((vector_size(64)));
        constexpr int64_t kLanes = 64 / sizeof(T);
        const int64_t vector_channels = channels / kLanes * kLanes;
        // Local copies: the stores below could alias the vectors' own pointers, which GCC would then reload.
        const T* const center_data = centers.data();
        const T* const offset_data = offsets.data();
        const T* const factor_data = factors.data();
        const T* const bias_data = bias;
        const T* const in_data = in;
        for (int64_t r = first; r < last; ++r, dst += channels) {
          const T* src = in_data + r * channels;
          int64_t c = 0;
          for (; c < vector_channels; c += kLanes) {
            Lanes center, offset, factor, shift, value;
            std::memcpy(&center, center_data + c, sizeof(center));
            std::memcpy(&offset, offset_data + c, sizeof(offset));
            std::memcpy(&factor, factor_data + c, sizeof(factor));
            std::memcpy(&shift, bias_data + c, sizeof(shift));
            std::memcpy(&value, src + c, sizeof(value));
            const Lanes result = ((value - center) - offset) * factor + shift;
            std::memcpy(dst + c, &result, sizeof(result));
          }
          for (; c < channels; ++c) {
            dst[c] = ((src[c] - center_data[c]) - offset_data[c]) * factor_data[c] + bias_data[c];
          }
        }
      };
      std::vector<const float*> epilogue_inputs;
      if (epilogue_ != nullptr) {
        if (!std::is_same_v<T, float>) return UnsupportedDtype(name_, x->dtype());
        TRAIND_ASSIGN_OR_RETURN(epilogue_inputs, epilogue_->Bind(context, x->shape()));
      }
      // Rows [first, last) normalised into `normalized`, then the epilogue's values of them into `finished`: the
      // rows' final values, in whichever of the two buffers holds them.
      auto finish_rows = [&](int64_t first, int64_t last, T* normalized, T* finished,
                             std::vector<float>& scratch) -> const T* {
        normalize_rows(first, last, normalized);
        if constexpr (std::is_same_v<T, float>) {
          if (epilogue_ != nullptr) {
            epilogue_->Apply(epilogue_inputs, normalized, first * channels, (last - first) * channels, finished,
                             scratch);
            return finished;
          }
        }
        return normalized;
      };
      if (pool_2x2_) {
        // Output row oh of image n pools input rows 2oh and 2oh + 1 (a last odd row is never read): both are
        // normalised into a small buffer (with the epilogue's values next to it), then pooled from there; the
        // full-size value is never written.
        const int64_t height = x->dim(1), width = x->dim(2), out_height = y_shape[1], out_width = y_shape[2];
        const int64_t pair = 2 * width * channels;
        context.threads().ParallelFor(
            x->dim(0) * out_height, std::max<int64_t>(1, kParallelElementThreshold / std::max<int64_t>(1, pair)),
            [&](int64_t b, int64_t e) {
              std::vector<T> normalized(static_cast<size_t>(pair)), finished(epilogue_ ? pair : 0);
              std::vector<float> scratch;
              for (int64_t r = b; r < e; ++r) {
                const int64_t first = (r / out_height * height + 2 * (r % out_height)) * width;
                const T* values = finish_rows(first, first + 2 * width, normalized.data(), finished.data(), scratch);
                ChannelsLastMax2x2Row(values, values + width * channels, out_width, channels,
                                      out + r * out_width * channels);
              }
            });
        return absl::OkStatus();
      }
      // With an epilogue, rows are normalised a chunk at a time into a small buffer that the epilogue reads
      // (still in L1) as it writes the output.
      const int64_t rows_per_chunk = std::max<int64_t>(1, 1024 / std::max<int64_t>(1, channels));
      const int64_t grain = std::max<int64_t>(1, kParallelElementThreshold / std::max<int64_t>(1, channels));
      context.threads().ParallelFor(rows, grain, [&](int64_t b, int64_t e) {
        if (epilogue_ != nullptr) {
          std::vector<T> chunk(static_cast<size_t>(rows_per_chunk * channels));
          std::vector<float> scratch;
          for (int64_t first = b; first < e; first += rows_per_chunk) {
            const int64_t last = std::min(e, first + rows_per_chunk);
            finish_rows(first, last, chunk.data(), out + first * channels, scratch);
          }
          return;
        }
        normalize_rows(b, e, out + b * channels);
      });
      return absl::OkStatus();
    });
  }

  // The Relu after it, or a residual Add and Relu (float32).
  bool AcceptsEpilogue() const override { return true; }
  void SetEpilogue(std::shared_ptr<const ElementwiseEpilogue> epilogue) override { epilogue_ = std::move(epilogue); }
  // The 2x2 MaxPool after it (and after its epilogue) in a forward plan.
  bool AcceptsMaxPool2x2() const override { return true; }
  void SetMaxPool2x2() override { pool_2x2_ = true; }

 private:
  BatchNormAttributes attributes_;
  const char* name_;
  std::shared_ptr<const ElementwiseEpilogue> epilogue_;
  bool pool_2x2_ = false;
};

// ------------------------------------------------------------------------------------------------
// InstanceNormalization

class InstanceNormKernel final : public Kernel {
 public:
  explicit InstanceNormKernel(float epsilon) : epsilon_(epsilon) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* scale, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* bias, context.RequiredInput(2));
    if (x->rank() < 3) {
      return absl::InvalidArgumentError(
          absl::StrCat("InstanceNormalization: input must be [N, C, spatial...], got ", x->DebugString()));
    }
    const int64_t channels = x->dim(1);
    TRAIND_RETURN_IF_ERROR(CheckVector("InstanceNormalization", "scale", scale, *x, channels));
    TRAIND_RETURN_IF_ERROR(CheckVector("InstanceNormalization", "B", bias, *x, channels));
    const int64_t planes = x->dim(0) * channels;
    const int64_t plane = DimProduct(x->shape(), 2, x->shape().size());
    return DispatchAmong<TRAIND_FLOAT_TYPES>(x->dtype(), "InstanceNormalization", [&](auto tag) {
      using T = typename decltype(tag)::type;
      TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), x->shape()));
      if (plane == 0) return absl::OkStatus();
      const T* in = x->data<T>();
      T* out = y->mutable_data<T>();
      context.threads().ParallelFor(planes, GroupGrain(plane), [&](int64_t b, int64_t e) {
        for (int64_t p = b; p < e; ++p) {
          const T* src = in + p * plane;
          const double mean = Sum(src, plane) / static_cast<double>(plane);
          const double var = SquaredDeviationSum(src, plane, mean) / static_cast<double>(plane);
          const int64_t c = p % channels;
          const double a = scale->data<T>()[c] / std::sqrt(var + epsilon_);
          Normalize(src, out + p * plane, plane, src[0], static_cast<T>(mean - static_cast<double>(src[0])),
                    static_cast<T>(a), bias->data<T>()[c]);
        }
      });
      return absl::OkStatus();
    });
  }

 private:
  float epsilon_;
};

// ------------------------------------------------------------------------------------------------
// LayerNormalization

class LayerNormKernel final : public Kernel {
 public:
  explicit LayerNormKernel(LayerNormAttributes attributes) : attributes_(attributes) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* scale, context.RequiredInput(1));
    const Tensor* bias = context.input(2);
    TRAIND_ASSIGN_OR_RETURN(const LayerNormShape shape, CheckLayerNormInputs(*x, *scale, bias, attributes_.axis));
    const int64_t rows = shape.rows, row = shape.row;
    const bool scale_is_scalar = shape.scale_is_scalar, bias_is_scalar = shape.bias_is_scalar;
    const Shape& stat_shape = shape.statistics;
    const float epsilon = attributes_.epsilon;
    return DispatchAmong<TRAIND_FLOAT_TYPES>(x->dtype(), "LayerNormalization", [&](auto tag) {
      using T = typename decltype(tag)::type;
      TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), x->shape()));
      TRAIND_ASSIGN_OR_RETURN(Tensor * mean_out, context.AllocateOutput(1, DataType::kFloat32, stat_shape));
      TRAIND_ASSIGN_OR_RETURN(Tensor * inv_std_out, context.AllocateOutput(2, DataType::kFloat32, stat_shape));
      if (row == 0) return absl::OkStatus();
      const T* in = x->data<T>();
      T* out = y->mutable_data<T>();
      const T* gamma = scale->data<T>();
      const T* beta = bias == nullptr ? nullptr : bias->data<T>();
      float* means = mean_out->mutable_data<float>();
      float* inv_stds = inv_std_out->mutable_data<float>();
      context.threads().ParallelFor(rows, GroupGrain(row), [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) {
          const T* src = in + r * row;
          T* dst = out + r * row;
          // The statistics LayerNormalizationGrad computes again (norm_grad.cc): the same function, so that its x-hat
          // is this one. Centred on a value of the row (`center`) plus a small offset, as in Normalize().
          T center = src[0];
          double shifted_mean = 0, var = 0;
          ShiftedRowStatistics(src, row, &center, &shifted_mean, &var);
          const double inv_std = 1.0 / std::sqrt(var + epsilon);
          means[r] = static_cast<float>(static_cast<double>(center) + shifted_mean);
          inv_stds[r] = static_cast<float>(inv_std);
          const T offset = static_cast<T>(shifted_mean);
          const T s = static_cast<T>(inv_std);
          if (!scale_is_scalar && beta != nullptr && !bias_is_scalar) {
            NormalizeAffine(src, dst, row, center, offset, s, gamma, beta);
          } else {
            for (int64_t i = 0; i < row; ++i) {
              const T g = scale_is_scalar ? gamma[0] : gamma[i];
              const T shift = beta == nullptr ? T(0) : bias_is_scalar ? beta[0] : beta[i];
              dst[i] = ((src[i] - center) - offset) * s * g + shift;
            }
          }
        }
      });
      return absl::OkStatus();
    });
  }

 private:
  LayerNormAttributes attributes_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateBatchNormalizationKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(BatchNormAttributes attributes, ParseBatchNormAttributes(init));
  return std::unique_ptr<Kernel>(
      new BatchNormKernel(attributes, std::make_unique<ChannelsLastBatchNormKernel>(attributes, "BatchNormalization")));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateChannelsLastBatchNormalizationKernel(const KernelInit& init) {
  BatchNormAttributes attributes;
  TRAIND_ASSIGN_OR_RETURN(attributes.epsilon, ParseNormEpsilon(init));
  TRAIND_ASSIGN_OR_RETURN(attributes.momentum, init.GetFloat("momentum", 0.9f));
  if (!std::isfinite(attributes.momentum)) return init.Error("attribute 'momentum' must be finite");
  TRAIND_ASSIGN_OR_RETURN(const int64_t training_mode, init.GetInt("training_mode", 0));
  if (training_mode != 0 && training_mode != 1) {
    return init.Error(absl::StrCat("attribute 'training_mode' must be 0 or 1, got ", training_mode));
  }
  attributes.training = training_mode == 1;
  if (!attributes.training && init.num_outputs() > 1) {
    return init.Error("running_mean / running_var outputs need training_mode=1");
  }
  return std::unique_ptr<Kernel>(new ChannelsLastBatchNormKernel(attributes, "ChannelsLastBatchNormalization"));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateInstanceNormalizationKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(float epsilon, ParseNormEpsilon(init));
  return std::unique_ptr<Kernel>(new InstanceNormKernel(epsilon));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateLayerNormalizationKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(LayerNormAttributes attributes, ParseLayerNormAttributes(init));
  return std::unique_ptr<Kernel>(new LayerNormKernel(attributes));
}

// Gradients of normalisation over `axes` (keepdims everywhere), from the recomputed statistics:
//   xhat = (x - mean) * inv,  inv = 1 / sqrt(var + eps)
//   dx = inv * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)),  dxhat = dy * scale
// for batch statistics; with fixed statistics (BatchNormalization in inference mode) dx = dxhat * inv.
namespace {

struct NormalizationTerms {
  std::string xhat;
  std::string inv;
};

std::string EmitMean(GradientRuleContext& g, const std::string& x, const std::vector<int64_t>& axes) {
  const std::string out = g.Temp("mean");
  onnx::NodeProto* node = g.Emit("ReduceMean", {x}, {out});
  GradientRuleContext::SetIntsAttr(node, "axes", axes);
  GradientRuleContext::SetIntAttr(node, "keepdims", 1);
  return out;
}

absl::StatusOr<NormalizationTerms> RecomputeBatchStatistics(GradientRuleContext& g, const std::vector<int64_t>& axes,
                                                            float epsilon) {
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  const std::string mean = EmitMean(g, g.I(0), axes);
  const std::string centered = g.Temp("centered"), squared = g.Temp("squared"), shifted = g.Temp("var_eps"),
                    root = g.Temp("std"), inv = g.Temp("inv_std"), xhat = g.Temp("xhat");
  g.Emit("Sub", {g.I(0), mean}, {centered});
  g.Emit("Mul", {centered, centered}, {squared});
  const std::string variance = EmitMean(g, squared, axes);
  g.Emit("Add", {variance, g.ScalarConstant(epsilon, type)}, {shifted});
  g.Emit("Sqrt", {shifted}, {root});
  g.Emit("Reciprocal", {root}, {inv});
  g.Emit("Mul", {centered, inv}, {xhat});
  return NormalizationTerms{xhat, inv};
}

// dx from dxhat with batch statistics over `axes`.
void EmitBatchStatisticsInputGradient(GradientRuleContext& g, const NormalizationTerms& terms,
                                      const std::string& dxhat, const std::vector<int64_t>& axes) {
  const std::string mean_dxhat = EmitMean(g, dxhat, axes);
  const std::string product = g.Temp("dxhat_xhat");
  g.Emit("Mul", {dxhat, terms.xhat}, {product});
  const std::string mean_product = EmitMean(g, product, axes);
  const std::string projection = g.Temp("projection"), first = g.Temp("centered_dxhat"), second = g.Temp("residual");
  g.Emit("Mul", {terms.xhat, mean_product}, {projection});
  g.Emit("Sub", {dxhat, mean_dxhat}, {first});
  g.Emit("Sub", {first, projection}, {second});
  g.Emit("Mul", {second, terms.inv}, {g.GI(0)});
}

// Per-channel parameters of shape [C] broadcast as [1, C, 1, ...] against x: their gradients sum dy-terms over
// every axis but 1.
std::string EmitChannelSum(GradientRuleContext& g, const std::string& x, const std::vector<int64_t>& axes) {
  const std::string out = g.Temp("channel_sum");
  onnx::NodeProto* node = g.Emit("ReduceSum", {x, g.Int64Constant(axes)}, {out});
  GradientRuleContext::SetIntAttr(node, "keepdims", 0);
  return out;
}

std::string ReshapeToChannels(GradientRuleContext& g, const std::string& per_channel, size_t rank) {
  std::vector<int64_t> shape(rank, 1);
  shape[1] = -1;
  const std::string out = g.Temp("per_channel");
  g.Emit("Reshape", {per_channel, g.Int64Constant(shape)}, {out});
  return out;
}

// Emits the fused traind gradient op `op_type` (engine/ops/norm_grad.cc: dY, X, Scale -> dX, dScale, dB) when
// Scale, and B if present, have exactly `parameter_shape` (their gradients then have it too); false, emitting
// nothing, otherwise (the standard-op rule handles broadcast parameters).
bool FusedNormalizationGradient(GradientRuleContext& g, const char* op_type,
                                const std::vector<int64_t>& parameter_shape) {
  for (int i = 1; i < std::min(g.num_inputs(), 3); ++i) {
    const ValueFacts* facts = g.Facts(g.I(i));
    if (g.I(i).empty() || facts == nullptr || !facts->has_static_shape || facts->dims != parameter_shape) return false;
  }
  const bool needs_bias = g.num_inputs() > 2 && g.NeedsGI(2);
  onnx::NodeProto* node = g.Emit(op_type, {g.GO(0), g.I(0), g.I(1)},
                                 {g.NeedsGI(0) ? g.GI(0) : "", g.NeedsGI(1) ? g.GI(1) : "", needs_bias ? g.GI(2) : ""});
  node->set_domain(kTraindTrainingDomain);
  GradientRuleContext::SetFloatAttr(node, "epsilon", g.FloatAttr("epsilon", 1e-5f));
  if (std::string(op_type) == "LayerNormalizationGrad") {
    GradientRuleContext::SetIntAttr(node, "axis", g.IntAttr("axis", -1));
  }
  return true;
}

}  // namespace

// LayerNormalization (opset 17): normalises over axis..rank-1; Scale and B broadcast over the leading dims.
absl::Status LayerNormalizationGradient(GradientRuleContext& g) {
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> shape, g.StaticShape(g.I(0)));
  const int64_t rank = static_cast<int64_t>(shape.size());
  TRAIND_ASSIGN_OR_RETURN(const int64_t axis, g.AxisAttr("axis", -1, rank));
  if (FusedNormalizationGradient(g, "LayerNormalizationGrad", std::vector<int64_t>(shape.begin() + axis, shape.end()))) {
    return absl::OkStatus();
  }
  std::vector<int64_t> axes;
  for (int64_t d = axis; d < rank; ++d) axes.push_back(d);
  TRAIND_ASSIGN_OR_RETURN(NormalizationTerms terms, RecomputeBatchStatistics(g, axes, g.FloatAttr("epsilon", 1e-5f)));
  if (g.NeedsGI(1)) {
    const std::string product = g.Temp("dy_xhat");
    g.Emit("Mul", {g.GO(0), terms.xhat}, {product});
    TRAIND_RETURN_IF_ERROR(g.ReduceToShapeOf(product, g.O(0), g.I(1), g.GI(1)));
  }
  if (g.num_inputs() > 2 && g.NeedsGI(2)) TRAIND_RETURN_IF_ERROR(g.ReduceToShapeOf(g.GO(0), g.O(0), g.I(2), g.GI(2)));
  if (g.NeedsGI(0)) {
    const std::string dxhat = g.Temp("dxhat");
    g.Emit("Mul", {g.GO(0), g.I(1)}, {dxhat});
    EmitBatchStatisticsInputGradient(g, terms, dxhat, axes);
  }
  return absl::OkStatus();
}

// BatchNormalization, NC... layout, per-channel scale/B. Training mode (opset 14+ training_mode=1): batch
// statistics over every axis but 1. Inference mode: the given mean and variance are constants. The running
// statistics (inputs 3, 4) are buffers, never trained.
absl::Status BatchNormalizationGradient(GradientRuleContext& g) {
  if (g.NeedsGI(3) || g.NeedsGI(4)) {
    return absl::InvalidArgumentError("BatchNormalization's running mean and variance cannot be trained");
  }
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> shape, g.StaticShape(g.I(0)));
  std::vector<int64_t> axes = {0};
  for (size_t d = 2; d < shape.size(); ++d) axes.push_back(static_cast<int64_t>(d));
  const float epsilon = g.FloatAttr("epsilon", 1e-5f);
  const bool training = g.opset() >= 14 ? g.IntAttr("training_mode", 0) != 0 : false;
  if (training && FusedNormalizationGradient(g, "BatchNormalizationGrad", {shape[1]})) return absl::OkStatus();
  NormalizationTerms terms;
  if (training) {
    TRAIND_ASSIGN_OR_RETURN(terms, RecomputeBatchStatistics(g, axes, epsilon));
  } else {
    TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
    const std::string mean = ReshapeToChannels(g, g.I(3), shape.size());
    const std::string variance = ReshapeToChannels(g, g.I(4), shape.size());
    const std::string shifted = g.Temp("var_eps"), root = g.Temp("std"), centered = g.Temp("centered");
    terms.inv = g.Temp("inv_std");
    terms.xhat = g.Temp("xhat");
    g.Emit("Add", {variance, g.ScalarConstant(epsilon, type)}, {shifted});
    g.Emit("Sqrt", {shifted}, {root});
    g.Emit("Reciprocal", {root}, {terms.inv});
    g.Emit("Sub", {g.I(0), mean}, {centered});
    g.Emit("Mul", {centered, terms.inv}, {terms.xhat});
  }
  if (g.NeedsGI(1)) {
    const std::string product = g.Temp("dy_xhat");
    g.Emit("Mul", {g.GO(0), terms.xhat}, {product});
    g.Emit("Identity", {EmitChannelSum(g, product, axes)}, {g.GI(1)});
  }
  if (g.NeedsGI(2)) g.Emit("Identity", {EmitChannelSum(g, g.GO(0), axes)}, {g.GI(2)});
  if (g.NeedsGI(0)) {
    const std::string dxhat = g.Temp("dxhat");
    g.Emit("Mul", {g.GO(0), ReshapeToChannels(g, g.I(1), shape.size())}, {dxhat});
    if (training) {
      EmitBatchStatisticsInputGradient(g, terms, dxhat, axes);
    } else {
      g.Emit("Mul", {dxhat, terms.inv}, {g.GI(0)});
    }
  }
  return absl::OkStatus();
}

// InstanceNormalization: per (sample, channel) statistics over the spatial axes; per-channel scale and B.
absl::Status InstanceNormalizationGradient(GradientRuleContext& g) {
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> shape, g.StaticShape(g.I(0)));
  std::vector<int64_t> spatial, channel_sum_axes = {0};
  for (size_t d = 2; d < shape.size(); ++d) {
    spatial.push_back(static_cast<int64_t>(d));
    channel_sum_axes.push_back(static_cast<int64_t>(d));
  }
  TRAIND_ASSIGN_OR_RETURN(NormalizationTerms terms,
                          RecomputeBatchStatistics(g, spatial, g.FloatAttr("epsilon", 1e-5f)));
  if (g.NeedsGI(1)) {
    const std::string product = g.Temp("dy_xhat");
    g.Emit("Mul", {g.GO(0), terms.xhat}, {product});
    g.Emit("Identity", {EmitChannelSum(g, product, channel_sum_axes)}, {g.GI(1)});
  }
  if (g.NeedsGI(2)) g.Emit("Identity", {EmitChannelSum(g, g.GO(0), channel_sum_axes)}, {g.GI(2)});
  if (g.NeedsGI(0)) {
    const std::string dxhat = g.Temp("dxhat");
    g.Emit("Mul", {g.GO(0), ReshapeToChannels(g, g.I(1), shape.size())}, {dxhat});
    EmitBatchStatisticsInputGradient(g, terms, dxhat, spatial);
  }
  return absl::OkStatus();
}

}  // namespace traind::engine
