// Pooling: MaxPool, AveragePool, GlobalMaxPool, GlobalAveragePool.
//
// MaxPool / AveragePool run oneDNN's pooling primitive (plain NC[D]HW in and out, cached per input
// shape) whenever it computes exactly what ONNX asks for; otherwise, and for the optional Indices
// output, a direct loop over 1-3 spatial dims. The direct loop is also the fallback when oneDNN
// declines a configuration (for example padding wider than the kernel). Global pools are one
// vectorised reduction per (image, channel) plane.
#include "engine/ops/pool_ops.h"

#include <algorithm>
#include <limits>
#include <memory>
#include <optional>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "engine/autodiff/gradient_rule.h"
#include "engine/core/status_macros.h"
#include "engine/model/traind_schemas.h"
#include "engine/ops/dnnl_util.h"
#include "engine/ops/pool_window.h"
#include "engine/ops/spatial_attributes.h"
#include "engine/runtime/dispatch.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {

absl::StatusOr<PoolAttributes> ParsePoolAttributes(const KernelInit& init, bool max) {
  PoolAttributes attributes;
  TRAIND_ASSIGN_OR_RETURN(attributes.spatial, SpatialAttributes::Parse(init, /*allow_dilations=*/max));
  if (attributes.spatial.kernel_shape.empty()) return init.Error("attribute 'kernel_shape' is required");
  TRAIND_ASSIGN_OR_RETURN(int64_t ceil_mode, init.GetInt("ceil_mode", 0));
  int64_t count_include_pad = 0;
  int64_t storage_order = 0;
  if (max) {
    TRAIND_ASSIGN_OR_RETURN(storage_order, init.GetInt("storage_order", 0));
    if (storage_order != 0 && storage_order != 1) {
      return init.Error(absl::StrCat("attribute 'storage_order' must be 0 or 1, got ", storage_order));
    }
  } else {
    TRAIND_ASSIGN_OR_RETURN(count_include_pad, init.GetInt("count_include_pad", 0));
  }
  if (ceil_mode != 0 && ceil_mode != 1) {
    return init.Error(absl::StrCat("attribute 'ceil_mode' must be 0 or 1, got ", ceil_mode));
  }
  if (count_include_pad != 0 && count_include_pad != 1) {
    return init.Error(absl::StrCat("attribute 'count_include_pad' must be 0 or 1, got ", count_include_pad));
  }
  attributes.ceil_mode = ceil_mode == 1;
  attributes.count_include_pad = count_include_pad == 1;
  attributes.column_major_indices = storage_order == 1;
  return attributes;
}

absl::StatusOr<PoolShape> CheckPoolInputs(const char* op, const Tensor& x, const PoolAttributes& attributes) {
  if (x.rank() < 3) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": input must be [N, C, spatial...], got ", x.DebugString()));
  }
  const std::vector<int64_t> spatial(x.shape().begin() + 2, x.shape().end());
  const std::vector<int64_t>& kernel = attributes.spatial.kernel_shape;
  if (kernel.size() != spatial.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": kernel_shape has ", kernel.size(), " dims for input ", x.DebugString()));
  }
  PoolShape shape;
  TRAIND_ASSIGN_OR_RETURN(shape.window,
                          ResolveForwardWindow(attributes.spatial, spatial, kernel, attributes.ceil_mode));
  shape.output = {x.dim(0), x.dim(1)};
  shape.output.insert(shape.output.end(), shape.window.output.begin(), shape.window.output.end());
  return shape;
}

absl::StatusOr<PoolShape> CheckMaxPoolGradInputs(const Tensor& dy, const Tensor& x, const PoolAttributes& attributes) {
  TRAIND_ASSIGN_OR_RETURN(PoolShape shape, CheckPoolInputs("MaxPoolGrad", x, attributes));
  if (dy.shape() != shape.output || dy.dtype() != x.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("MaxPoolGrad: dY ", dy.DebugString(),
                                                   " must have MaxPool's output shape ", ShapeToString(shape.output),
                                                   " and X's dtype"));
  }
  return shape;
}

