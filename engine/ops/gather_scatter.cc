// Indexed reads and writes: Gather, GatherElements, GatherND (reads) and ScatterElements,
// ScatterND and the deprecated Scatter (writes into a copy of `data`, optionally reducing).
//
// Every index tensor is validated in full (int32 or int64, each value in [-dim, dim)) before any
// element moves, so an out-of-range index is a clean kInvalidArgument and never an out-of-bounds
// access. Reads only copy, so they dispatch on element width; scatters with a reduction need the
// arithmetic type.
#include "engine/ops/gather_scatter.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/autodiff/gradient_rule.h"
#include "engine/core/status_macros.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/index_helpers.h"

namespace traind::engine {

absl::StatusOr<GatherShape> CheckGatherInputs(const Tensor& data, const Tensor& indices, int64_t axis) {
  GatherShape shape;
  TRAIND_ASSIGN_OR_RETURN(shape.axis, NormalizeAxis(axis, data.rank()));
  const Shape& data_shape = data.shape();
  shape.axis_dim = data_shape[shape.axis];
  shape.outer = DimProduct(data_shape, 0, shape.axis);
  shape.inner = DimProduct(data_shape, shape.axis + 1, data_shape.size());
  shape.count = indices.num_elements();
  shape.output.assign(data_shape.begin(), data_shape.begin() + shape.axis);
  shape.output.insert(shape.output.end(), indices.shape().begin(), indices.shape().end());
  shape.output.insert(shape.output.end(), data_shape.begin() + shape.axis + 1, data_shape.end());
  TRAIND_RETURN_IF_ERROR(DispatchIndexType(indices, "Gather indices", [&](auto index_tag) -> absl::Status {
    using I = typename decltype(index_tag)::type;
    return CheckIndices(indices.data<I>(), shape.count, shape.axis_dim, "Gather");
  }));
  return shape;
}

namespace {

// out = data[..., indices, ...] along `axis`: the indices' shape replaces that dim.
class GatherKernel final : public Kernel {
 public:
  explicit GatherKernel(int64_t axis) : axis_(axis) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* data, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* indices, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const GatherShape shape, CheckGatherInputs(*data, *indices, axis_));
    const int64_t axis_dim = shape.axis_dim, outer = shape.outer, inner = shape.inner, count = shape.count;
    const Shape& out_shape = shape.output;
    return DispatchIndexType(*indices, "Gather indices", [&](auto index_tag) -> absl::Status {
      using I = typename decltype(index_tag)::type;
      const I* index_data = indices->data<I>();  // Range checked by CheckGatherInputs.
      TRAIND_ASSIGN_OR_RETURN(Tensor * out, context.AllocateOutput(0, data->dtype(), out_shape));
      if (out->num_elements() == 0) return absl::OkStatus();
      return DispatchByWidth(data->dtype(), "Gather", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* in = data->data<T>();
        T* dst = out->mutable_data<T>();
        // One "row" per (outer, index) pair: `inner` contiguous elements.
        context.threads().ParallelFor(
            outer * count, std::max<int64_t>(1, kParallelElementThreshold / inner),
            [&](int64_t begin, int64_t end) {
              for (int64_t row = begin; row < end; ++row) {
                const int64_t o = row / count;
                int64_t index = static_cast<int64_t>(index_data[row % count]);
                if (index < 0) index += axis_dim;
                const T* src = in + (o * axis_dim + index) * inner;
                std::copy(src, src + inner, dst + row * inner);
              }
            });
        return absl::OkStatus();
      });
    });
  }

 private:
  int64_t axis_;
};

// Shared by GatherElements and ScatterElements: `indices` has data's rank, each dim no larger
// than data's (the spec's "indices[i][j][k] addresses data[indices[i][j][k]][j][k]" for axis 0).
absl::Status CheckElementsShapes(const char* op, const Tensor& data, const Tensor& indices,
                                 int64_t axis) {
  if (indices.rank() != data.rank()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": indices ", indices.DebugString(),
                                                   " must have the rank of data ",
                                                   data.DebugString()));
  }
  for (int64_t d = 0; d < data.rank(); ++d) {
    if (d != axis && indices.dim(d) > data.dim(d)) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": indices ", indices.DebugString(),
                                                     " exceed data ", data.DebugString(),
                                                     " in dim ", d));
    }
  }
  return absl::OkStatus();
}

