// ConvGrad (domain ai.traind.training): the gradients of Conv in one node, with oneDNN's convolution backward
// primitives.
//
//   ConvGrad(dY, X, W) -> (dX, dW, dB), each output optional; attributes exactly those of the forward Conv
//   (auto_pad, dilations, group, kernel_shape, pads, strides).
//
// dX runs convolution_backward_data, dW and dB one convolution_backward_weights (which also sums dY for the
// bias). Both are built with the forward_training primitive descriptor as their hint, once per shape, and like
// the forward Conv they run in oneDNN's preferred (blocked) layouts with reorders in and out, except where plain
// layouts win (1x1 kernels, a single input channel). Groups are oneDNN's grouped weights [g, M/g, C/g, k...],
// which is exactly ONNX's [M, C/g, k...] in memory. With channels_last = 1, dY, X and dX are [N, spatial..., C] in
// memory (the channels-last plan pass, engine/runtime/channels_last.h) and run on oneDNN's nhwc layouts as given.
//
// Channels-last dX of an ungrouped stride-1 convolution runs as a forward convolution instead: dX = conv(dY, W')
// with W'[c, m, k] = W[m, c, K-1-k] (the kernel transposed and flipped) and pads (K-1)·dilation - pad. oneDNN 2.6's
// nhwc backward-data kernel ran 10-35 % slower than its forward brgemm kernel on ResNet's 3x3 shapes (16-64
// channels, 8-32 pixels), and the flip costs one pass over the small weights per step.
#include <algorithm>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/ops/conv_ops.h"
#include "engine/ops/dnnl_util.h"
#include "engine/ops/spatial_attributes.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {
namespace {

using dnnl::memory;

memory::dims ToDims(absl::Span<const int64_t> values) { return memory::dims(values.begin(), values.end()); }

// The primitives for one (X, W) shape and one set of wanted outputs, and the layout changes around them.
struct ConvGradPlan {
  // Set when dX is wanted: convolution_backward_data, or convolution_forward of dY with the flipped weights.
  std::optional<dnnl::primitive> data;
  bool data_as_forward = false;
  memory::dims flipped_weight_dims;  // [C, M, k...] when data_as_forward
  memory::desc data_diff_dst, data_weights, data_diff_src, data_scratchpad;
  std::optional<DnnlLayoutChange> data_diff_dst_in, data_weights_in, data_diff_src_out;