absl::StatusOr<Shape> CheckGlobalPoolInput(const char* op, const Tensor& x) {
  if (x.rank() < 3) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": input must be [N, C, spatial...], got ", x.DebugString()));
  }
  Shape output(x.shape().size(), 1);
  output[0] = x.dim(0);
  output[1] = x.dim(1);
  return output;
}

namespace {

using dnnl::memory;

enum class PoolKind { kMax, kAverage };

// Direct pooling over every (image, channel) plane. `indices` (MaxPool only) may be null.
template <typename T>
void PoolReference(PoolKind kind, bool count_include_pad, bool column_major_indices, const Window3& w, int64_t planes,
                   const T* in, T* out, int64_t* indices, ThreadPool& threads) {
  const int64_t in_size = w.input_size();
  const int64_t out_size = w.output_size();
  // Reads per plane, in double: a hostile kernel_shape can make the integer product overflow.
  double taps_per_output = 1;
  for (int j = 0; j < 3; ++j) taps_per_output *= static_cast<double>(std::min(w.kernel[j], w.input[j]));
  const double work_per_plane = std::max(1.0, static_cast<double>(out_size) * taps_per_output);
  const int64_t grain = static_cast<int64_t>(std::max(1.0, kParallelElementThreshold / work_per_plane));
  threads.ParallelFor(planes, grain, [&](int64_t begin, int64_t end) {
    for (int64_t plane = begin; plane < end; ++plane) {
      const T* src = in + plane * in_size;
      T* dst = out + plane * out_size;
      int64_t* dst_index = indices == nullptr ? nullptr : indices + plane * out_size;
      int64_t o = 0;
      for (int64_t od = 0; od < w.output[0]; ++od) {
        int64_t d0, d1;
        TapRange(od, w.strides[0], w.pad_begin[0], w.kernel[0], w.dilations[0], 0, w.input[0], &d0, &d1);
        for (int64_t oh = 0; oh < w.output[1]; ++oh) {
          int64_t h0, h1;
          TapRange(oh, w.strides[1], w.pad_begin[1], w.kernel[1], w.dilations[1], 0, w.input[1], &h0, &h1);
          for (int64_t ow = 0; ow < w.output[2]; ++ow, ++o) {
            int64_t w0, w1;
            TapRange(ow, w.strides[2], w.pad_begin[2], w.kernel[2], w.dilations[2], 0, w.input[2], &w0, &w1);
            const int64_t sd = od * w.strides[0] - w.pad_begin[0];
            const int64_t sh = oh * w.strides[1] - w.pad_begin[1];
            const int64_t sw = ow * w.strides[2] - w.pad_begin[2];
            if (kind == PoolKind::kMax) {
              T best = std::numeric_limits<T>::lowest();
              int64_t best_offset = -1;
              for (int64_t kd = d0; kd < d1; ++kd) {
                const int64_t id = sd + kd * w.dilations[0];
                for (int64_t kh = h0; kh < h1; ++kh) {
                  const int64_t ih = sh + kh * w.dilations[1];
                  const T* row = src + (id * w.input[1] + ih) * w.input[2];
                  for (int64_t kw = w0; kw < w1; ++kw) {
                    const int64_t iw = sw + kw * w.dilations[2];
                    // Strictly greater: the first maximum wins, as in the ONNX reference.
                    if (row[iw] > best || best_offset < 0) {
                      best = row[iw];
                      best_offset = column_major_indices ? id + w.input[0] * (ih + w.input[1] * iw)
                                                         : (id * w.input[1] + ih) * w.input[2] + iw;
                    }
                  }
                }
              }
              dst[o] = best;
              if (dst_index != nullptr) {
                dst_index[o] = best_offset < 0 ? -1 : plane * in_size + best_offset;
              }
            } else {
              double sum = 0;
              for (int64_t kd = d0; kd < d1; ++kd) {
                const int64_t id = sd + kd * w.dilations[0];
                for (int64_t kh = h0; kh < h1; ++kh) {
                  const int64_t ih = sh + kh * w.dilations[1];
                  const T* row = src + (id * w.input[1] + ih) * w.input[2];
                  for (int64_t kw = w0; kw < w1; ++kw) sum += row[sw + kw * w.dilations[2]];
                }
              }
              int64_t count = (d1 - d0) * (h1 - h0) * (w1 - w0);
              if (count_include_pad) {
                // Taps inside the padded input count; taps past the end padding (ceil_mode) do not.
                int64_t pd0, pd1, ph0, ph1, pw0, pw1;
                TapRange(od, w.strides[0], w.pad_begin[0], w.kernel[0], w.dilations[0], -w.pad_begin[0],
                         w.input[0] + w.pad_end[0], &pd0, &pd1);
                TapRange(oh, w.strides[1], w.pad_begin[1], w.kernel[1], w.dilations[1], -w.pad_begin[1],
                         w.input[1] + w.pad_end[1], &ph0, &ph1);
                TapRange(ow, w.strides[2], w.pad_begin[2], w.kernel[2], w.dilations[2], -w.pad_begin[2],
                         w.input[2] + w.pad_end[2], &pw0, &pw1);
                count = (pd1 - pd0) * (ph1 - ph0) * (pw1 - pw0);
              }
              dst[o] = count == 0 ? T(0) : static_cast<T>(sum / static_cast<double>(count));
            }
          }
        }
      }
    }
  });
}

// MaxPool's 2x2, stride 2 case (IsSimple2x2): one output row from its two input rows, the first maximum of each
// window with selects (the chain MaxPoolGrad uses to route the gradient, and PoolReference's "strictly greater"),
// vectorised (stride-2 loads become permutes). oneDNN's plain-layout pooling took twice as long on the small
// planes of CNNs.
template <typename T>
void MaxPool2x2Row(const T* __restrict top, const T* __restrict bottom, T* __restrict y, int64_t outputs) {
  for (int64_t ow = 0; ow < outputs; ++ow) {
    const T a = top[2 * ow], b = top[2 * ow + 1], e = bottom[2 * ow], d = bottom[2 * ow + 1];
    const T ab = b > a ? b : a;
    const T abe = e > ab ? e : ab;
    y[ow] = d > abe ? d : abe;
  }
}

template <typename T>
void MaxPool2x2(const Window3& w, int64_t planes, const T* x, T* y, ThreadPool& threads) {
  const int64_t in_size = w.input_size(), out_size = w.output_size(), outputs = w.output[2];
  threads.ParallelFor(planes, std::max<int64_t>(1, kParallelElementThreshold / std::max<int64_t>(1, in_size)),
                      [&](int64_t begin, int64_t end) {
                        for (int64_t p = begin; p < end; ++p) {
                          const T* plane = x + p * in_size;
                          T* out = y + p * out_size;
                          if (outputs < k2x2ShortRow) {  // Short rows: packed (see k2x2ShortRow).
                            T top[2 * k2x2PackedWindows], bottom[2 * k2x2PackedWindows];
                            const int64_t pairs_per_block = k2x2PackedWindows / outputs;
                            for (int64_t first = 0; first < w.output[1]; first += pairs_per_block) {
                              const int64_t pairs = std::min(pairs_per_block, w.output[1] - first);
                              PackRowPairs(w, plane, first, pairs, top, bottom);
                              MaxPool2x2Row(top, bottom, out + first * outputs, pairs * outputs);
                            }
                          } else {
                            for (int64_t oh = 0; oh < w.output[1]; ++oh) {
                              const T* top = plane + 2 * oh * w.input[2];
                              MaxPool2x2Row(top, top + w.input[2], out + oh * outputs, outputs);
                            }
                          }
                        }
                      });
}

// oneDNN's pooling for one input shape; `primitive` unset when oneDNN declined the configuration.
struct PoolPlan {
  std::optional<dnnl::pooling_v2_forward> primitive;
  memory::desc src, dst, scratchpad;
};

std::optional<memory::data_type> DnnlTypeOf(DataType dtype) {
  switch (dtype) {
    case DataType::kFloat32:
      return memory::data_type::f32;
    case DataType::kUint8:
      return memory::data_type::u8;
    case DataType::kInt8:
      return memory::data_type::s8;
    default:
      return std::nullopt;
  }
}

class PoolKernel final : public Kernel {
 public:
  PoolKernel(PoolKind kind, PoolAttributes attributes) : kind_(kind), attributes_(std::move(attributes)) {}

