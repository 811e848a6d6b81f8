// Every gradient the builder emits is checked against float64 central finite differences of the forward model.
#include "engine/autodiff/gradient_builder.h"

#include <cmath>
#include <map>
#include <random>

#include "engine/model/model_loader.h"
#include "engine/runtime/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using ::testing::HasSubstr;

class ModelBuilder {
 public:
  explicit ModelBuilder(int32_t elem_type = onnx::TensorProto::DOUBLE) : elem_type_(elem_type) {
    model_.set_ir_version(8);
    model_.add_opset_import()->set_version(17);
    model_.mutable_graph()->set_name("test");
  }

  void Input(const std::string& name, const std::vector<int64_t>& dims) {
    auto* info = model_.mutable_graph()->add_input();
    info->set_name(name);
    auto* type = info->mutable_type()->mutable_tensor_type();
    type->set_elem_type(elem_type_);
    auto* shape = type->mutable_shape();  // no dims: a scalar
    for (int64_t dim : dims) shape->add_dim()->set_dim_value(dim);
    shapes_[name] = dims;
  }

  void Output(const std::string& name, const std::vector<int64_t>& dims = {}) {
    auto* info = model_.mutable_graph()->add_output();
    info->set_name(name);
    info->mutable_type()->mutable_tensor_type()->set_elem_type(elem_type_);
    auto* shape = info->mutable_type()->mutable_tensor_type()->mutable_shape();  // no dims: a scalar
    for (int64_t dim : dims) shape->add_dim()->set_dim_value(dim);
  }

  void ScalarInitializer(const std::string& name, double value) {
    auto* tensor = model_.mutable_graph()->add_initializer();
    tensor->set_name(name);
    tensor->set_data_type(onnx::TensorProto::DOUBLE);
    tensor->add_double_data(value);
  }

  void Int64ScalarInitializer(const std::string& name, int64_t value) {
    auto* tensor = model_.mutable_graph()->add_initializer();
    tensor->set_name(name);
    tensor->set_data_type(onnx::TensorProto::INT64);
    tensor->add_int64_data(value);
  }

  void Int64Initializer(const std::string& name, const std::vector<int64_t>& values) {
    auto* tensor = model_.mutable_graph()->add_initializer();
    tensor->set_name(name);
    tensor->set_data_type(onnx::TensorProto::INT64);
    tensor->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t value : values) tensor->add_int64_data(value);
  }

  onnx::NodeProto* Node(const std::string& op, std::vector<std::string> inputs, const std::string& output) {
    auto* node = model_.mutable_graph()->add_node();
    node->set_op_type(op);
    node->set_name(output);
    for (const auto& input : inputs) node->add_input(input);
    node->add_output(output);
    return node;
  }

  static void IntAttr(onnx::NodeProto* node, const char* name, int64_t value) {
    auto* attribute = node->add_attribute();
    attribute->set_name(name);
    attribute->set_type(onnx::AttributeProto::INT);
    attribute->set_i(value);
  }
  static void FloatAttr(onnx::NodeProto* node, const char* name, float value) {
    auto* attribute = node->add_attribute();
    attribute->set_name(name);
    attribute->set_type(onnx::AttributeProto::FLOAT);
    attribute->set_f(value);
  }

  const onnx::ModelProto& model() const { return model_; }
  bool is_float32() const { return elem_type_ == onnx::TensorProto::FLOAT; }
  const std::map<std::string, std::vector<int64_t>>& shapes() const { return shapes_; }

 private:
  int32_t elem_type_;
  onnx::ModelProto model_;
  std::map<std::string, std::vector<int64_t>> shapes_;
};

// Element access for float32 and float64 tensors alike.
double Get(const Tensor& t, int64_t i) {
  return t.dtype() == DataType::kFloat32 ? t.data<float>()[i] : t.data<double>()[i];
}
void Set(Tensor& t, int64_t i, double value) {
  if (t.dtype() == DataType::kFloat32) {
    t.mutable_data<float>()[i] = static_cast<float>(value);
  } else {
    t.mutable_data<double>()[i] = value;
  }
}

