// Conv and ConvTranspose.
//
// Conv (float32, 1-3 spatial dims) runs oneDNN's convolution primitive, built once per input shape
// and cached in the kernel. Activations enter and leave in ONNX's plain NC[D]HW layout; for
// kernels larger than 1x1 oneDNN picks its preferred internal layouts (format_tag::any) and the
// kernel reorders into and out of them, so the fast blocked implementations are used.
//
// ConvTranspose (float32 and float64, any spatial rank) is a GEMM per (image, group) followed by a
// col2im scatter-add, which handles every pads / output_padding / output_shape combination ONNX
// allows (including negative effective padding) without special cases.
#include "engine/ops/conv_ops.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "engine/autodiff/gradient_rule.h"
#include "engine/core/status_macros.h"
#include "engine/model/traind_schemas.h"
#include "engine/ops/direct_conv.h"
#include "engine/ops/dnnl_util.h"
#include "engine/ops/spatial_attributes.h"
#include "engine/runtime/dispatch.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {
namespace {

using dnnl::memory;

memory::dims ToDnnlDims(absl::Span<const int64_t> values) { return memory::dims(values.begin(), values.end()); }

// Checks X / W / B shapes shared by Conv and ConvTranspose: X is [N, C, spatial...], W has X's
// rank, and the optional bias B is 1-D with `out_channels` entries.
absl::Status CheckConvOperands(const char* op, const Tensor& x, const Tensor& w, const Tensor* b) {
  if (x.rank() < 3) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": input must be [N, C, spatial...], got ", x.DebugString()));
  }
  if (w.rank() != x.rank()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": weights ", w.DebugString(), " must have the input's rank (", x.DebugString(), ")"));
  }
  if (w.dtype() != x.dtype() || (b != nullptr && b->dtype() != x.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": inputs must share one dtype"));
  }
  return absl::OkStatus();
}

// The kernel spatial dims from W, checked against the kernel_shape attribute when present.
absl::StatusOr<std::vector<int64_t>> KernelFromWeights(const char* op, const Tensor& w,
                                                       const std::vector<int64_t>& attribute) {
  std::vector<int64_t> kernel(w.shape().begin() + 2, w.shape().end());
  if (!attribute.empty() && attribute != kernel) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": kernel_shape attribute disagrees with weights ", w.DebugString()));
  }
  return kernel;
}

// X, W (and B) of Conv and ConvGrad: the shared part of CheckConvInputs and CheckConvGradInputs.
absl::StatusOr<ConvShape> ResolveConv(const char* op, const Tensor& x, const Tensor& w, const Tensor* b,
                                      const SpatialAttributes& attributes, int64_t group) {
  TRAIND_RETURN_IF_ERROR(CheckConvOperands(op, x, w, b));
  ConvShape shape;
  shape.channels = x.dim(1);
  shape.out_channels = w.dim(0);
  if (shape.channels != w.dim(1) * group || shape.out_channels % group != 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": input ", x.DebugString(), " and weights ", w.DebugString(),
                                                   " do not fit group ", group,
                                                   " (need C = W.dim(1) * group, M divisible by group)"));
  }
  if (b != nullptr && (b->rank() != 1 || b->dim(0) != shape.out_channels)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": bias ", b->DebugString(), " must be [", shape.out_channels, "]"));
  }
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> kernel, KernelFromWeights(op, w, attributes.kernel_shape));
  const std::vector<int64_t> spatial(x.shape().begin() + 2, x.shape().end());
  TRAIND_ASSIGN_OR_RETURN(shape.window, ResolveForwardWindow(attributes, spatial, kernel, false));
  shape.output = {x.dim(0), shape.out_channels};
  shape.output.insert(shape.output.end(), shape.window.output.begin(), shape.window.output.end());
  return shape;
}

}  // namespace

absl::StatusOr<int64_t> ParseConvGroup(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(int64_t group, init.GetInt("group", 1));
  if (group < 1) return init.Error(absl::StrCat("attribute 'group' must be >= 1, got ", group));
  return group;
}

absl::StatusOr<ConvShape> CheckConvInputs(const Tensor& x, const Tensor& w, const Tensor* b,
                                          const SpatialAttributes& attributes, int64_t group) {
  return ResolveConv("Conv", x, w, b, attributes, group);
}