// Calls fn(i, data_offset) for every element i of `indices` (row-major), where data_offset is
// the offset in data of that element's position with the axis coordinate set to the wrapped
// index. Serial: ScatterElements relies on the order for duplicate indices.
template <typename I, typename Fn>
void ForEachElementIndex(const Tensor& data, const Tensor& indices, const I* index_data,
                         int64_t axis, Fn&& fn) {
  const int64_t rank = data.rank();
  const std::vector<int64_t> data_strides = RowMajorStrides(data.shape());
  const int64_t axis_dim = data.dim(axis);
  const int64_t count = indices.num_elements();
  std::vector<int64_t> coord(rank, 0);
  int64_t base = 0;  // Data offset of `coord` without the axis term.
  for (int64_t i = 0; i < count; ++i) {
    int64_t index = static_cast<int64_t>(index_data[i]);
    if (index < 0) index += axis_dim;
    fn(i, base + index * data_strides[axis]);
    // Advance the coordinate odometer (and base) to element i + 1.
    for (int64_t d = rank - 1; d >= 0; --d) {
      if (++coord[d] < indices.dim(d)) {
        if (d != axis) base += data_strides[d];
        break;
      }
      if (d != axis) base -= (coord[d] - 1) * data_strides[d];
      coord[d] = 0;
    }
  }
}

class GatherElementsKernel final : public Kernel {
 public:
  explicit GatherElementsKernel(int64_t axis) : axis_(axis) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* data, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* indices, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const int64_t axis, NormalizeAxis(axis_, data->rank()));
    TRAIND_RETURN_IF_ERROR(CheckElementsShapes("GatherElements", *data, *indices, axis));
    return DispatchIndexType(*indices, "GatherElements indices", [&](auto index_tag) {
      using I = typename decltype(index_tag)::type;
      const I* index_data = indices->data<I>();
      TRAIND_RETURN_IF_ERROR(
          CheckIndices(index_data, indices->num_elements(), data->dim(axis), "GatherElements"));
      TRAIND_ASSIGN_OR_RETURN(Tensor * out,
                              context.AllocateOutput(0, data->dtype(), indices->shape()));
      return DispatchByWidth(data->dtype(), "GatherElements", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* in = data->data<T>();
        T* dst = out->mutable_data<T>();
        ForEachElementIndex(*data, *indices, index_data, axis,
                            [&](int64_t i, int64_t offset) { dst[i] = in[offset]; });
        return absl::OkStatus();
      });
    });
  }

 private:
  int64_t axis_;
};

// GatherND / ScatterND geometry: indices [b..., n..., k] address slices data[b..., i_1..i_k, :].
struct NdLayout {
  int64_t batches = 1;         // Product of the batch dims.
  int64_t tuples_per_batch = 1;
  int64_t index_depth = 0;     // k.
  int64_t slice_size = 1;      // Elements per addressed slice.
  int64_t data_batch_stride = 1;
  std::vector<int64_t> dims;     // data dims b..b+k-1 (for range checks).
  std::vector<int64_t> strides;  // Their element strides in data.
};

absl::StatusOr<NdLayout> MakeNdLayout(const char* op, const Tensor& data, const Tensor& indices,
                                      int64_t batch_dims) {
  const int64_t r = data.rank();
  const int64_t q = indices.rank();
  if (q < 1 || batch_dims < 0 || batch_dims >= std::min(r, q)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": batch_dims ", batch_dims,
                                                   " invalid for data ", data.DebugString(),
                                                   " and indices ", indices.DebugString()));
  }
  NdLayout layout;
  layout.index_depth = indices.dim(q - 1);
  if (layout.index_depth < 1 || layout.index_depth > r - batch_dims) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": indices' last dim ",
                                                   layout.index_depth, " must lie in [1, ",
                                                   r - batch_dims, "]"));
  }
  for (int64_t d = 0; d < batch_dims; ++d) {
    if (data.dim(d) != indices.dim(d)) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": batch dim ", d, " differs: data ",
                                                     data.DebugString(), ", indices ",
                                                     indices.DebugString()));
    }
  }
  const std::vector<int64_t> strides = RowMajorStrides(data.shape());
  layout.batches = DimProduct(data.shape(), 0, batch_dims);
  layout.tuples_per_batch = DimProduct(indices.shape(), batch_dims, q - 1);
  layout.slice_size = DimProduct(data.shape(), batch_dims + layout.index_depth, r);
  layout.data_batch_stride = DimProduct(data.shape(), batch_dims, r);
  for (int64_t j = 0; j < layout.index_depth; ++j) {
    layout.dims.push_back(data.dim(batch_dims + j));
    layout.strides.push_back(strides[batch_dims + j]);
  }
  return layout;
}