  absl::Status Compute(KernelContext& context) const override {
    const char* name = kind_ == PoolKind::kMax ? "MaxPool" : "AveragePool";
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const PoolShape shape, CheckPoolInputs(name, *x, attributes_));
    if (shape.window.rank() > 3) return absl::UnimplementedError("pooling over more than 3 dims");
    const WindowGeometry& geometry = shape.window;
    const Shape& out_shape = shape.output;
    const bool wants_indices = kind_ == PoolKind::kMax && context.wants_output(1);

    auto run = [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), out_shape));
      Tensor* indices = nullptr;
      if (wants_indices) {
        TRAIND_ASSIGN_OR_RETURN(indices, context.AllocateOutput(1, DataType::kInt64, out_shape));
      }
      if (y->num_elements() == 0) return absl::OkStatus();
      const Window3 window(geometry);
      if constexpr (std::is_floating_point_v<T>) {
        if (kind_ == PoolKind::kMax && !wants_indices && IsSimple2x2(window)) {
          MaxPool2x2<T>(window, x->dim(0) * x->dim(1), x->data<T>(), y->mutable_data<T>(), context.threads());
          return absl::OkStatus();
        }
      }
      if (!wants_indices) {
        TRAIND_ASSIGN_OR_RETURN(std::shared_ptr<const PoolPlan> plan, DnnlPlan(*x, geometry, out_shape));
        if (plan != nullptr && plan->primitive) {
          return ExecuteDnnl(*plan->primitive, plan->scratchpad,
                             {{DNNL_ARG_SRC, WrapMemory(plan->src, x->raw_data())},
                              {DNNL_ARG_DST, WrapMemory(plan->dst, y->mutable_raw_data())}},
                             context);
        }
      }
      PoolReference<T>(kind_, attributes_.count_include_pad, attributes_.column_major_indices, window,
                       x->dim(0) * x->dim(1), x->data<T>(), y->mutable_data<T>(),
                       indices == nullptr ? nullptr : indices->mutable_data<int64_t>(), context.threads());
      return absl::OkStatus();
    };
    if (kind_ == PoolKind::kMax) {
      return DispatchAmong<float, double, int8_t, uint8_t>(x->dtype(), name, run);
    }
    return DispatchAmong<TRAIND_FLOAT_TYPES>(x->dtype(), name, run);
  }

 private:
  // The cached oneDNN plan, or nullptr when oneDNN cannot compute this case exactly.
  absl::StatusOr<std::shared_ptr<const PoolPlan>> DnnlPlan(const Tensor& x, const WindowGeometry& g,
                                                           const Shape& out_shape) const {
    const std::optional<memory::data_type> type = DnnlTypeOf(x.dtype());
    if (!type) return nullptr;
    memory::dims pad_end;
    bool window_passes_end_padding = false;
    for (size_t i = 0; i < g.rank(); ++i) {
      // oneDNN wants the end padding that exactly fits the output (ceil_mode may need more).
      pad_end.push_back(std::max(g.pad_end[i], g.ReachPadEnd(i)));
      window_passes_end_padding |= g.ReachPadEnd(i) > g.pad_end[i];
    }
    // oneDNN's include-padding average divides by the full kernel size; ONNX does not count taps
    // past the declared end padding, so those cases stay with the direct loop.
    if (kind_ == PoolKind::kAverage && attributes_.count_include_pad && window_passes_end_padding) {
      return nullptr;
    }
    return cache_.GetOrCreate(x.shape(), [&]() -> absl::StatusOr<std::shared_ptr<const PoolPlan>> {
      auto plan = std::make_shared<PoolPlan>();
      const dnnl::algorithm algorithm = kind_ == PoolKind::kMax         ? dnnl::algorithm::pooling_max
                                        : attributes_.count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                                                        : dnnl::algorithm::pooling_avg_exclude_padding;
      memory::dims dilations;  // oneDNN counts the gaps: ONNX dilation 1 is oneDNN 0.
      for (int64_t d : g.dilations) dilations.push_back(d - 1);
      plan->src = PlainDesc(x.shape(), *type);
      plan->dst = PlainDesc(out_shape, *type);
      const absl::Status created = CatchDnnlError("pooling", absl::StatusCode::kUnimplemented, [&] {
        dnnl::pooling_v2_forward::desc desc(dnnl::prop_kind::forward_inference, algorithm, plan->src, plan->dst,
                                            memory::dims(g.strides.begin(), g.strides.end()),
                                            memory::dims(g.kernel.begin(), g.kernel.end()), dilations,
                                            memory::dims(g.pad_begin.begin(), g.pad_begin.end()), pad_end);
        dnnl::pooling_v2_forward::primitive_desc pd(desc, UserScratchpadAttr(), DnnlCpuEngine());
        plan->scratchpad = pd.scratchpad_desc();
        plan->primitive = dnnl::pooling_v2_forward(pd);
      });
      if (!created.ok()) plan->primitive.reset();  // Declined: the direct loop runs instead.
      return std::shared_ptr<const PoolPlan>(std::move(plan));
    });
  }

  PoolKind kind_;
  PoolAttributes attributes_;
  DnnlPrimitiveCache<PoolPlan> cache_;
};