absl::StatusOr<ConvShape> CheckConvGradInputs(const Tensor& dy, const Tensor& x, const Tensor& w,
                                              const SpatialAttributes& attributes, int64_t group) {
  TRAIND_ASSIGN_OR_RETURN(ConvShape shape, ResolveConv("ConvGrad", x, w, nullptr, attributes, group));
  if (dy.shape() != shape.output || dy.dtype() != x.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("ConvGrad: dY ", dy.DebugString(), " must have Conv's output ",
                                                   ShapeToString(shape.output), " and X's dtype"));
  }
  return shape;
}

namespace {

// ------------------------------------------------------------------------------------------------
// Conv

// Everything needed to run one input shape: the primitive and the layout changes around it.
struct ConvPlan {
  dnnl::convolution_forward primitive;
  memory::desc src, weights, bias, dst;  // Layouts the primitive runs on.
  memory::desc scratchpad;
  std::optional<DnnlLayoutChange> src_in, weights_in, dst_out;  // Unset: plain already.
};

class ConvKernel final : public Kernel {
 public:
  // `channels_last`: X and Y are [N, spatial..., C] in memory (ChannelsLastConv), W stays [M, C/g, k...].
  ConvKernel(SpatialAttributes attributes, int64_t group, bool channels_last)
      : attributes_(std::move(attributes)), group_(group), channels_last_(channels_last) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* w, context.RequiredInput(1));
    const Tensor* b = context.input(2);
    // Shapes are checked and the primitive described in ONNX's [N, C, spatial...] order; only memory differs.
    Tensor x_channels_first;
    if (channels_last_) {
      if (x->rank() < 3 || x->rank() > 5) {
        return absl::InvalidArgumentError(
            absl::StrCat("ChannelsLastConv: input must be [N, spatial..., C] with 1-3 spatial dims, got ",
                         x->DebugString()));
      }
      x_channels_first = x->Reshaped(ChannelsFirstShape(x->shape()));
      x = &x_channels_first;
    }
    TRAIND_ASSIGN_OR_RETURN(const ConvShape shape, CheckConvInputs(*x, *w, b, attributes_, group_));
    const WindowGeometry& window = shape.window;
    const Shape& out_shape = shape.output;