// Data offsets of every addressed slice (one per index tuple), range-checked.
template <typename I>
absl::StatusOr<std::vector<int64_t>> NdSliceOffsets(const char* op, const NdLayout& layout,
                                                    const I* index_data) {
  std::vector<int64_t> offsets(layout.batches * layout.tuples_per_batch);
  for (int64_t t = 0; t < static_cast<int64_t>(offsets.size()); ++t) {
    const I* tuple = index_data + t * layout.index_depth;
    int64_t offset = (t / layout.tuples_per_batch) * layout.data_batch_stride;
    for (int64_t j = 0; j < layout.index_depth; ++j) {
      int64_t index;
      if (!WrapIndex(static_cast<int64_t>(tuple[j]), layout.dims[j], &index)) {
        return IndexOutOfRange(op, static_cast<int64_t>(tuple[j]), layout.dims[j]);
      }
      offset += index * layout.strides[j];
    }
    offsets[t] = offset;
  }
  return offsets;
}

class GatherNDKernel final : public Kernel {
 public:
  explicit GatherNDKernel(int64_t batch_dims) : batch_dims_(batch_dims) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* data, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* indices, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(NdLayout layout, MakeNdLayout("GatherND", *data, *indices,
                                                          batch_dims_));
    Shape out_shape(indices->shape().begin(), indices->shape().end() - 1);
    out_shape.insert(out_shape.end(),
                     data->shape().begin() + batch_dims_ + layout.index_depth,
                     data->shape().end());
    return DispatchIndexType(*indices, "GatherND indices", [&](auto index_tag) {
      using I = typename decltype(index_tag)::type;
      TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> offsets,
                              NdSliceOffsets("GatherND", layout, indices->data<I>()));
      TRAIND_ASSIGN_OR_RETURN(Tensor * out, context.AllocateOutput(0, data->dtype(), out_shape));
      return DispatchByWidth(data->dtype(), "GatherND", [&](auto tag) {
        using T = typename decltype(tag)::type;
        const T* in = data->data<T>();
        T* dst = out->mutable_data<T>();
        const int64_t slice = layout.slice_size;
        context.threads().ParallelFor(
            static_cast<int64_t>(offsets.size()),
            std::max<int64_t>(1, kParallelElementThreshold / std::max<int64_t>(1, slice)),
            [&](int64_t begin, int64_t end) {
              for (int64_t t = begin; t < end; ++t) {
                std::copy(in + offsets[t], in + offsets[t] + slice, dst + t * slice);
              }
            });
        return absl::OkStatus();
      });
    });
  }

 private:
  int64_t batch_dims_;
};

using Reduction = ScatterReduction;

// Applies one update; `T` is the arithmetic type (bool only with kNone).
template <typename T>
inline void Reduce(Reduction reduction, T* target, T update) {
  switch (reduction) {
    case Reduction::kNone: *target = update; break;
    case Reduction::kAdd: *target = WrapAdd(*target, update); break;
    case Reduction::kMul: *target = WrapMul(*target, update); break;
  }
}