// loss = mean((MatMul(Gemm(Relu(h1) + Tanh(h1), W2, b2), W3) + c - target)^2)
//        + 0.1 * sum(Gemm(A^T, W4, C, alpha=0.5, beta=2) * y3),   h1 = Gemm(x, W1, b1, transB=1)
// Covers Gemm (both transposes, alpha, beta, broadcast C), Relu, Tanh, Add (broadcast), Sub, Mul, MatMul,
// ReduceMean, ReduceSum, and a value (h1) whose gradient arrives along two paths.
ModelBuilder MixedModel() {
  ModelBuilder b;
  b.Input("x", {4, 3});
  b.Input("target", {4, 2});
  for (const auto& [name, dims] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
           {"W1", {5, 3}}, {"b1", {5}}, {"W2", {2, 5}}, {"b2", {2}}, {"W3", {2, 2}}, {"c", {2}},
           {"A", {3, 4}}, {"W4", {3, 2}}, {"C", {1, 2}}}) {
    b.Input(name, dims);
  }
  b.ScalarInitializer("tenth", 0.1);
  ModelBuilder::IntAttr(b.Node("Gemm", {"x", "W1", "b1"}, "h1"), "transB", 1);
  b.Node("Relu", {"h1"}, "r");
  b.Node("Tanh", {"h1"}, "t");
  b.Node("Add", {"r", "t"}, "h");
  ModelBuilder::IntAttr(b.Node("Gemm", {"h", "W2", "b2"}, "y"), "transB", 1);
  b.Node("MatMul", {"y", "W3"}, "y2");
  b.Node("Add", {"y2", "c"}, "y3");
  b.Node("Sub", {"y3", "target"}, "d");
  b.Node("Mul", {"d", "d"}, "sq");
  ModelBuilder::IntAttr(b.Node("ReduceMean", {"sq"}, "mse"), "keepdims", 0);
  onnx::NodeProto* g = b.Node("Gemm", {"A", "W4", "C"}, "g");
  ModelBuilder::IntAttr(g, "transA", 1);
  ModelBuilder::FloatAttr(g, "alpha", 0.5f);
  ModelBuilder::FloatAttr(g, "beta", 2.0f);
  b.Node("Mul", {"g", "y3"}, "gy");
  ModelBuilder::IntAttr(b.Node("ReduceSum", {"gy"}, "s"), "keepdims", 0);
  b.Node("Mul", {"s", "tenth"}, "s_scaled");
  b.Node("Neg", {"s_scaled"}, "neg");
  b.Node("Neg", {"neg"}, "pos");
  b.Node("Add", {"mse", "pos"}, "sum");
  b.Node("Identity", {"sum"}, "loss");
  b.Output("loss");
  return b;
}

NamedTensors RandomInputs(const ModelBuilder& builder, uint32_t seed, bool positive) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uniform(0.5, 2.0);
  NamedTensors inputs;
  for (const auto& [name, dims] : builder.shapes()) {
    int64_t count = 1;
    for (int64_t dim : dims) count *= dim;
    Tensor tensor = *Tensor::Allocate(builder.is_float32() ? DataType::kFloat32 : DataType::kFloat64, dims);
    for (int64_t i = 0; i < count; ++i) Set(tensor, i, positive ? uniform(rng) : normal(rng));
    inputs.emplace_back(name, tensor);
  }
  return inputs;
}

double RunLoss(const Session& session, const NamedTensors& inputs) {
  auto outputs = session.Run(inputs);
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  return outputs.ok() ? Get((*outputs)[0].second, 0) : NAN;
}