    if (x->dtype() != DataType::kFloat32) return UnsupportedDtype("Conv", x->dtype());
    if (window.rank() > 3) return absl::UnimplementedError("Conv: more than 3 spatial dims");
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), channels_last_
                                                                                  ? ChannelsLastShape(out_shape)
                                                                                  : out_shape));
    if (y->num_elements() == 0) return absl::OkStatus();
    if (w->num_elements() == 0) return FillWithBias(b, y, channels_last_);  // No input channels: y = bias.
    if (channels_last_ && window.rank() == 2 && group_ == 1 && window.dilations[0] == 1 && window.dilations[1] == 1) {
      const DirectConvGeometry direct{x->dim(0),        window.input[0],   window.input[1],   x->dim(1),
                                      window.output[0], window.output[1],  w->dim(0),         window.kernel[0],
                                      window.kernel[1], window.strides[0], window.strides[1], window.pad_begin[0],
                                      window.pad_begin[1]};
      if (DirectConvApplies(direct)) {
        DirectConv(direct, x->data<float>(), w->data<float>(), b == nullptr ? nullptr : b->data<float>(),
                   y->mutable_data<float>(), context.threads());
        return absl::OkStatus();
      }
    }

    std::vector<int64_t> key = x->shape();
    key.insert(key.end(), w->shape().begin(), w->shape().end());
    key.push_back(b != nullptr);
    TRAIND_ASSIGN_OR_RETURN(std::shared_ptr<const ConvPlan> plan, cache_.GetOrCreate(key, [&] {
      return BuildPlan(*x, *w, b != nullptr, window, out_shape);
    }));
    return Run(*plan, *x, *w, b, *y, context);
  }

 private:
  static absl::Status FillWithBias(const Tensor* b, Tensor* y, bool channels_last) {
    float* out = y->mutable_data<float>();
    if (channels_last) {
      const int64_t channels = y->dim(y->rank() - 1);
      for (int64_t i = 0; i < y->num_elements(); ++i) out[i] = b == nullptr ? 0.0f : b->data<float>()[i % channels];
      return absl::OkStatus();
    }
    const int64_t channels = y->dim(1);
    const int64_t plane = DimProduct(y->shape(), 2, y->shape().size());
    for (int64_t i = 0; i < y->dim(0) * channels; ++i) {
      std::fill_n(out + i * plane, plane, b == nullptr ? 0.0f : b->data<float>()[i % channels]);
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::shared_ptr<const ConvPlan>> BuildPlan(const Tensor& x, const Tensor& w, bool has_bias,
                                                            const WindowGeometry& window,
                                                            const Shape& out_shape) const {
    auto plan = std::make_shared<ConvPlan>();
    const auto f32 = memory::data_type::f32;
    const DnnlConvGeometry geometry = MakeDnnlConvGeometry(w.shape(), group_, window, x.dim(1));
    const memory::dims& weight_dims = geometry.weight_dims;
    const memory::dims& dilations = geometry.dilations;
    // Channels-last activations are taken as they are: oneDNN's direct convolutions run on them (brgconv forward
    // prefers them), so they need no reorder at all.
    const bool given_layout = geometry.plain_activations || channels_last_;
    const auto activation_desc = [&](const Shape& dims) {
      return given_layout ? ActivationDesc(dims, f32, channels_last_)
                          : memory::desc(ToDnnlDims(dims), f32, memory::format_tag::any);
    };
    const memory::desc any_src = activation_desc(x.shape());
    const memory::desc any_weights(ToDnnlDims(weight_dims), f32, memory::format_tag::any);
    const memory::desc any_dst = activation_desc(out_shape);
    const memory::desc bias = has_bias ? PlainDesc({w.dim(0)}, f32) : memory::desc();
    TRAIND_RETURN_IF_ERROR(CatchDnnlError("Conv", absl::StatusCode::kUnimplemented, [&] {
      dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                           any_src, any_weights, bias, any_dst, ToDnnlDims(window.strides), dilations,
                                           ToDnnlDims(window.pad_begin), ToDnnlDims(window.pad_end));
      dnnl::convolution_forward::primitive_desc pd(desc, UserScratchpadAttr(), DnnlCpuEngine());
      plan->primitive = dnnl::convolution_forward(pd);
      plan->src = pd.src_desc();
      plan->weights = pd.weights_desc();
      plan->bias = bias;
      plan->dst = pd.dst_desc();
      plan->scratchpad = pd.scratchpad_desc();
      plan->src_in = MakeLayoutChange(ActivationDesc(x.shape(), f32, channels_last_), plan->src);
      plan->weights_in = MakeLayoutChange(PlainDesc(weight_dims, f32), plan->weights);
      plan->dst_out = MakeLayoutChange(plan->dst, ActivationDesc(out_shape, f32, channels_last_));
    }));
    return std::shared_ptr<const ConvPlan>(std::move(plan));
  }

  // Runs the plan; blocked-layout temporaries come from the run's buffer pool.
  static absl::Status Run(const ConvPlan& plan, const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y,
                          KernelContext& context) {
    std::shared_ptr<Buffer> src_buffer, weights_buffer, dst_buffer;
    const void* src = x.raw_data();
    const void* weights = w.raw_data();
    void* dst = y.mutable_raw_data();
    if (plan.src_in) {
      TRAIND_ASSIGN_OR_RETURN(src_buffer, context.buffers().Acquire(plan.src.get_size()));
      TRAIND_RETURN_IF_ERROR(RunLayoutChange(*plan.src_in, src, src_buffer->data(), context));
      src = src_buffer->data();
    }
    // Weights are reordered on every run: during training they change between runs, and their
    // reorder is small next to the convolution itself.
    if (plan.weights_in) {
      TRAIND_ASSIGN_OR_RETURN(weights_buffer, context.buffers().Acquire(plan.weights.get_size()));
      TRAIND_RETURN_IF_ERROR(RunLayoutChange(*plan.weights_in, weights, weights_buffer->data(), context));
      weights = weights_buffer->data();
    }
    if (plan.dst_out) {
      TRAIND_ASSIGN_OR_RETURN(dst_buffer, context.buffers().Acquire(plan.dst.get_size()));
      dst = dst_buffer->data();
    }
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, WrapMemory(plan.src, src)},
                                            {DNNL_ARG_WEIGHTS, WrapMemory(plan.weights, weights)},
                                            {DNNL_ARG_DST, WrapMemory(plan.dst, dst)}};
    if (b != nullptr) args.emplace(DNNL_ARG_BIAS, WrapMemory(plan.bias, b->raw_data()));
    TRAIND_RETURN_IF_ERROR(ExecuteDnnl(plan.primitive, plan.scratchpad, std::move(args), context));
    if (plan.dst_out) {
      TRAIND_RETURN_IF_ERROR(RunLayoutChange(*plan.dst_out, dst, y.mutable_raw_data(), context));
    }
    return absl::OkStatus();
  }

  SpatialAttributes attributes_;
  int64_t group_;
  bool channels_last_;
  DnnlPrimitiveCache<ConvPlan> cache_;
};