// Allocates output 0 as a copy of `data` and calls fn(TypeTag<T>, out) with T the arithmetic
// type of data (copy width when there is no reduction, so every dtype works then).
template <typename Fn>
absl::Status ScatterInto(KernelContext& context, const Tensor& data, const Tensor& updates,
                         Reduction reduction, const char* op, Fn&& fn) {
  if (updates.dtype() != data.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": updates dtype ",
                                                   DataTypeName(updates.dtype()),
                                                   " differs from data dtype ",
                                                   DataTypeName(data.dtype())));
  }
  TRAIND_ASSIGN_OR_RETURN(Tensor * out, context.AllocateOutput(0, data.dtype(), data.shape()));
  if (data.byte_size() > 0) std::memcpy(out->mutable_raw_data(), data.raw_data(), data.byte_size());
  if (reduction == Reduction::kNone) {
    return DispatchByWidth(data.dtype(), op, [&](auto tag) { return fn(tag, out); });
  }
  return DispatchAmong<TRAIND_NUMERIC_TYPES>(data.dtype(), op,
                                             [&](auto tag) { return fn(tag, out); });
}

// ScatterElements (and Scatter, opsets 9-10): out = data; out[idx-addressed] (op)= updates.
class ScatterElementsKernel final : public Kernel {
 public:
  ScatterElementsKernel(const char* name, int64_t axis, Reduction reduction)
      : name_(name), axis_(axis), reduction_(reduction) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* data, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* indices, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* updates, context.RequiredInput(2));
    TRAIND_ASSIGN_OR_RETURN(const int64_t axis, NormalizeAxis(axis_, data->rank()));
    TRAIND_RETURN_IF_ERROR(CheckElementsShapes(name_, *data, *indices, axis));
    if (updates->shape() != indices->shape()) {
      return absl::InvalidArgumentError(absl::StrCat(name_, ": updates ", updates->DebugString(),
                                                     " must have the shape of indices ",
                                                     indices->DebugString()));
    }
    return DispatchIndexType(*indices, "ScatterElements indices", [&](auto index_tag) {
      using I = typename decltype(index_tag)::type;
      const I* index_data = indices->data<I>();
      TRAIND_RETURN_IF_ERROR(
          CheckIndices(index_data, indices->num_elements(), data->dim(axis), name_));
      return ScatterInto(context, *data, *updates, reduction_, name_, [&](auto tag, Tensor* out) {
        using T = typename decltype(tag)::type;
        const T* update_data = updates->data<T>();
        T* dst = out->mutable_data<T>();
        ForEachElementIndex(*data, *indices, index_data, axis, [&](int64_t i, int64_t offset) {
          Reduce(reduction_, dst + offset, update_data[i]);
        });
        return absl::OkStatus();
      });
    });
  }

 private:
  const char* name_;
  int64_t axis_;
  Reduction reduction_;
};

// ScatterND: out = data; out[indices[t]] (op)= updates[t] slice by slice, in index order.
class ScatterNDKernel final : public Kernel {
 public:
  explicit ScatterNDKernel(Reduction reduction) : reduction_(reduction) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* data, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* indices, context.RequiredInput(1));
    TRAIND_ASSIGN_OR_RETURN(const Tensor* updates, context.RequiredInput(2));
    TRAIND_ASSIGN_OR_RETURN(const ScatterNdSlices slices, CheckScatterNdInputs(*data, *indices, *updates));
    const std::vector<int64_t>& offsets = slices.offsets;
    return ScatterInto(context, *data, *updates, reduction_, "ScatterND", [&](auto tag, Tensor* out) {
      using T = typename decltype(tag)::type;
      const T* update_data = updates->data<T>();
      T* dst = out->mutable_data<T>();
      const int64_t slice = slices.slice_size;
      // The reduction is chosen once, outside the slices, so that each slice is one vectorised loop (an embedding's
      // gradient adds a row per token). Slices stay in index order: repeated indices reduce deterministically.
      const auto each_slice = [&](auto reduce) {
        for (size_t t = 0; t < offsets.size(); ++t) {
          const T* __restrict src = update_data + t * slice;
          T* __restrict target = dst + offsets[t];
          for (int64_t j = 0; j < slice; ++j) target[j] = reduce(target[j], src[j]);
        }
      };
      switch (reduction_) {
        case Reduction::kNone:
          each_slice([](T, T update) { return update; });
          break;
        case Reduction::kAdd:
          each_slice([](T value, T update) { return WrapAdd(value, update); });
          break;
        case Reduction::kMul:
          each_slice([](T value, T update) { return WrapMul(value, update); });
          break;
      }
      return absl::OkStatus();
    });
  }

 private:
  Reduction reduction_;
};

}  // namespace

