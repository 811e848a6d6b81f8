// Constant (value decoded once at compile time; each run forwards the same buffer) and
// ConstantOfShape (fills a run-time shape with a one-element value).
#include "engine/ops/constant_ops.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/runtime/kernel.h"

namespace traind::engine {

absl::StatusOr<Tensor> ParseConstantOfShapeValue(const KernelInit& init) {
  if (!init.HasAttribute("value")) return Tensor::FromVector<float>({1}, {0.0f});
  TRAIND_ASSIGN_OR_RETURN(Tensor value, init.GetTensor("value"));
  if (value.num_elements() != 1) return init.Error("'value' must hold exactly one element");
  return value;
}

absl::StatusOr<Shape> ConstantOfShapeOutputShape(const Tensor& shape) {
  if (shape.dtype() != DataType::kInt64 || shape.rank() != 1) {
    return absl::InvalidArgumentError("ConstantOfShape: input must be a 1-D int64 tensor");
  }
  const int64_t* dims = shape.data<int64_t>();
  return Shape(dims, dims + shape.num_elements());
}

namespace {

// Returns a tensor the plan owns; outputs alias it, and no kernel writes its inputs.
class ConstantKernel final : public Kernel {
 public:
  explicit ConstantKernel(Tensor value) : value_(std::move(value)) {}
  absl::Status Compute(KernelContext& context) const override {
    context.SetOutput(0, value_);
    return absl::OkStatus();
  }

 private:
  Tensor value_;
};

class ConstantOfShapeKernel final : public Kernel {
 public:
  explicit ConstantOfShapeKernel(Tensor value) : value_(std::move(value)) {}

  absl::Status Compute(KernelContext& context) const override {
    TRAIND_ASSIGN_OR_RETURN(const Tensor* shape_tensor, context.RequiredInput(0));
    TRAIND_ASSIGN_OR_RETURN(Shape shape, ConstantOfShapeOutputShape(*shape_tensor));
    TRAIND_ASSIGN_OR_RETURN(Tensor * y, context.AllocateOutput(0, value_.dtype(), std::move(shape)));
    const size_t element_size = ElementSize(value_.dtype());
    char* out = static_cast<char*>(y->mutable_raw_data());
    const char* value = static_cast<const char*>(value_.raw_data());
    // Doubling copies: log2(n) memcpy calls instead of n.
    if (y->num_elements() == 0) return absl::OkStatus();
    std::memcpy(out, value, element_size);
    size_t filled = element_size;
    const size_t total = y->byte_size();
    while (filled < total) {
      const size_t chunk = std::min(filled, total - filled);
      std::memcpy(out + filled, out, chunk);
      filled += chunk;
    }
    return absl::OkStatus();
  }

 private:
  Tensor value_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateConstantKernel(const KernelInit& init) {
  const onnx::NodeProto& node = init.node();
  if (node.attribute_size() != 1) {
    return init.Error("Constant needs exactly one value attribute");
  }
  const std::string& name = node.attribute(0).name();
  Tensor value;
  if (name == "value") {
    TRAIND_ASSIGN_OR_RETURN(value, init.GetTensor("value"));
  } else if (name == "value_float") {
    TRAIND_ASSIGN_OR_RETURN(float v, init.GetFloat(name, std::nullopt));
    TRAIND_ASSIGN_OR_RETURN(value, Tensor::FromVector<float>({}, {v}));
  } else if (name == "value_floats") {
    TRAIND_ASSIGN_OR_RETURN(std::vector<float> v, init.GetFloats(name));
    TRAIND_ASSIGN_OR_RETURN(value,
                            Tensor::FromVector<float>({static_cast<int64_t>(v.size())}, v));
  } else if (name == "value_int") {
    TRAIND_ASSIGN_OR_RETURN(int64_t v, init.GetInt(name, std::nullopt));
    TRAIND_ASSIGN_OR_RETURN(value, Tensor::FromVector<int64_t>({}, {v}));
  } else if (name == "value_ints") {
    TRAIND_ASSIGN_OR_RETURN(std::vector<int64_t> v, init.GetInts(name));
    TRAIND_ASSIGN_OR_RETURN(value,
                            Tensor::FromVector<int64_t>({static_cast<int64_t>(v.size())}, v));
  } else {
    return init.Unsupported(absl::StrCat("Constant attribute '", name, "'"));
  }
  return std::unique_ptr<Kernel>(new ConstantKernel(std::move(value)));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateConstantOfShapeKernel(const KernelInit& init) {
  TRAIND_ASSIGN_OR_RETURN(Tensor value, ParseConstantOfShapeValue(init));
  return std::unique_ptr<Kernel>(new ConstantOfShapeKernel(std::move(value)));
}

}  // namespace traind::engine