// ------------------------------------------------------------------------------------------------
// ConvTranspose

// Row-major C[m, n] = A^T[m, k] * B[k, n], A stored [k, m] with leading dimension lda.
template <typename T>
absl::Status GemmTransA(int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb, T* c) {
  constexpr int64_t kBlasLimit = (int64_t{1} << 31) - 1;
  if (m > kBlasLimit || n > kBlasLimit || k > kBlasLimit) {
    return absl::UnimplementedError("ConvTranspose: GEMM dims above 2^31");
  }
  if constexpr (std::is_same_v<T, float>) {
    if (dnnl_sgemm('T', 'N', m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, n) != dnnl_success) {
      return absl::InternalError("ConvTranspose: dnnl_sgemm failed");
    }
  } else {
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<blasint>(m), static_cast<blasint>(n),
                static_cast<blasint>(k), 1.0, a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), 0.0, c,
                static_cast<blasint>(n));
  }
  return absl::OkStatus();
}

// Floor division for a possibly negative numerator and a positive denominator (Python's //).
int64_t FloorDiv(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

// The ConvTranspose window for one input, with every spatial list padded to 3 dims (leading
// unit dims) so that col2im is one loop nest for 1-D, 2-D and 3-D.
struct TransposeWindow {
  int64_t input[3], output[3], kernel[3], strides[3], dilations[3], pad_begin[3];
};

class ConvTransposeKernel final : public Kernel {
 public:
  ConvTransposeKernel(SpatialAttributes attributes, int64_t group, std::vector<int64_t> output_padding,
                      std::vector<int64_t> output_shape)
      : attributes_(std::move(attributes)),
        group_(group),
        output_padding_(std::move(output_padding)),
        output_shape_(std::move(output_shape)) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* w, context.RequiredInput(1));
    const Tensor* b = context.input(2);
    TRAIND_RETURN_IF_ERROR(CheckConvOperands("ConvTranspose", *x, *w, b));
    // W is [C, M/group, k...].
    const int64_t channels = x->dim(1);
    const int64_t out_channels = w->dim(1) * group_;
    if (w->dim(0) != channels || channels % group_ != 0) {
      return absl::InvalidArgumentError(absl::StrCat("ConvTranspose: input ", x->DebugString(), " and weights ",
                                                     w->DebugString(), " do not fit group ", group_));
    }
    if (b != nullptr && (b->rank() != 1 || b->dim(0) != out_channels)) {
      return absl::InvalidArgumentError(
          absl::StrCat("ConvTranspose: bias ", b->DebugString(), " must be [", out_channels, "]"));
    }
    TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> kernel,
                            KernelFromWeights("ConvTranspose", *w, attributes_.kernel_shape));
    const size_t rank = kernel.size();
    if (rank > 3) return absl::UnimplementedError("ConvTranspose: more than 3 spatial dims");
    TRAIND_ASSIGN_OR_RETURN(TransposeWindow window, Resolve(*x, kernel));
    Shape out_shape = {x->dim(0), out_channels};
    for (size_t i = 3 - rank; i < 3; ++i) out_shape.push_back(window.output[i]);
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), out_shape));
    return DispatchAmong<TRAIND_FLOAT_TYPES>(x->dtype(), "ConvTranspose", [&](auto tag) {
      using T = typename decltype(tag)::type;
      return Run<T>(*x, *w, b, window, *y, context);
    });
  }

 private:
  // Output size and begin padding per ONNX: explicit output_shape wins (pads derived from it),
  // then auto_pad SAME_* (output = input * stride), else the explicit pads.
  absl::StatusOr<TransposeWindow> Resolve(const Tensor& x, const std::vector<int64_t>& kernel) const {
    const size_t rank = kernel.size();
    auto check = [&](const std::vector<int64_t>& list, size_t per_dim, const char* name) {
      return list.empty() || list.size() == rank * per_dim
                 ? absl::OkStatus()
                 : absl::InvalidArgumentError(absl::StrCat("ConvTranspose: '", name, "' has ", list.size(),
                                                           " values for ", rank, " spatial dims"));
    };
    TRAIND_RETURN_IF_ERROR(check(attributes_.strides, 1, "strides"));
    TRAIND_RETURN_IF_ERROR(check(attributes_.dilations, 1, "dilations"));
    TRAIND_RETURN_IF_ERROR(check(attributes_.pads, 2, "pads"));
    TRAIND_RETURN_IF_ERROR(check(output_padding_, 1, "output_padding"));
    // output_shape may list the spatial dims only, or all dims.
    std::vector<int64_t> requested = output_shape_;
    if (requested.size() == rank + 2) requested.erase(requested.begin(), requested.begin() + 2);
    TRAIND_RETURN_IF_ERROR(check(requested, 1, "output_shape"));

    TransposeWindow window;
    const size_t lead = 3 - rank;  // Leading unit dims.
    for (size_t j = 0; j < 3; ++j) {
      window.input[j] = window.output[j] = window.kernel[j] = 1;
      window.strides[j] = window.dilations[j] = 1;
      window.pad_begin[j] = 0;
    }
    for (size_t i = 0; i < rank; ++i) {
      const size_t j = lead + i;
      const int64_t input = x.dim(2 + i);
      const int64_t stride = attributes_.strides.empty() ? 1 : attributes_.strides[i];
      const int64_t dilation = attributes_.dilations.empty() ? 1 : attributes_.dilations[i];
      const int64_t adjust = output_padding_.empty() ? 0 : output_padding_[i];
      if (input > (int64_t{1} << 31) || kernel[i] > (int64_t{1} << 31)) {
        return absl::InvalidArgumentError("ConvTranspose: spatial dim out of range");
      }
      // Output size with no padding at all.
      const int64_t full = stride * (input - 1) + adjust + (kernel[i] - 1) * dilation + 1;
      int64_t output = 0, pad_begin = 0;
      if (!requested.empty() || attributes_.auto_pad == AutoPad::kSameUpper ||
          attributes_.auto_pad == AutoPad::kSameLower) {
        output = !requested.empty() ? requested[i] : input * stride;
        const int64_t total = full - output;
        // Python floor division, as in the ONNX reference: the odd pad goes to the end for
        // SAME_UPPER, to the beginning otherwise.
        const int64_t half = FloorDiv(total, 2);
        pad_begin = attributes_.auto_pad == AutoPad::kSameUpper ? half : total - half;
      } else if (attributes_.auto_pad == AutoPad::kValid) {
        output = full;
      } else {
        pad_begin = attributes_.pads.empty() ? 0 : attributes_.pads[i];
        const int64_t pad_end = attributes_.pads.empty() ? 0 : attributes_.pads[i + rank];
        output = full - pad_begin - pad_end;
      }
      if (output < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("ConvTranspose: padding leaves a negative output size in spatial dim ", i));
      }
      if (output > (int64_t{1} << 31)) {
        return absl::InvalidArgumentError("ConvTranspose: output size out of range");
      }
      window.input[j] = input;
      window.output[j] = output;
      window.kernel[j] = kernel[i];
      window.strides[j] = stride;
      window.dilations[j] = dilation;
      window.pad_begin[j] = pad_begin;
    }
    return window;
  }

  template <typename T>
  absl::Status Run(const Tensor& x, const Tensor& w, const Tensor* b, const TransposeWindow& win, Tensor& y,
                   KernelContext& context) const {
    const int64_t batch = x.dim(0);
    const int64_t channels = x.dim(1);
    const int64_t out_channels = y.dim(1);
    const int64_t group_in = channels / group_;
    const int64_t group_out = out_channels / group_;
    const int64_t input_size = win.input[0] * win.input[1] * win.input[2];
    const int64_t output_size = win.output[0] * win.output[1] * win.output[2];
    const int64_t kernel_size = win.kernel[0] * win.kernel[1] * win.kernel[2];
    T* out = y.mutable_data<T>();
    // Start from the bias (or zero); col2im accumulates into it.
    for (int64_t i = 0; i < batch * out_channels; ++i) {
      const T value = b == nullptr ? T(0) : b->data<T>()[i % out_channels];
      std::fill_n(out + i * output_size, output_size, value);
    }
    if (y.num_elements() == 0 || x.num_elements() == 0 || kernel_size == 0) {
      return absl::OkStatus();
    }
    // col[group_out * kernel_size, input_size] for one (image, group).
    const int64_t col_rows = group_out * kernel_size;
    TRAIND_ASSIGN_OR_RETURN(Tensor col, context.buffers().AllocateTensor(y.dtype(), {col_rows, input_size}));
    T* col_data = col.mutable_data<T>();
    const T* in = x.data<T>();
    const T* weights = w.data<T>();
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t g = 0; g < group_; ++g) {
        // W_g is [group_in, group_out * kernel_size]; col = W_g^T * X_g.
        TRAIND_RETURN_IF_ERROR(GemmTransA<T>(col_rows, input_size, group_in, weights + g * group_in * col_rows,
                                             col_rows, in + (n * channels + g * group_in) * input_size, input_size,
                                             col_data));
        T* out_group = out + (n * out_channels + g * group_out) * output_size;
        context.threads().ParallelFor(group_out, 1, [&](int64_t begin, int64_t end) {
          for (int64_t m = begin; m < end; ++m) {
            Col2Im(col_data + m * kernel_size * input_size, win, out_group + m * output_size);
          }
        });
      }
    }
    return absl::OkStatus();
  }

  // Scatter-adds one output channel's columns [kernel_size, input_size] into its output plane.
  template <typename T>
  static void Col2Im(const T* col, const TransposeWindow& win, T* out) {
    for (int64_t kd = 0; kd < win.kernel[0]; ++kd) {
      for (int64_t kh = 0; kh < win.kernel[1]; ++kh) {
        for (int64_t kw = 0; kw < win.kernel[2]; ++kw) {
          for (int64_t id = 0; id < win.input[0]; ++id) {
            const int64_t od = id * win.strides[0] - win.pad_begin[0] + kd * win.dilations[0];
            if (od < 0 || od >= win.output[0]) {
              col += win.input[1] * win.input[2];
              continue;
            }
            for (int64_t ih = 0; ih < win.input[1]; ++ih, col += win.input[2]) {
              const int64_t oh = ih * win.strides[1] - win.pad_begin[1] + kh * win.dilations[1];
              if (oh < 0 || oh >= win.output[1]) continue;
              T* out_row = out + (od * win.output[1] + oh) * win.output[2];
              const int64_t ow0 = kw * win.dilations[2] - win.pad_begin[2];
              for (int64_t iw = 0; iw < win.input[2]; ++iw) {
                const int64_t ow = ow0 + iw * win.strides[2];
                if (ow >= 0 && ow < win.output[2]) out_row[ow] += col[iw];
              }
            }
          }
        }
      }
    }
  }

  SpatialAttributes attributes_;
  int64_t group_;
  std::vector<int64_t> output_padding_;
  std::vector<int64_t> output_shape_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateConvKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(SpatialAttributes attributes, SpatialAttributes::Parse(init, /*allow_dilations=*/true));
  TRAIND_ASSIGN_OR_RETURN(int64_t group, ParseConvGroup(init));
  return std::unique_ptr<Kernel>(new ConvKernel(std::move(attributes), group, /*channels_last=*/false));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateChannelsLastConvKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(SpatialAttributes attributes, SpatialAttributes::Parse(init, /*allow_dilations=*/true));
  TRAIND_ASSIGN_OR_RETURN(int64_t group, ParseConvGroup(init));
  return std::unique_ptr<Kernel>(new ConvKernel(std::move(attributes), group, /*channels_last=*/true));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateConvTransposeKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(SpatialAttributes attributes, SpatialAttributes::Parse(init, /*allow_dilations=*/true));
  TRAIND_ASSIGN_OR_RETURN(int64_t group, ParseConvGroup(init));
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> output_padding, init.GetInts("output_padding"));
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> output_shape, init.GetInts("output_shape"));
  for (int64_t v : output_padding) {
    if (v < 0) return init.Error("attribute 'output_padding' must be non-negative");
  }
  for (int64_t v : output_shape) {
    if (v < 0) return init.Error("attribute 'output_shape' must be non-negative");
  }
  if (!attributes.strides.empty() && output_padding.size() == attributes.strides.size()) {
    for (size_t i = 0; i < output_padding.size(); ++i) {
      if (output_padding[i] >=
          std::max(attributes.strides[i], attributes.dilations.empty() ? 1 : attributes.dilations[i])) {
        return init.Error("attribute 'output_padding' must be smaller than stride or dilation");
      }
    }
  }
  return std::unique_ptr<Kernel>(
      new ConvTransposeKernel(std::move(attributes), group, std::move(output_padding), std::move(output_shape)));
}