absl::StatusOr<ScatterReduction> ParseScatterReduction(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(std::string reduction, init.GetString("reduction", "none"));
  if (reduction == "none") return ScatterReduction::kNone;
  if (reduction == "add") return ScatterReduction::kAdd;
  if (reduction == "mul") return ScatterReduction::kMul;
  if (reduction == "max" || reduction == "min") {
    return init.Unsupported(absl::StrCat("reduction '", reduction, "' (opset 18) is unsupported"));
  }
  return init.Error(absl::StrCat("attribute 'reduction' must be none, add or mul, got '", reduction, "'"));
}

absl::StatusOr<ScatterNdSlices> CheckScatterNdInputs(const Tensor& data, const Tensor& indices, const Tensor& updates) {
  TRAIND_ASSIGN_OR_RETURN(NdLayout layout, MakeNdLayout("ScatterND", data, indices, 0));
  // updates.shape == indices.shape[:-1] + data.shape[k:].
  Shape expected(indices.shape().begin(), indices.shape().end() - 1);
  expected.insert(expected.end(), data.shape().begin() + layout.index_depth, data.shape().end());
  if (updates.shape() != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat("ScatterND: updates ", updates.DebugString(), " must have shape ", ShapeToString(expected)));
  }
  if (updates.dtype() != data.dtype()) {
    return absl::InvalidArgumentError(absl::StrCat("ScatterND: updates dtype ", DataTypeName(updates.dtype()),
                                                   " differs from data dtype ", DataTypeName(data.dtype())));
  }
  ScatterNdSlices slices;
  slices.slice_size = layout.slice_size;
  TRAIND_RETURN_IF_ERROR(DispatchIndexType(indices, "ScatterND indices", [&](auto index_tag) -> absl::Status {
    using I = typename decltype(index_tag)::type;
    TRAIND_ASSIGN_OR_RETURN(slices.offsets, NdSliceOffsets("ScatterND", layout, indices.data<I>()));
    return absl::OkStatus();
  }));
  return slices;
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateGatherKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(int64_t axis, init.GetInt("axis", 0));
  return std::unique_ptr<Kernel>(new GatherKernel(axis));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateGatherElementsKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(int64_t axis, init.GetInt("axis", 0));
  return std::unique_ptr<Kernel>(new GatherElementsKernel(axis));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateGatherNDKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(int64_t batch_dims, init.GetInt("batch_dims", 0));
  if (batch_dims < 0) return init.Error("attribute 'batch_dims' must be >= 0");
  return std::unique_ptr<Kernel>(new GatherNDKernel(batch_dims));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateScatterElementsKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(int64_t axis, init.GetInt("axis", 0));
  TRAIND_ASSIGN_OR_RETURN(Reduction reduction, ParseScatterReduction(init));
  return std::unique_ptr<Kernel>(new ScatterElementsKernel("ScatterElements", axis, reduction));
}

// The deprecated Scatter (opsets 9-10) is ScatterElements without a reduction.
absl::StatusOr<std::unique_ptr<Kernel>> CreateScatterKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(int64_t axis, init.GetInt("axis", 0));
  return std::unique_ptr<Kernel>(new ScatterElementsKernel("Scatter", axis, Reduction::kNone));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateScatterNDKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(Reduction reduction, ParseScatterReduction(init));
  return std::unique_ptr<Kernel>(new ScatterNDKernel(reduction));
}