// Builds the gradient model of `builder`'s "loss" for `parameters`, checks that it is a valid ONNX model, and
// compares every gradient element with a central difference of the forward model.
void ExpectGradientsMatchFiniteDifferences(const ModelBuilder& builder, const std::vector<std::string>& parameters,
                                           const NamedTensors& inputs) {
  auto gradient_model = BuildGradientModel(builder.model(), {"loss", parameters});
  ASSERT_TRUE(gradient_model.ok()) << gradient_model.status();
  // The result is a valid ONNX model: the loader runs the checker and strict shape inference.
  auto validated = LoadModelFromBytes(gradient_model->SerializeAsString());
  ASSERT_TRUE(validated.ok()) << validated.status();
  auto gradient_session = Session::Create(*validated);
  ASSERT_TRUE(gradient_session.ok()) << gradient_session.status();
  auto forward_session = Session::Create(builder.model());
  ASSERT_TRUE(forward_session.ok()) << forward_session.status();

  auto outputs = (*gradient_session)->Run(inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  std::map<std::string, Tensor> analytic;
  for (const auto& [name, tensor] : *outputs) analytic[name] = tensor;
  const bool single = builder.is_float32();
  EXPECT_NEAR(Get(analytic.at("loss"), 0), RunLoss(**forward_session, inputs), single ? 1e-4 : 1e-12);

  // float32 cases are ops linear in each input under a quadratic loss, where a central difference is exact
  // up to rounding, so a large step keeps rounding small.
  const double step = single ? 1e-1 : 1e-6;
  const double tolerance = single ? 2e-3 : 1e-6;
  for (const std::string& parameter : parameters) {
    const Tensor& gradient = analytic.at(GradientName(parameter));
    for (size_t k = 0; k < inputs.size(); ++k) {
      if (inputs[k].first != parameter) continue;
      ASSERT_EQ(gradient.shape(), inputs[k].second.shape()) << parameter;
      for (int64_t i = 0; i < gradient.num_elements(); ++i) {
        NamedTensors plus = inputs, minus = inputs;
        plus[k].second = *Tensor::Allocate(inputs[k].second.dtype(), inputs[k].second.shape());
        minus[k].second = *Tensor::Allocate(inputs[k].second.dtype(), inputs[k].second.shape());
        for (int64_t j = 0; j < gradient.num_elements(); ++j) {
          const double value = Get(inputs[k].second, j);
          Set(plus[k].second, j, value + (j == i ? step : 0.0));
          Set(minus[k].second, j, value - (j == i ? step : 0.0));
        }
        const double numeric = (RunLoss(**forward_session, plus) - RunLoss(**forward_session, minus)) / (2 * step);
        EXPECT_NEAR(Get(gradient, i), numeric, tolerance * std::max(1.0, std::fabs(numeric)))
            << parameter << "[" << i << "]";
      }
    }
  }
}

TEST(GradientBuilderTest, GradientsMatchCentralFiniteDifferences) {
  const ModelBuilder builder = MixedModel();
  ExpectGradientsMatchFiniteDifferences(builder, {"W1", "b1", "W2", "b2", "W3", "c", "A", "W4", "C"},
                                        RandomInputs(builder, 7, /*positive=*/false));
}

// One op per case: y = op(inputs, attributes); loss = sum(y * y). Inputs are drawn in [0.5, 2] when `positive`
// (Log, Sqrt, Pow's base), else from a normal distribution.
struct OpCase {
  std::string op;
  std::vector<std::pair<std::string, std::vector<int64_t>>> inputs;  // all differentiated
  std::vector<std::pair<std::string, std::vector<int64_t>>> int64_inputs = {};  // constant operands
  std::vector<std::pair<std::string, int64_t>> int_attributes = {};
  std::vector<std::pair<std::string, std::vector<int64_t>>> ints_attributes = {};
  std::vector<std::pair<std::string, float>> float_attributes = {};
  bool positive = false;
  std::vector<std::pair<std::string, std::vector<int64_t>>> fixed = {};  // float inputs, not differentiated
  int extra_outputs = 0;  // unused outputs after y (e.g. BatchNormalization's running statistics)
  bool float32 = false;   // for ops the engine runs in float32 only (Conv)
};

class OpGradientTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpGradientTest, MatchesFiniteDifferences) {
  const OpCase& c = GetParam();
  ModelBuilder b(c.float32 ? onnx::TensorProto::FLOAT : onnx::TensorProto::DOUBLE);
  std::vector<std::string> names, parameters;
  for (const auto& [name, dims] : c.inputs) {
    b.Input(name, dims);
    names.push_back(name);
    parameters.push_back(name);
  }
  for (const auto& [name, values] : c.int64_inputs) {
    b.Int64Initializer(name, values);
    names.push_back(name);
  }
  for (const auto& [name, dims] : c.fixed) {
    b.Input(name, dims);
    names.push_back(name);
  }
  onnx::NodeProto* node = b.Node(c.op, names, "y");
  for (int i = 0; i < c.extra_outputs; ++i) node->add_output("extra" + std::to_string(i));
  for (const auto& [name, value] : c.int_attributes) ModelBuilder::IntAttr(node, name.c_str(), value);
  for (const auto& [name, value] : c.float_attributes) ModelBuilder::FloatAttr(node, name.c_str(), value);
  for (const auto& [name, values] : c.ints_attributes) {
    auto* attribute = node->add_attribute();
    attribute->set_name(name);
    attribute->set_type(onnx::AttributeProto::INTS);
    for (int64_t value : values) attribute->add_ints(value);
  }
  b.Node("Mul", {"y", "y"}, "y2");
  ModelBuilder::IntAttr(b.Node("ReduceSum", {"y2"}, "loss"), "keepdims", 0);
  b.Output("loss");
  ExpectGradientsMatchFiniteDifferences(b, parameters, RandomInputs(b, 11, c.positive));
}