// Conv gradients: one fused ConvGrad node (engine/ops/conv_grad.cc, oneDNN backward data / weights) computes
// whichever of dX, dW, dB are needed, for every group count; it takes the forward node's attributes unchanged.
absl::Status ConvGradient(GradientRuleContext& g) {
  const bool needs_bias = g.num_inputs() > 2 && g.NeedsGI(2);
  onnx::NodeProto* node = g.Emit("ConvGrad", {g.GO(0), g.I(0), g.I(1)},
                                 {g.NeedsGI(0) ? g.GI(0) : "", g.NeedsGI(1) ? g.GI(1) : "", needs_bias ? g.GI(2) : ""});
  node->set_domain(kTraindTrainingDomain);
  *node->mutable_attribute() = g.node().attribute();
  return absl::OkStatus();
}

// ConvTranspose is the adjoint of Conv with the same weights, strides, dilations, pads and group, so its
// gradients are Convs (static shapes; the effective pads as the kernel resolves them from pads, auto_pad,
// output_shape and output_padding):
//   dX = Conv(dY, W), which reads exactly the outputs each input element wrote;
//   dW = Conv's weight gradient with the roles of input and output gradient exchanged, per group:
//        Conv(dY_g with N and M swapped, X_g with N and C swapped as the kernel), strides and dilations exchanged,
//        cropped to the kernel size, swapped back to [C/group, M/group, k...] and concatenated over groups;
//   dB = dY summed over every axis but 1.
absl::Status ConvTransposeGradient(GradientRuleContext& g) {
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> x_shape, g.StaticShape(g.I(0)));
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> w_shape, g.StaticShape(g.I(1)));
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> y_shape, g.StaticShape(g.O(0)));
  if (x_shape.size() < 3 || w_shape.size() != x_shape.size() || y_shape.size() != x_shape.size()) {
    return absl::InvalidArgumentError("ConvTranspose: input, weight and output ranks disagree");
  }
  const size_t spatial = x_shape.size() - 2;
  std::vector<int64_t> strides = g.IntsAttr("strides"), dilations = g.IntsAttr("dilations"), pads = g.IntsAttr("pads"),
                       output_padding = g.IntsAttr("output_padding");
  if (strides.empty()) strides.assign(spatial, 1);
  if (dilations.empty()) dilations.assign(spatial, 1);
  if (output_padding.empty()) output_padding.assign(spatial, 0);
  if (pads.empty()) pads.assign(2 * spatial, 0);
  std::string auto_pad = "NOTSET";
  for (const auto& attribute : g.node().attribute()) {
    if (attribute.name() == "auto_pad") auto_pad = attribute.s();
  }
  const bool derive_pads = !g.IntsAttr("output_shape").empty() || auto_pad != "NOTSET";
  const int64_t group = g.IntAttr("group", 1);
  if (group < 1 || x_shape[1] % group != 0 || y_shape[1] % group != 0 || strides.size() != spatial ||
      dilations.size() != spatial || output_padding.size() != spatial || pads.size() != 2 * spatial) {
    return absl::InvalidArgumentError("ConvTranspose: inconsistent group, strides, dilations, pads or output_padding");
  }
  for (size_t d = 0; d < spatial; ++d) {
    // The kernel's output before cropping, and how much of it the pads crop.
    const int64_t full =
        strides[d] * (x_shape[d + 2] - 1) + output_padding[d] + (w_shape[d + 2] - 1) * dilations[d] + 1;
    const int64_t total = full - y_shape[d + 2];
    if (derive_pads) {
      const int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2);  // floor division
      pads[d] = auto_pad == "VALID" ? 0 : auto_pad == "SAME_UPPER" ? half : total - half;
    }
    pads[d + spatial] = total - pads[d];
    if (pads[d] < 0 || pads[d + spatial] < 0) {
      return absl::UnimplementedError("ConvTranspose gradients with an output larger than the uncropped result");
    }
    if (output_padding[d] >= strides[d]) {
      return absl::UnimplementedError("ConvTranspose gradients with output_padding >= stride");
    }
  }
  auto set_window = [&](onnx::NodeProto* conv, const std::vector<int64_t>& conv_strides,
                        const std::vector<int64_t>& conv_dilations) {
    GradientRuleContext::SetIntsAttr(conv, "strides", conv_strides);
    GradientRuleContext::SetIntsAttr(conv, "dilations", conv_dilations);
    GradientRuleContext::SetIntsAttr(conv, "pads", pads);
  };
  if (g.NeedsGI(0)) {
    onnx::NodeProto* conv = g.Emit("Conv", {g.GO(0), g.I(1)}, {g.GI(0)});
    set_window(conv, strides, dilations);
    GradientRuleContext::SetIntAttr(conv, "group", group);
  }
  if (g.NeedsGI(1)) {
    std::vector<int64_t> swap_first_two(x_shape.size());
    for (size_t d = 0; d < swap_first_two.size(); ++d) swap_first_two[d] = static_cast<int64_t>(d);
    std::swap(swap_first_two[0], swap_first_two[1]);
    std::vector<int64_t> kernel_starts(spatial, 0), kernel_ends, kernel_axes;
    for (size_t d = 0; d < spatial; ++d) {
      kernel_ends.push_back(w_shape[d + 2]);
      kernel_axes.push_back(static_cast<int64_t>(d + 2));
    }
    const int64_t x_group_channels = x_shape[1] / group, y_group_channels = y_shape[1] / group;
    // Channels [begin, begin + count) of `value` along axis 1 (the whole value for one group).
    auto channels = [&](const std::string& value, int64_t begin, int64_t count) {
      if (group == 1) return value;
      const std::string slice = g.Temp("group_channels");
      g.Emit("Slice", {value, g.Int64Constant({begin}), g.Int64Constant({begin + count}), g.Int64Constant({1})},
             {slice});
      return slice;
    };
    std::vector<std::string> group_gradients;
    for (int64_t k = 0; k < group; ++k) {
      const std::string dy_t = g.Temp("dy_mn"), x_t = g.Temp("x_cn"), full = g.Temp("dw_full"),
                        cropped = g.Temp("dw_cropped");
      const std::string dw = group == 1 ? g.GI(1) : g.Temp("dw_group");
      GradientRuleContext::SetIntsAttr(
          g.Emit("Transpose", {channels(g.GO(0), k * y_group_channels, y_group_channels)}, {dy_t}), "perm",
          swap_first_two);
      GradientRuleContext::SetIntsAttr(
          g.Emit("Transpose", {channels(g.I(0), k * x_group_channels, x_group_channels)}, {x_t}), "perm",
          swap_first_two);
      set_window(g.Emit("Conv", {dy_t, x_t}, {full}), dilations, strides);
      g.Emit("Slice",
             {full, g.Int64Constant(kernel_starts), g.Int64Constant(kernel_ends), g.Int64Constant(kernel_axes)},
             {cropped});
      GradientRuleContext::SetIntsAttr(g.Emit("Transpose", {cropped}, {dw}), "perm", swap_first_two);
      group_gradients.push_back(dw);
    }
    if (group > 1) GradientRuleContext::SetIntAttr(g.Emit("Concat", group_gradients, {g.GI(1)}), "axis", 0);
  }
  if (g.num_inputs() > 2 && g.NeedsGI(2)) {
    std::vector<int64_t> axes = {0};
    for (size_t d = 2; d < y_shape.size(); ++d) axes.push_back(static_cast<int64_t>(d));
    onnx::NodeProto* sum = g.Emit("ReduceSum", {g.GO(0), g.Int64Constant(axes)}, {g.GI(2)});
    GradientRuleContext::SetIntAttr(sum, "keepdims", 0);
  }
  return absl::OkStatus();
}

}  // namespace traind::engine
