// Data-movement ops: Transpose and Concat. Both only copy elements, so they dispatch on element
// size (one instantiation per width serves every dtype).
#include "engine/ops/layout_ops.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/autodiff/gradient_rule.h"
#include "engine/core/status_macros.h"
#include "engine/ops/strided_copy.h"
#include "engine/runtime/dispatch.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {

absl::StatusOr<ConcatShape> CheckConcatInputs(absl::Span<const Tensor* const> inputs, int64_t axis) {
  if (inputs.empty() || inputs[0] == nullptr) return absl::InvalidArgumentError("Concat: input 0 is missing");
  const Tensor& first = *inputs[0];
  const int64_t rank = first.rank();
  ConcatShape shape;
  TRAIND_ASSIGN_OR_RETURN(shape.axis, NormalizeAxis(axis, rank));
  shape.output = first.shape();
  shape.output[shape.axis] = 0;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor* input = inputs[i];
    if (input == nullptr) return absl::InvalidArgumentError(absl::StrCat("Concat: input ", i, " is missing"));
    if (input->dtype() != first.dtype() || input->rank() != rank) {
      return absl::InvalidArgumentError("Concat: inputs differ in dtype or rank");
    }
    for (int64_t d = 0; d < rank; ++d) {
      if (d != shape.axis && input->dim(d) != first.dim(d)) {
        return absl::InvalidArgumentError(
            absl::StrCat("Concat: ", input->DebugString(), " does not match ", first.DebugString()));
      }
    }
    shape.output[shape.axis] += input->dim(shape.axis);  // Sum <= sum of valid element counts: no overflow.
  }
  return shape;
}

namespace {

DataType UnsignedOfSize(size_t bytes) {
  switch (bytes) {
    case 1: return DataType::kUint8;
    case 2: return DataType::kUint16;
    case 4: return DataType::kUint32;
    case 8: return DataType::kUint64;
    default: return DataType::kUndefined;
  }
}

class TransposeKernel final : public Kernel {
 public:
  explicit TransposeKernel(std::vector<int64_t> perm) : perm_(std::move(perm)) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* x, context.RequiredInput(0));
    const int64_t rank = x->rank();
    std::vector<int64_t> perm = perm_;
    if (perm.empty()) {
      for (int64_t d = rank - 1; d >= 0; --d) perm.push_back(d);
    }
    if (static_cast<int64_t>(perm.size()) != rank) {
      return absl::InvalidArgumentError(
          absl::StrCat("Transpose: perm has ", perm.size(), " entries for rank ", rank));
    }
    std::vector<bool> seen(rank, false);
    for (int64_t& p : perm) {
      TRAIND_ASSIGN_OR_RETURN(p, NormalizeAxis(p, rank));
      if (seen[p]) return absl::InvalidArgumentError("Transpose: perm repeats an axis");
      seen[p] = true;
    }
    // Input element strides, then the stride of each output dim in the input.
    std::vector<int64_t> in_strides(rank, 1);
    for (int64_t d = rank - 2; d >= 0; --d) in_strides[d] = in_strides[d + 1] * x->dim(d + 1);
    Shape out_shape(rank);
    std::vector<int64_t> strides(rank);
    for (int64_t d = 0; d < rank; ++d) {
      out_shape[d] = x->dim(perm[d]);
      strides[d] = in_strides[perm[d]];
    }
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, x->dtype(), out_shape));
    if (y->num_elements() == 0) return absl::OkStatus();
    if (rank <= 1) {
      std::memcpy(y->mutable_raw_data(), x->raw_data(), x->byte_size());
      return absl::OkStatus();
    }
    return DispatchAmong<uint8_t, uint16_t, uint32_t, uint64_t>(
        UnsignedOfSize(ElementSize(x->dtype())), "Transpose", [&](auto tag) {
          using T = typename decltype(tag)::type;
          CopyStridedView(x->data<T>(), out_shape, strides, y->mutable_data<T>(), context.threads());
          return absl::OkStatus();
        });
  }

 private:
  std::vector<int64_t> perm_;  // Empty: reverse the dims.
};

class ConcatKernel final : public Kernel {
 public:
  explicit ConcatKernel(int64_t axis) : axis_(axis) {}