// Sum of n contiguous values with independent partial sums, so the loop vectorises without
// reassociation flags.
template <typename T>
T PlaneSum(const T* p, int64_t n) {
  constexpr int kLanes = 16;
  T partial[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) partial[j] += p[i + j];
  }
  T sum = 0;
  for (; i < n; ++i) sum += p[i];
  for (int j = 0; j < kLanes; ++j) sum += partial[j];
  return sum;
}

template <typename T>
T PlaneMax(const T* p, int64_t n) {
  constexpr int kLanes = 16;
  T partial[kLanes];
  std::fill_n(partial, kLanes, std::numeric_limits<T>::lowest());
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) partial[j] = std::max(partial[j], p[i + j]);
  }
  T best = std::numeric_limits<T>::lowest();
  for (; i < n; ++i) best = std::max(best, p[i]);
  for (int j = 0; j < kLanes; ++j) best = std::max(best, partial[j]);
  return best;
}

class GlobalPoolKernel final : public Kernel {
 public:
  explicit GlobalPoolKernel(PoolKind kind) : kind_(kind) {}

  absl::Status Compute(KernelContext& context) const override {
    const char* name = kind_ == PoolKind::kMax ? "GlobalMaxPool" : "GlobalAveragePool";
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Shape out_shape, CheckGlobalPoolInput(name, *x));
    const int64_t planes = x->dim(0) * x->dim(1);
    const int64_t plane_size = DimProduct(x->shape(), 2, x->shape().size());
    return DispatchAmong<TRAIND_FLOAT_TYPES>(x->dtype(), name, [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), out_shape));
      if (planes == 0) return absl::OkStatus();
      if (plane_size == 0) {
        return absl::InvalidArgumentError(absl::StrCat(name, ": empty spatial dims in ", x->DebugString()));
      }
      const T* in = x->data<T>();
      T* out = y->mutable_data<T>();
      const bool is_max = kind_ == PoolKind::kMax;
      context.threads().ParallelFor(
          planes, std::max<int64_t>(1, kParallelElementThreshold / plane_size), [&](int64_t begin, int64_t end) {
            for (int64_t p = begin; p < end; ++p) {
              const T* plane = in + p * plane_size;
              out[p] = is_max ? PlaneMax(plane, plane_size) : PlaneSum(plane, plane_size) / static_cast<T>(plane_size);
            }
          });
      return absl::OkStatus();
    });
  }

 private:
  PoolKind kind_;
};