// Gather along axis 0 (embeddings): dData = zeros with dy added at each gathered row, repeated indices summing
// (ScatterND with reduction "add", opset 16+).
absl::Status GatherGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  if (g.IntAttr("axis", 0) != 0) return absl::UnimplementedError("Gather gradients are implemented for axis 0 only");
  // A scalar constant index (PyTorch's q, k, v = qkv[0], qkv[1], qkv[2]) picks one slice: its gradient is dY
  // placed in zeros, i.e. one parallel Pad instead of a zero fill and a serial ScatterND.
  const ValueFacts* index_facts = g.Facts(g.I(1));
  const std::optional<std::vector<int64_t>> index = g.ConstantInts(g.I(1));
  if (index && index->size() == 1 && index_facts != nullptr && index_facts->has_static_shape &&
      index_facts->dims.empty()) {
    TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> data_shape, g.StaticShape(g.I(0)));
    const int64_t slice = (*index)[0] < 0 ? (*index)[0] + data_shape[0] : (*index)[0];
    if (slice >= 0 && slice < data_shape[0]) {
      std::vector<int64_t> pads(2 * data_shape.size(), 0);
      pads[0] = slice;
      pads[data_shape.size()] = data_shape[0] - 1 - slice;
      const std::string unsqueezed = g.Temp("dy_slice");
      g.Emit("Unsqueeze", {g.GO(0), g.Int64Constant({0})}, {unsqueezed});
      g.Emit("Pad", {unsqueezed, g.Int64Constant(pads)}, {g.GI(0)});
      return absl::OkStatus();
    }
  }
  if (g.opset() < 16) return absl::UnimplementedError("Gather gradients need opset 16 (ScatterND with reduction)");
  const std::string shape = g.Temp("data_shape"), indices = g.Temp("indices_nd");
  g.Emit("Shape", {g.I(0)}, {shape});
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  const std::string zeros = g.Zeros(shape, type);
  g.Emit("Unsqueeze", {g.I(1), g.Int64Constant({-1})}, {indices});
  GradientRuleContext::SetStringAttr(g.Emit("ScatterND", {zeros, indices, g.GO(0)}, {g.GI(0)}), "reduction", "add");
  return absl::OkStatus();
}

// GatherElements (opset 16+ for the scatter): dData = zeros with dy added at the gathered positions.
absl::Status GatherElementsGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  if (g.opset() < 16) return absl::UnimplementedError("GatherElements gradients need opset 16");
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  const std::string shape = g.Temp("data_shape");
  g.Emit("Shape", {g.I(0)}, {shape});
  onnx::NodeProto* scatter = g.Emit("ScatterElements", {g.Zeros(shape, type), g.I(1), g.GO(0)}, {g.GI(0)});
  GradientRuleContext::SetIntAttr(scatter, "axis", g.IntAttr("axis", 0));
  GradientRuleContext::SetStringAttr(scatter, "reduction", "add");
  return absl::OkStatus();
}

// GatherND (opset 16+ for the scatter): dData = zeros with dy added at the gathered slices. ScatterND has no
// batch_dims, so with batch_dims b the leading b coordinates of every index tuple (the position in the batch
// dims, static) are prepended to the indices first.
absl::Status GatherNDGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  if (g.opset() < 16) return absl::UnimplementedError("GatherND gradients need opset 16 (ScatterND with reduction)");
  TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(0)));
  TRAIND_ASSIGN_OR_RETURN(int32_t index_type, g.ElemType(g.I(1)));
  const int64_t batch_dims = g.IntAttr("batch_dims", 0);
  std::string indices = g.I(1);
  if (index_type != onnx::TensorProto::INT64) {
    indices = g.Temp("indices64");
    GradientRuleContext::SetIntAttr(g.Emit("Cast", {g.I(1)}, {indices}), "to", onnx::TensorProto::INT64);
  }
  if (batch_dims > 0) {
    TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> index_shape, g.StaticShape(g.I(1)));
    if (static_cast<int64_t>(index_shape.size()) <= batch_dims) {
      return absl::InvalidArgumentError("GatherND: indices rank must exceed batch_dims");
    }
    // coordinates[..., j] = the position along batch dim j of each index tuple.
    std::vector<int64_t> tuple_dims(index_shape.begin(), index_shape.end() - 1);
    double tuple_count = 1;  // in double: declared dims may be hostile
    for (int64_t dim : tuple_dims) tuple_count *= static_cast<double>(dim);
    if (tuple_count * static_cast<double>(batch_dims) > static_cast<double>(int64_t{1} << 24)) {
      return absl::UnimplementedError("GatherND gradients with batch_dims for more than 2^24 index coordinates");
    }
    const int64_t tuples = static_cast<int64_t>(tuple_count);
    std::vector<int64_t> coordinates;
    coordinates.reserve(static_cast<size_t>(tuples * batch_dims));
    for (int64_t t = 0; t < tuples; ++t) {
      std::vector<int64_t> position(tuple_dims.size());
      for (int64_t rest = t, d = static_cast<int64_t>(tuple_dims.size()) - 1; d >= 0; --d) {
        position[d] = rest % tuple_dims[d];
        rest /= tuple_dims[d];
      }
      coordinates.insert(coordinates.end(), position.begin(), position.begin() + batch_dims);
    }
    std::vector<int64_t> coordinate_shape = tuple_dims;
    coordinate_shape.push_back(batch_dims);
    const std::string batch_coordinates = g.Temp("batch_coordinates"), full = g.Temp("full_indices");
    g.Emit("Reshape", {g.Int64Constant(coordinates), g.Int64Constant(coordinate_shape)}, {batch_coordinates});
    GradientRuleContext::SetIntAttr(g.Emit("Concat", {batch_coordinates, indices}, {full}), "axis", -1);
    indices = full;
  }
  const std::string shape = g.Temp("data_shape");
  g.Emit("Shape", {g.I(0)}, {shape});
  GradientRuleContext::SetStringAttr(g.Emit("ScatterND", {g.Zeros(shape, type), indices, g.GO(0)}, {g.GI(0)}),
                                     "reduction", "add");
  return absl::OkStatus();
}