INSTANTIATE_TEST_SUITE_P(
    Ops, OpGradientTest,
    ::testing::Values(
        OpCase{"Sigmoid", {{"x", {2, 3}}}}, OpCase{"Exp", {{"x", {2, 3}}}},
        OpCase{"Log", {{"x", {2, 3}}}, {}, {}, {}, {}, true}, OpCase{"Sqrt", {{"x", {2, 3}}}, {}, {}, {}, {}, true},
        OpCase{"Erf", {{"x", {2, 3}}}}, OpCase{"Reciprocal", {{"x", {2, 3}}}, {}, {}, {}, {}, true},
        OpCase{"Abs", {{"x", {2, 3}}}}, OpCase{"LeakyRelu", {{"x", {2, 3}}}, {}, {}, {}, {{"alpha", 0.2f}}},
        OpCase{"Softplus", {{"x", {2, 3}}}}, OpCase{"Tanh", {{"x", {2, 3}}}}, OpCase{"Relu", {{"x", {2, 3}}}},
        OpCase{"Neg", {{"x", {2, 3}}}}, OpCase{"Add", {{"a", {2, 3}}, {"b", {3}}}},
        OpCase{"Sub", {{"a", {2, 1}}, {"b", {2, 3}}}}, OpCase{"Mul", {{"a", {2, 3}}, {"b", {1, 3}}}},
        OpCase{"Div", {{"a", {2, 3}}, {"b", {3}}}, {}, {}, {}, {}, true},
        OpCase{"Pow", {{"a", {2, 3}}, {"b", {2, 3}}}, {}, {}, {}, {}, true},
        OpCase{"Reshape", {{"x", {2, 3}}}, {{"shape", {3, 2}}}}, OpCase{"Flatten", {{"x", {2, 3, 2}}}},
        OpCase{"Squeeze", {{"x", {2, 1, 3}}}, {{"axes", {1}}}}, OpCase{"Unsqueeze", {{"x", {2, 3}}}, {{"axes", {0}}}},
        OpCase{"Transpose", {{"x", {2, 3, 4}}}, {}, {}, {{"perm", {2, 0, 1}}}},
        OpCase{"Concat", {{"a", {2, 3}}, {"b", {2, 2}}}, {}, {{"axis", 1}}},
        OpCase{"Softmax", {{"x", {2, 3, 4}}}, {}, {{"axis", 1}}},
        OpCase{"LogSoftmax", {{"x", {2, 4}}}, {}, {{"axis", -1}}},
        OpCase{"MatMul", {{"a", {3, 4}}, {"b", {4, 2}}}},
        OpCase{"ReduceMean", {{"x", {2, 3, 4}}}, {}, {{"keepdims", 0}}, {{"axes", {0, 2}}}},
        OpCase{"MatMul", {{"a", {2, 3, 4}}, {"b", {4, 2}}}}, OpCase{"MatMul", {{"a", {2, 1, 3, 4}}, {"b", {3, 4, 2}}}},
        OpCase{"LayerNormalization", {{"x", {2, 3, 4}}, {"scale", {4}}, {"bias", {4}}}},
        OpCase{"LayerNormalization", {{"x", {2, 3, 4}}, {"scale", {3, 4}}}, {}, {{"axis", 1}}},
        // A one-element Scale broadcasts: the standard-op rule, not the fused LayerNormalizationGrad.
        OpCase{"LayerNormalization", {{"x", {2, 3}}, {"scale", {1}}, {"bias", {1}}}},
        OpCase{"BatchNormalization", {{"x", {3, 2, 2, 2}}, {"scale", {2}}, {"bias", {2}}}, {}, {{"training_mode", 1}},
               {}, {}, false, {{"mean", {2}}, {"var", {2}}}, 2},
        OpCase{"BatchNormalization", {{"x", {3, 2, 2}}, {"scale", {2}}, {"bias", {2}}}, {}, {}, {}, {}, true,
               {{"mean", {2}}, {"var", {2}}}},
        OpCase{"GlobalAveragePool", {{"x", {2, 3, 2, 2}}}},
        OpCase{"Gather", {{"table", {5, 3}}}, {{"indices", {1, 3, 1, 4}}}},
        OpCase{"ReduceSum", {{"x", {2, 3, 4}}}, {{"axes", {1, -1}}}, {{"keepdims", 1}}},
        OpCase{"Elu", {{"x", {2, 3}}}, {}, {}, {}, {{"alpha", 0.7f}}}, OpCase{"Selu", {{"x", {2, 3}}}},
        OpCase{"Clip", {{"x", {3, 4}}, {"low", {}}, {"high", {}}}},
        OpCase{"Expand", {{"x", {3, 1}}}, {{"shape", {2, 3, 4}}}},
        OpCase{"Mean", {{"a", {2, 3}}, {"b", {3}}, {"c", {2, 1}}}},
        OpCase{"PRelu", {{"x", {2, 3, 2}}, {"slope", {3, 1}}}},
        OpCase{"ReduceSumSquare", {{"x", {2, 3}}}, {}, {{"keepdims", 0}}, {{"axes", {1}}}},
        OpCase{"ReduceL2", {{"x", {2, 3}}}, {}, {}, {{"axes", {1}}}},
        OpCase{"ReduceLogSumExp", {{"x", {2, 3, 2}}}, {}, {}, {{"axes", {1}}}},
        OpCase{"ReduceMax", {{"x", {2, 3}}}, {}, {{"keepdims", 1}}, {{"axes", {1}}}},
        OpCase{"ReduceMin", {{"x", {3, 4}}}, {}, {{"keepdims", 0}}},
        OpCase{"Max", {{"a", {2, 3}}, {"b", {3}}}}, OpCase{"Min", {{"a", {2, 3}}, {"b", {2, 1}}, {"c", {2, 3}}}},
        OpCase{"InstanceNormalization", {{"x", {2, 3, 2, 2}}, {"scale", {3}}, {"bias", {3}}}},
        OpCase{"Split", {{"x", {4, 3}}}, {}, {{"axis", 0}}, {}, {}, false, {}, 1},
        OpCase{"Pad", {{"x", {2, 3}}}, {{"pads", {1, 0, 0, 2}}}},
        OpCase{"Tile", {{"x", {2, 3}}}, {{"repeats", {2, 2}}}},
        OpCase{"GatherElements", {{"data", {5}}}, {{"indices", {0, 2, 2, 4}}}},
        OpCase{"Conv", {{"x", {2, 2, 5, 5}}, {"w", {3, 2, 3, 3}}, {"b", {3}}}, {}, {},
               {{"strides", {2, 1}}, {"pads", {1, 0, 1, 1}}, {"dilations", {1, 2}}}, {}, false, {}, 0, true},
        OpCase{"Conv", {{"x", {1, 4, 4, 4}}}, {}, {{"group", 4}}, {{"pads", {1, 1, 1, 1}}}, {}, false,
               {{"w", {4, 1, 3, 3}}}, 0, true},
        OpCase{"MaxPool", {{"x", {2, 2, 4, 4}}}, {}, {}, {{"kernel_shape", {2, 2}}, {"strides", {2, 2}}}, {}, false,
               {}, 1},
        // Fused ConvGrad with groups: weight and bias gradients of grouped and depthwise convolutions, 1-D too.
        OpCase{"Conv", {{"x", {2, 4, 5, 5}}, {"w", {6, 2, 3, 3}}, {"b", {6}}}, {}, {{"group", 2}},
               {{"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}}, {}, false, {}, 0, true},
        OpCase{"Conv", {{"x", {1, 4, 4, 4}}, {"w", {4, 1, 3, 3}}}, {}, {{"group", 4}}, {{"pads", {1, 0, 1, 2}}}, {},
               false, {}, 0, true},
        OpCase{"Conv", {{"x", {2, 3, 7}}, {"w", {2, 3, 3}}, {"b", {2}}}, {}, {}, {{"dilations", {2}}}, {}, false, {}, 0,
               true},
        // Fused MaxPoolGrad without an Indices output: overlapping windows, padding, ceil_mode, 1-D.
        OpCase{"MaxPool", {{"x", {2, 2, 5, 5}}}, {}, {{"ceil_mode", 1}},
               {{"kernel_shape", {3, 3}}, {"strides", {2, 2}}, {"pads", {1, 1, 0, 0}}}},
        OpCase{"MaxPool", {{"x", {2, 3, 7}}}, {}, {}, {{"kernel_shape", {2}}, {"dilations", {2}}}},
        OpCase{"MaxPool", {{"x", {1, 2, 5, 5}}}, {}, {}, {{"kernel_shape", {2, 2}}, {"strides", {2, 2}}}},  // odd edge
        // Fused BatchNormalizationGrad on a [N, C] input.
        OpCase{"BatchNormalization", {{"x", {5, 3}}, {"scale", {3}}, {"bias", {3}}}, {}, {{"training_mode", 1}}, {},
               {{"epsilon", 1e-3f}}, false, {{"mean", {3}}, {"var", {3}}}, 2}));

// Gather with a scalar constant index (one slice along axis 0, as PyTorch exports qkv[i]): the Pad form of the
// gradient, checked the same way; negative indices count from the end.
TEST(GradientBuilderTest, GatherOfOneSliceMatchesFiniteDifferences) {
  for (int64_t index : {0, 1, -1}) {
    ModelBuilder b;
    b.Input("data", {3, 2, 2});
    b.Int64ScalarInitializer("index", index);
    b.Node("Gather", {"data", "index"}, "y");
    b.Node("Mul", {"y", "y"}, "y2");
    ModelBuilder::IntAttr(b.Node("ReduceSum", {"y2"}, "loss"), "keepdims", 0);
    b.Output("loss");
    ExpectGradientsMatchFiniteDifferences(b, {"data"}, RandomInputs(b, 5, false));
  }
}

TEST(GradientBuilderTest, AnOpWithoutAGradientRuleOnThePathIsReportedWithTheParametersItBlocks) {
  ModelBuilder b;
  b.Input("x", {2});
  b.Input("w", {2});
  b.Node("Mul", {"x", "w"}, "p");
  ModelBuilder::IntAttr(b.Node("ReduceLogSum", {"p"}, "loss"), "keepdims", 0);  // no rule yet
  b.Output("loss");
  auto result = BuildGradientModel(b.model(), {"loss", {"w"}});
  ASSERT_EQ(result.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(result.status().message(), HasSubstr("ReduceLogSum"));
  EXPECT_THAT(result.status().message(), HasSubstr("w"));
}

TEST(GradientBuilderTest, RefusesANonScalarLossAndAnUnusedParameter) {
  ModelBuilder b;
  b.Input("x", {2});
  b.Input("w", {2});
  b.Input("unused", {2});
  b.Node("Mul", {"x", "w"}, "p");
  ModelBuilder::IntAttr(b.Node("ReduceSum", {"p"}, "loss"), "keepdims", 0);
  b.Output("p", {2});
  b.Output("loss");
  EXPECT_EQ(BuildGradientModel(b.model(), {"p", {"w"}}).status().code(), absl::StatusCode::kInvalidArgument);
  auto unused = BuildGradientModel(b.model(), {"loss", {"w", "unused"}});
  EXPECT_EQ(unused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unused.status().message(), HasSubstr("unused"));
  EXPECT_TRUE(BuildGradientModel(b.model(), {"loss", {"w"}}).ok());
}

}  // namespace
}  // namespace traind::engine