// ChannelsLastMaxPool (domain ai.traind.training): MaxPool's output Y of an X [N, H, W, C], Y [N, OH, OW, C], made
// by the channels-last plan pass; 2-D windows, MaxPool's attributes, no Indices output.
class ChannelsLastMaxPoolKernel final : public Kernel {
 public:
  explicit ChannelsLastMaxPoolKernel(PoolAttributes attributes) : attributes_(std::move(attributes)) {}

  bool IsChannelsLastMaxPool2x2() const override {
    const SpatialAttributes& spatial = attributes_.spatial;
    auto all = [](const std::vector<int64_t>& values, int64_t value) {
      return std::all_of(values.begin(), values.end(), [value](int64_t v) { return v == value; });
    };
    return (spatial.auto_pad == AutoPad::kNotSet || spatial.auto_pad == AutoPad::kValid) && !attributes_.ceil_mode &&
           spatial.kernel_shape == std::vector<int64_t>{2, 2} && spatial.strides == std::vector<int64_t>{2, 2} &&
           all(spatial.pads, 0) && all(spatial.dilations, 1);
  }

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    if (x->rank() != 4) {
      return absl::InvalidArgumentError(
          absl::StrCat("ChannelsLastMaxPool: input must be [N, H, W, C], got ", x->DebugString()));
    }
    const Tensor x_channels_first = x->Reshaped(ChannelsFirstShape(x->shape()));
    TRAIND_ASSIGN_OR_RETURN(const PoolShape shape, CheckPoolInputs("ChannelsLastMaxPool", x_channels_first, attributes_));
    const Window3 window(shape.window);
    const int64_t batch = x->dim(0), channels = x->dim(3);
    const int64_t in_size = window.input_size() * channels, out_size = window.output_size() * channels;
    return DispatchAmong<TRAIND_FLOAT_TYPES>(x->dtype(), "ChannelsLastMaxPool", [&](auto tag) -> absl::Status {
      using T = typename decltype(tag)::type;
      TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), ChannelsLastShape(shape.output)));
      const T* in = x->data<T>();
      T* out = y->mutable_data<T>();
      context.threads().ParallelFor(batch, 1, [&](int64_t begin, int64_t end) {
        for (int64_t n = begin; n < end; ++n) {
          ChannelsLastMaxValues<T>(window, channels, in + n * in_size, out + n * out_size);
        }
      });
      return absl::OkStatus();
    });
  }

 private:
  PoolAttributes attributes_;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreatePoolKernel(const KernelInit& init, PoolKind kind) {
  TRAIND_ASSIGN_OR_RETURN(PoolAttributes attributes, ParsePoolAttributes(init, kind == PoolKind::kMax));
  return std::unique_ptr<Kernel>(new PoolKernel(kind, std::move(attributes)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateMaxPoolKernel(const KernelInit& init) {
  return CreatePoolKernel(init, PoolKind::kMax);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateAveragePoolKernel(const KernelInit& init) {
  return CreatePoolKernel(init, PoolKind::kAverage);
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateChannelsLastMaxPoolKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(PoolAttributes attributes, ParsePoolAttributes(init, /*max=*/true));
  return std::unique_ptr<Kernel>(new ChannelsLastMaxPoolKernel(std::move(attributes)));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateGlobalMaxPoolKernel(const KernelInit&) {
  return std::unique_ptr<Kernel>(new GlobalPoolKernel(PoolKind::kMax));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateGlobalAveragePoolKernel(const KernelInit&) {
  return std::unique_ptr<Kernel>(new GlobalPoolKernel(PoolKind::kAverage));
}

// GlobalAveragePool: every input element receives dy / (number of spatial elements).
absl::Status GlobalAveragePoolGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> shape, g.StaticShape(g.I(0)));
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  int64_t spatial = 1;
  for (size_t d = 2; d < shape.size(); ++d) spatial *= shape[d];
  const std::string expanded = g.Temp("dy_expanded");
  g.Emit("Expand", {g.GO(0), g.Int64Constant(shape)}, {expanded});
  g.Emit("Div", {expanded, g.ScalarConstant(static_cast<double>(spatial), type)}, {g.GI(0)});
  return absl::OkStatus();
}

// MaxPool: each output's gradient goes to the input element its window selected. One fused MaxPoolGrad node
// (engine/ops/pool_grad.cc) finds that element again in X, so the forward needs no Indices output; it takes the
// forward node's attributes unchanged.
absl::Status MaxPoolGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  onnx::NodeProto* node = g.Emit("MaxPoolGrad", {g.GO(0), g.I(0)}, {g.GI(0)});
  node->set_domain(kTraindTrainingDomain);
  *node->mutable_attribute() = g.node().attribute();
  return absl::OkStatus();
}

// GlobalMaxPool (a ReduceMax over the spatial axes): dy goes to the elements equal to the maximum, shared evenly
// among ties, as ReduceMax's gradient.
absl::Status GlobalMaxPoolGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> shape, g.StaticShape(g.I(0)));
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  std::vector<int64_t> spatial_axes;
  for (size_t d = 2; d < shape.size(); ++d) spatial_axes.push_back(static_cast<int64_t>(d));
  const std::string hit = g.Temp("is_max"), mask = g.Temp("mask"), ties = g.Temp("ties"), share = g.Temp("share");
  g.Emit("Equal", {g.I(0), g.O(0)}, {hit});
  GradientRuleContext::SetIntAttr(g.Emit("Cast", {hit}, {mask}), "to", type);
  GradientRuleContext::SetIntAttr(g.Emit("ReduceSum", {mask, g.Int64Constant(spatial_axes)}, {ties}), "keepdims", 1);
  g.Emit("Div", {mask, ties}, {share});
  g.Emit("Mul", {share, g.GO(0)}, {g.GI(0)});
  return absl::OkStatus();
}

// AveragePool: every input element a window reads receives that window's dy / divisor. The divisor depends only
// on the output position (count_include_pad, pads, ceil_mode; the kernel's TapRange rules), so
//   dX = ConvTranspose(dY * (1 / divisor), ones[C, 1, kernel...], group C)
// with the forward strides and begin pads; the end pad (or output_padding, for trailing input elements no window
// reads, whose gradient is 0) makes the result X's shape.
absl::Status AveragePoolGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  const KernelInit init(g.node(), g.opset());
  TRAIND_ASSIGN_OR_RETURN(SpatialAttributes attributes, SpatialAttributes::Parse(init, /*allow_dilations=*/false));
  TRAIND_ASSIGN_OR_RETURN(int64_t ceil_mode, init.GetInt("ceil_mode", 0));
  TRAIND_ASSIGN_OR_RETURN(int64_t count_include_pad, init.GetInt("count_include_pad", 0));
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> x_shape, g.StaticShape(g.I(0)));
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  if (type != onnx::TensorProto::FLOAT && type != onnx::TensorProto::DOUBLE) {
    return absl::UnimplementedError("AveragePool gradients are implemented for float and double");
  }
  if (x_shape.size() < 3) return absl::InvalidArgumentError("AveragePool input needs spatial dims");
  const std::vector<int64_t> spatial(x_shape.begin() + 2, x_shape.end());
  TRAIND_ASSIGN_OR_RETURN(WindowGeometry w,
                          ResolveForwardWindow(attributes, spatial, attributes.kernel_shape, ceil_mode != 0));
  const size_t rank = w.rank();
  double positions = 1;  // in double: declared dims may be hostile
  for (size_t d = 0; d < rank; ++d) positions *= static_cast<double>(w.output[d]);
  if (positions > static_cast<double>(int64_t{1} << 24)) {
    return absl::UnimplementedError("AveragePool gradients for more than 2^24 output positions per plane");
  }
  // 1 / divisor per output position: the product of each dim's tap count.
  std::vector<int64_t> scale_dims = {1, 1};
  std::vector<double> scale = {1.0};
  for (size_t d = 0; d < rank; ++d) {
    const int64_t low = count_include_pad != 0 ? -w.pad_begin[d] : 0;
    const int64_t high = count_include_pad != 0 ? w.input[d] + w.pad_end[d] : w.input[d];
    std::vector<double> next;
    for (double outer : scale) {
      for (int64_t o = 0; o < w.output[d]; ++o) {
        int64_t first = 0, last = 0;
        TapRange(o, w.strides[d], w.pad_begin[d], w.kernel[d], w.dilations[d], low, high, &first, &last);
        next.push_back(last > first ? outer / static_cast<double>(last - first) : 0.0);
      }
    }
    scale = std::move(next);
    scale_dims.push_back(w.output[d]);
  }
  const std::string scale_name = g.Temp("inverse_divisor");
  onnx::NodeProto* constant = g.Emit("Constant", {}, {scale_name});
  auto* attribute = constant->add_attribute();
  attribute->set_name("value");
  attribute->set_type(onnx::AttributeProto::TENSOR);
  onnx::TensorProto* tensor = attribute->mutable_t();
  tensor->set_data_type(type);
  for (int64_t dim : scale_dims) tensor->add_dims(dim);
  for (double value : scale) {
    if (type == onnx::TensorProto::DOUBLE) {
      tensor->add_double_data(value);
    } else {
      tensor->add_float_data(static_cast<float>(value));
    }
  }
  std::vector<int64_t> pad_begin, pad_end, output_padding, ones_shape = {x_shape[1], 1};
  for (size_t d = 0; d < rank; ++d) {
    const int64_t reach = (w.output[d] - 1) * w.strides[d] + w.Extent(d) - w.pad_begin[d] - w.input[d];
    if (-reach >= w.strides[d]) return absl::InternalError("AveragePool: an input row no window reads");
    pad_begin.push_back(w.pad_begin[d]);
    pad_end.push_back(std::max<int64_t>(reach, 0));
    output_padding.push_back(std::max<int64_t>(-reach, 0));
    ones_shape.push_back(w.kernel[d]);
  }
  std::vector<int64_t> pads = pad_begin;
  pads.insert(pads.end(), pad_end.begin(), pad_end.end());
  const std::string scaled = g.Temp("dy_scaled"), ones = g.Temp("ones_kernel");
  g.Emit("Mul", {g.GO(0), scale_name}, {scaled});
  g.Emit("Expand", {g.ScalarConstant(1.0, type), g.Int64Constant(ones_shape)}, {ones});
  onnx::NodeProto* spread = g.Emit("ConvTranspose", {scaled, ones}, {g.GI(0)});
  GradientRuleContext::SetIntsAttr(spread, "strides", w.strides);
  GradientRuleContext::SetIntsAttr(spread, "pads", pads);
  GradientRuleContext::SetIntsAttr(spread, "output_padding", output_padding);
  GradientRuleContext::SetIntAttr(spread, "group", x_shape[1]);
  return absl::OkStatus();
}

}  // namespace traind::engine