// ScatterElements and ScatterND share their gradient's shape; `elements` picks the gather/scatter pair.
//   none: y = data with the scattered positions replaced: dData = dy with those positions zeroed,
//         dUpdates = dy gathered at the positions (indices are assumed distinct, as the op's result is otherwise
//         unspecified);
//   add:  dData = dy, dUpdates = dy gathered;
//   mul:  y = data * (product of the updates landing on each position): dData = dy scattered-multiplied by the
//         updates; dUpdates = (dy * y) gathered / updates (a zero update makes that gradient NaN).
namespace {

absl::Status ScatterGradient(GradientRuleContext& g, bool elements) {
  const char* scatter_op = elements ? "ScatterElements" : "ScatterND";
  const char* gather_op = elements ? "GatherElements" : "GatherND";
  std::string reduction = "none";
  for (const auto& attribute : g.node().attribute()) {
    if (attribute.name() == "reduction") reduction = attribute.s();
  }
  if (reduction != "none" && reduction != "add" && reduction != "mul") {
    return absl::UnimplementedError(absl::StrCat(scatter_op, " gradients with reduction '", reduction, "'"));
  }
  const int64_t axis = g.IntAttr("axis", 0);
  auto set_axis = [&](onnx::NodeProto* node) {
    if (elements) GradientRuleContext::SetIntAttr(node, "axis", axis);
    return node;
  };
  if (g.NeedsGI(0)) {
    if (reduction == "add") {
      g.Emit("Identity", {g.GO(0)}, {g.GI(0)});
    } else if (reduction == "mul") {
      GradientRuleContext::SetStringAttr(set_axis(g.Emit(scatter_op, {g.GO(0), g.I(1), g.I(2)}, {g.GI(0)})),
                                         "reduction", "mul");
    } else {
      TRAIND_ASSIGN_OR_RETURN(int32_t type, g.ElemType(g.I(2)));
      const std::string shape = g.Temp("updates_shape");
      g.Emit("Shape", {g.I(2)}, {shape});
      set_axis(g.Emit(scatter_op, {g.GO(0), g.I(1), g.Zeros(shape, type)}, {g.GI(0)}));
    }
  }
  if (g.NeedsGI(2)) {
    if (reduction == "mul") {
      const std::string weighted = g.Temp("dy_y"), gathered = g.Temp("dy_y_gathered");
      g.Emit("Mul", {g.GO(0), g.O(0)}, {weighted});
      set_axis(g.Emit(gather_op, {weighted, g.I(1)}, {gathered}));
      g.Emit("Div", {gathered, g.I(2)}, {g.GI(2)});
    } else {
      set_axis(g.Emit(gather_op, {g.GO(0), g.I(1)}, {g.GI(2)}));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ScatterElementsGradient(GradientRuleContext& g) { return ScatterGradient(g, /*elements=*/true); }
absl::Status ScatterNDGradient(GradientRuleContext& g) { return ScatterGradient(g, /*elements=*/false); }

}  // namespace traind::engine