  absl::Status Compute(KernelContext& context) const override {
    const absl::Span<const Tensor* const> inputs = context.inputs();
    TRAIND_ASSIGN_OR_RETURN(const ConcatShape shape, CheckConcatInputs(inputs, axis_));
    const Tensor* first = inputs[0];
    const Shape& out_shape = shape.output;
    const int64_t axis = shape.axis;
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, first->dtype(), out_shape));
    if (y->num_elements() == 0) return absl::OkStatus();
    const size_t element_size = ElementSize(first->dtype());
    const int64_t outer = DimProduct(out_shape, 0, static_cast<size_t>(axis));
    const size_t out_row_bytes =
        static_cast<size_t>(DimProduct(out_shape, static_cast<size_t>(axis), out_shape.size())) *
        element_size;
    char* out = static_cast<char*>(y->mutable_raw_data());
    size_t column_offset = 0;  // Byte offset of the current input within an output row.
    for (const Tensor* input : inputs) {
      const size_t row_bytes = input->byte_size() / static_cast<size_t>(outer);
      const char* in = static_cast<const char*>(input->raw_data());
      for (int64_t o = 0; o < outer && row_bytes > 0; ++o) {
        std::memcpy(out + o * out_row_bytes + column_offset, in + o * row_bytes, row_bytes);
      }
      column_offset += row_bytes;
    }
    return absl::OkStatus();
  }

 private:
  int64_t axis_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateTransposeKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> perm, init.GetInts("perm"));
  return std::unique_ptr<Kernel>(new TransposeKernel(std::move(perm)));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateConcatKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(int64_t axis, init.GetInt("axis", std::nullopt));
  return std::unique_ptr<Kernel>(new ConcatKernel(axis));
}

// dx = Transpose(dy) by the inverse permutation.
absl::Status TransposeGradient(GradientRuleContext& g) {
  if (!g.NeedsGI(0)) return absl::OkStatus();
  std::vector<int64_t> perm = g.IntsAttr("perm");
  if (perm.empty()) {
    TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> shape, g.StaticShape(g.I(0)));
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) perm.push_back(d);
  }
  // Shape inference does not always check perm (found by train_fuzzer): it must be a permutation of the axes.
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> input_shape, g.PartialShape(g.I(0)));
  const int64_t rank = static_cast<int64_t>(input_shape.size());
  std::vector<int64_t> inverse(perm.size(), -1);
  bool is_permutation = static_cast<int64_t>(perm.size()) == rank;
  for (size_t d = 0; is_permutation && d < perm.size(); ++d) {
    is_permutation = perm[d] >= 0 && perm[d] < rank && inverse[perm[d]] < 0;
    if (is_permutation) inverse[perm[d]] = static_cast<int64_t>(d);
  }
  if (!is_permutation) {
    return absl::InvalidArgumentError(
        absl::StrCat(g.Label(), ": attribute 'perm' is not a permutation of the ", rank, " axes of its input"));
  }
  onnx::NodeProto* node = g.Emit("Transpose", {g.GO(0)}, {g.GI(0)});
  auto* attribute = node->add_attribute();
  attribute->set_name("perm");
  attribute->set_type(onnx::AttributeProto::INTS);
  for (int64_t axis : inverse) attribute->add_ints(axis);
  return absl::OkStatus();
}

// Each input's gradient is its slice of dy along the concatenation axis.
absl::Status ConcatGradient(GradientRuleContext& g) {
  TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> out_shape, g.StaticShape(g.O(0)));
  TRAIND_ASSIGN_OR_RETURN(const int64_t axis, g.AxisAttr("axis", 0, static_cast<int64_t>(out_shape.size())));
  int64_t offset = 0;
  for (int i = 0; i < g.num_inputs(); ++i) {
    TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> shape, g.StaticShape(g.I(i)));
    const int64_t length = shape[axis];
    if (g.NeedsGI(i)) {
      g.Emit("Slice", {g.GO(0), g.Int64Constant({offset}), g.Int64Constant({offset + length}), g.Int64Constant({axis})},
             {g.GI(i)});
    }
    offset += length;
  }
  return absl::OkStatus();
}

}  // namespace traind::engine