  std::optional<dnnl::convolution_backward_weights> weights;  // Set when dW or dB is wanted.
  memory::desc weights_src, weights_diff_dst, weights_diff_weights, weights_diff_bias, weights_scratchpad;
  std::optional<DnnlLayoutChange> weights_src_in, weights_diff_dst_in, weights_diff_weights_out;
};

class ConvGradKernel final : public Kernel {
 public:
  // `channels_last`: dY, X and dX are [N, spatial..., C] in memory (as ChannelsLastConv's Y and X).
  ConvGradKernel(SpatialAttributes attributes, int64_t group, bool channels_last)
      : attributes_(std::move(attributes)), group_(group), channels_last_(channels_last) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* dy, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* w, context.RequiredInput(2));
    // Checked and described in ONNX's [N, C, spatial...] order; only memory differs.
    Tensor dy_channels_first, x_channels_first;
    if (channels_last_) {
      if (x->rank() < 3 || x->rank() > 5 || dy->rank() != x->rank()) {
        return absl::InvalidArgumentError(absl::StrCat("ConvGrad (channels_last): dY ", dy->DebugString(),
                                                       " and X ", x->DebugString(),
                                                       " must be [N, spatial..., C], 1-3 spatial dims"));
      }
      dy_channels_first = dy->Reshaped(ChannelsFirstShape(dy->shape()));
      x_channels_first = x->Reshaped(ChannelsFirstShape(x->shape()));
      dy = &dy_channels_first;
      x = &x_channels_first;
    }
    if (x->dtype() != DataType::kFloat32 || w->dtype() != DataType::kFloat32 || dy->dtype() != DataType::kFloat32) {
      return UnsupportedDtype("ConvGrad", x->dtype());
    }
    TRAIND_ASSIGN_OR_RETURN(const ConvShape shape, CheckConvGradInputs(*dy, *x, *w, attributes_, group_));
    if (shape.window.rank() > 3) return absl::UnimplementedError("ConvGrad: more than 3 spatial dims");
    const int64_t out_channels = shape.out_channels;
    const WindowGeometry& window = shape.window;
    const Shape& y_shape = shape.output;
    const bool wants_dx = context.wants_output(0), wants_dw = context.wants_output(1),
               wants_db = context.wants_output(2);
    Tensor *dx = nullptr, *dw = nullptr, *db = nullptr;
    if (wants_dx) {
      TRAIND_ASSIGN_OR_RETURN(dx, context.AllocateOutput(0, DataType::kFloat32,
                                                         channels_last_ ? ChannelsLastShape(x->shape()) : x->shape()));
    }
    if (wants_dw) {
      TRAIND_ASSIGN_OR_RETURN(dw, context.AllocateOutput(1, DataType::kFloat32, w->shape()));
    }
    if (wants_db) {
      TRAIND_ASSIGN_OR_RETURN(db, context.AllocateOutput(2, DataType::kFloat32, {out_channels}));
    }
    if (x->num_elements() == 0 || w->num_elements() == 0 || dy->num_elements() == 0) {
      for (Tensor* out : {dx, dw, db}) {
        if (out != nullptr) std::fill_n(out->mutable_data<float>(), out->num_elements(), 0.0f);
      }
      if (db != nullptr && dy->num_elements() > 0) SumBias(*dy, *db, channels_last_);
      return absl::OkStatus();
    }
    std::vector<int64_t> key = x->shape();
    key.insert(key.end(), w->shape().begin(), w->shape().end());
    key.push_back(wants_dx * 4 + wants_dw * 2 + wants_db);
    TRAIND_ASSIGN_OR_RETURN(std::shared_ptr<const ConvGradPlan> plan, cache_.GetOrCreate(key, [&] {
      return BuildPlan(*x, *w, y_shape, window, wants_dx, wants_dw || wants_db, wants_db);
    }));
    // dY in the primitives' layout; one reorder serves both when they agree on it.
    std::shared_ptr<Buffer> dy_for_data, dy_for_weights;
    const void* data_diff_dst = nullptr;
    const void* weights_diff_dst = nullptr;
    if (wants_dx) {
      TRAIND_ASSIGN_OR_RETURN(data_diff_dst, InLayout(plan->data_diff_dst_in, dy->raw_data(), dy_for_data, context));
    }
    if (wants_dw || wants_db) {
      if (wants_dx && plan->weights_diff_dst == plan->data_diff_dst) {
        weights_diff_dst = data_diff_dst;
      } else {
        TRAIND_ASSIGN_OR_RETURN(weights_diff_dst,
                                InLayout(plan->weights_diff_dst_in, dy->raw_data(), dy_for_weights, context));
      }
    }
    if (wants_dx) TRAIND_RETURN_IF_ERROR(RunData(*plan, data_diff_dst, *w, *dx, context));
    if (wants_dw || wants_db) TRAIND_RETURN_IF_ERROR(RunWeights(*plan, weights_diff_dst, *x, dw, db, context));
    return absl::OkStatus();
  }

 private:
  // dB = dY summed over every axis but 1 (only for empty inputs; oneDNN sums it otherwise).
  static void SumBias(const Tensor& dy, Tensor& db, bool channels_last) {
    const int64_t channels = dy.dim(1);
    if (channels_last) {
      float* out = db.mutable_data<float>();
      std::fill_n(out, channels, 0.0f);
      for (int64_t i = 0; i < dy.num_elements(); ++i) out[i % channels] += dy.data<float>()[i];
      return;
    }
    const int64_t plane = DimProduct(dy.shape(), 2, dy.shape().size());
    float* out = db.mutable_data<float>();
    std::fill_n(out, channels, 0.0f);
    for (int64_t i = 0; i < dy.dim(0) * channels; ++i) {
      for (int64_t j = 0; j < plane; ++j) out[i % channels] += dy.data<float>()[i * plane + j];
    }
  }

  absl::StatusOr<std::shared_ptr<const ConvGradPlan>> BuildPlan(const Tensor& x, const Tensor& w,
                                                                const Shape& y_shape, const WindowGeometry& window,
                                                                bool data, bool weights, bool bias) const {
    auto plan = std::make_shared<ConvGradPlan>();
    const auto f32 = memory::data_type::f32;
    // Same weight and layout policy as the forward Conv.
    const DnnlConvGeometry geometry = MakeDnnlConvGeometry(w.shape(), group_, window, x.dim(1));
    const memory::dims& weight_dims = geometry.weight_dims;
    const memory::dims& dilations = geometry.dilations;
    const bool given_layout = geometry.plain_activations || channels_last_;
    const auto activation = [&](const Shape& dims) {
      return given_layout ? ActivationDesc(dims, f32, channels_last_)
                          : memory::desc(ToDims(dims), f32, memory::format_tag::any);
    };
    const auto user = [&](const Shape& dims) { return ActivationDesc(dims, f32, channels_last_); };
    const memory::desc src = activation(x.shape()), dst = activation(y_shape);
    const memory::desc any_weights(ToDims(weight_dims), f32, memory::format_tag::any);
    const memory::desc bias_desc = bias ? PlainDesc({w.dim(0)}, f32) : memory::desc();
    const memory::dims strides = ToDims(window.strides), pad_begin = ToDims(window.pad_begin),
                       pad_end = ToDims(window.pad_end);
    TRAIND_RETURN_IF_ERROR(CatchDnnlError("ConvGrad", absl::StatusCode::kUnimplemented, [&] {
      const dnnl::engine& engine = DnnlCpuEngine();
      dnnl::convolution_forward::desc forward(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                              src, any_weights, bias_desc, dst, strides, dilations, pad_begin,
                                              pad_end);
      dnnl::convolution_forward::primitive_desc hint(forward, engine);
      if (data && DataAsForward(window)) {
        // dX = conv(dY, W') over dY padded by (K-1)·dilation - pad, stride 1 (see the file comment).
        memory::dims flipped_dims = weight_dims;
        std::swap(flipped_dims[0], flipped_dims[1]);
        memory::dims flipped_pad_begin(pad_begin.size()), flipped_pad_end(pad_end.size());
        for (size_t d = 0; d < pad_begin.size(); ++d) {
          const int64_t extent = (window.kernel[d] - 1) * window.dilations[d];
          flipped_pad_begin[d] = extent - pad_begin[d];
          flipped_pad_end[d] = extent - pad_end[d];
        }
        dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                             dst, memory::desc(flipped_dims, f32, memory::format_tag::any), src,
                                             strides, dilations, flipped_pad_begin, flipped_pad_end);
        dnnl::convolution_forward::primitive_desc pd(desc, UserScratchpadAttr(), engine);
        plan->data = dnnl::convolution_forward(pd);
        plan->data_as_forward = true;
        plan->flipped_weight_dims = flipped_dims;
        plan->data_diff_dst = pd.src_desc();
        plan->data_weights = pd.weights_desc();
        plan->data_diff_src = pd.dst_desc();
        plan->data_scratchpad = pd.scratchpad_desc();
        plan->data_diff_dst_in = MakeLayoutChange(user(y_shape), plan->data_diff_dst);
        plan->data_weights_in = MakeLayoutChange(PlainDesc(flipped_dims, f32), plan->data_weights);
        plan->data_diff_src_out = MakeLayoutChange(plan->data_diff_src, user(x.shape()));
      } else if (data) {
        dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, src, any_weights, dst,
                                                   strides, dilations, pad_begin, pad_end);
        dnnl::convolution_backward_data::primitive_desc pd(desc, UserScratchpadAttr(), engine, hint);
        plan->data = dnnl::convolution_backward_data(pd);
        plan->data_diff_dst = pd.diff_dst_desc();
        plan->data_weights = pd.weights_desc();
        plan->data_diff_src = pd.diff_src_desc();
        plan->data_scratchpad = pd.scratchpad_desc();
        plan->data_diff_dst_in = MakeLayoutChange(user(y_shape), plan->data_diff_dst);
        plan->data_weights_in = MakeLayoutChange(PlainDesc(weight_dims, f32), plan->data_weights);
        plan->data_diff_src_out = MakeLayoutChange(plan->data_diff_src, user(x.shape()));
      }
      if (weights) {
        dnnl::convolution_backward_weights::desc desc(dnnl::algorithm::convolution_direct, src, any_weights,
                                                      bias_desc, dst, strides, dilations, pad_begin, pad_end);
        dnnl::convolution_backward_weights::primitive_desc pd(desc, UserScratchpadAttr(), engine, hint);
        plan->weights = dnnl::convolution_backward_weights(pd);
        plan->weights_src = pd.src_desc();
        plan->weights_diff_dst = pd.diff_dst_desc();
        plan->weights_diff_weights = pd.diff_weights_desc();
        plan->weights_diff_bias = bias_desc;
        plan->weights_scratchpad = pd.scratchpad_desc();
        plan->weights_src_in = MakeLayoutChange(user(x.shape()), plan->weights_src);
        plan->weights_diff_dst_in = MakeLayoutChange(user(y_shape), plan->weights_diff_dst);
        plan->weights_diff_weights_out =
            MakeLayoutChange(plan->weights_diff_weights, PlainDesc(weight_dims, f32));
      }
    }));
    return std::shared_ptr<const ConvGradPlan>(std::move(plan));
  }

  // `data` in layout change->to: either `plain` itself (no change) or a pooled buffer filled by the reorder.
  static absl::StatusOr<const void*> InLayout(const std::optional<DnnlLayoutChange>& change, const void* plain,
                                              std::shared_ptr<Buffer>& holder, KernelContext& context) {
    if (!change) return plain;
    TRAIND_ASSIGN_OR_RETURN(holder, context.buffers().Acquire(change->to.get_size()));
    TRAIND_RETURN_IF_ERROR(RunLayoutChange(*change, plain, holder->data(), context));
    return static_cast<const void*>(holder->data());
  }

  // Whether dX runs as a forward convolution (channels-last, ungrouped, stride 1, pads within the kernel's extent).
  bool DataAsForward(const WindowGeometry& window) const {
    if (!channels_last_ || group_ != 1) return false;
    for (size_t d = 0; d < window.rank(); ++d) {
      const int64_t extent = (window.kernel[d] - 1) * window.dilations[d];
      if (window.strides[d] != 1 || window.pad_begin[d] > extent || window.pad_end[d] > extent) return false;
    }
    return true;
  }

  // W [M, C, k...] -> W' [C, M, k...] with every spatial axis reversed.
  static void FlipWeights(const float* w, const memory::dims& flipped_dims, float* flipped) {
    const int64_t in_channels = flipped_dims[0], out_channels = flipped_dims[1];
    int64_t taps = 1;
    for (size_t d = 2; d < flipped_dims.size(); ++d) taps *= flipped_dims[d];
    // Reversing every spatial axis of a row-major window reverses its flat index.
    for (int64_t m = 0; m < out_channels; ++m) {
      for (int64_t c = 0; c < in_channels; ++c) {
        const float* from = w + (m * in_channels + c) * taps;
        float* to = flipped + (c * out_channels + m) * taps;
        for (int64_t k = 0; k < taps; ++k) to[k] = from[taps - 1 - k];
      }
    }
  }

  // `diff_dst`: dY already in plan.data_diff_dst's layout.
  static absl::Status RunData(const ConvGradPlan& plan, const void* diff_dst, const Tensor& w, Tensor& dx,
                              KernelContext& context) {
    std::shared_ptr<Buffer> flipped_buffer, w_buffer, dx_buffer;
    const void* plain_weights = w.raw_data();
    if (plan.data_as_forward) {
      TRAIND_ASSIGN_OR_RETURN(flipped_buffer, context.buffers().Acquire(w.byte_size()));
      FlipWeights(w.data<float>(), plan.flipped_weight_dims, static_cast<float*>(flipped_buffer->data()));
      plain_weights = flipped_buffer->data();
    }
    TRAIND_ASSIGN_OR_RETURN(const void* weights, InLayout(plan.data_weights_in, plain_weights, w_buffer, context));
    void* diff_src = dx.mutable_raw_data();
    if (plan.data_diff_src_out) {
      TRAIND_ASSIGN_OR_RETURN(dx_buffer, context.buffers().Acquire(plan.data_diff_src.get_size()));
      diff_src = dx_buffer->data();
    }
    const int dy_arg = plan.data_as_forward ? DNNL_ARG_SRC : DNNL_ARG_DIFF_DST;
    const int dx_arg = plan.data_as_forward ? DNNL_ARG_DST : DNNL_ARG_DIFF_SRC;
    TRAIND_RETURN_IF_ERROR(ExecuteDnnl(*plan.data, plan.data_scratchpad,
                                       {{dy_arg, WrapMemory(plan.data_diff_dst, diff_dst)},
                                        {DNNL_ARG_WEIGHTS, WrapMemory(plan.data_weights, weights)},
                                        {dx_arg, WrapMemory(plan.data_diff_src, diff_src)}},
                                       context));
    if (plan.data_diff_src_out) {
      TRAIND_RETURN_IF_ERROR(RunLayoutChange(*plan.data_diff_src_out, diff_src, dx.mutable_raw_data(), context));
    }
    return absl::OkStatus();
  }

  // `diff_dst`: dY already in plan.weights_diff_dst's layout. dw / db may be null (not wanted); the primitive
  // still writes them, into scratch buffers.
  static absl::Status RunWeights(const ConvGradPlan& plan, const void* diff_dst, const Tensor& x, Tensor* dw,
                                 Tensor* db, KernelContext& context) {
    std::shared_ptr<Buffer> x_buffer, dw_buffer, db_buffer;
    TRAIND_ASSIGN_OR_RETURN(const void* src, InLayout(plan.weights_src_in, x.raw_data(), x_buffer, context));
    void* diff_weights = dw == nullptr ? nullptr : dw->mutable_raw_data();
    if (dw == nullptr || plan.weights_diff_weights_out) {
      TRAIND_ASSIGN_OR_RETURN(dw_buffer, context.buffers().Acquire(plan.weights_diff_weights.get_size()));
      diff_weights = dw_buffer->data();
    }
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, WrapMemory(plan.weights_src, src)},
        {DNNL_ARG_DIFF_DST, WrapMemory(plan.weights_diff_dst, diff_dst)},
        {DNNL_ARG_DIFF_WEIGHTS, WrapMemory(plan.weights_diff_weights, diff_weights)}};
    if (!plan.weights_diff_bias.is_zero()) {
      void* diff_bias = nullptr;
      if (db != nullptr) {
        diff_bias = db->mutable_raw_data();
      } else {
        TRAIND_ASSIGN_OR_RETURN(db_buffer, context.buffers().Acquire(plan.weights_diff_bias.get_size()));
        diff_bias = db_buffer->data();
      }
      args.emplace(DNNL_ARG_DIFF_BIAS, WrapMemory(plan.weights_diff_bias, diff_bias));
    }
    TRAIND_RETURN_IF_ERROR(ExecuteDnnl(*plan.weights, plan.weights_scratchpad, std::move(args), context));
    if (dw != nullptr && plan.weights_diff_weights_out) {
      TRAIND_RETURN_IF_ERROR(
          RunLayoutChange(*plan.weights_diff_weights_out, diff_weights, dw->mutable_raw_data(), context));
    }
    return absl::OkStatus();
  }

  SpatialAttributes attributes_;
  int64_t group_;
  bool channels_last_;
  DnnlPrimitiveCache<ConvGradPlan> cache_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateConvGradKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(SpatialAttributes attributes, SpatialAttributes::Parse(init, /*allow_dilations=*/true));
  TRAIND_ASSIGN_OR_RETURN(int64_t group, ParseConvGroup(init));
  TRAIND_ASSIGN_OR_RETURN(const int64_t channels_last, init.GetInt("channels_last", 0));
  if (channels_last != 0 && channels_last != 1) {
    return absl::InvalidArgumentError(absl::StrCat("ConvGrad: channels_last must be 0 or 1, got ", channels_last));
  }
  return std::unique_ptr<Kernel>(new ConvGradKernel(std::move(attributes), group, channels_last == 1));
}

}  // namespace traind::engine
