// Every gradient the builder emits is checked against float64 central finite differences of the forward model.
#include "engine/autodiff/gradient_builder.h"

#include <cmath>
#include <map>
#include <random>

#include "engine/model/model_loader.h"
#include "engine/model/traind_schemas.h"
#include "engine/runtime/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using ::testing::HasSubstr;

class ModelBuilder {
 public:
  explicit ModelBuilder(int32_t elem_type = onnx::TensorProto::DOUBLE, int64_t opset = 17) : elem_type_(elem_type) {
    model_.set_ir_version(opset < 13 ? 7 : 8);
    model_.add_opset_import()->set_version(opset);
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

  void ScalarInitializer(const std::string& name, double value) {  // of the model's float type
    auto* tensor = model_.mutable_graph()->add_initializer();
    tensor->set_name(name);
    tensor->set_data_type(elem_type_);
    if (elem_type_ == onnx::TensorProto::FLOAT) {
      tensor->add_float_data(static_cast<float>(value));
    } else {
      tensor->add_double_data(value);
    }
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

  // An int64 initializer of any shape ({} for a scalar).
  void Int64Tensor(const std::string& name, const std::vector<int64_t>& dims, const std::vector<int64_t>& values) {
    auto* tensor = model_.mutable_graph()->add_initializer();
    tensor->set_name(name);
    tensor->set_data_type(onnx::TensorProto::INT64);
    for (int64_t dim : dims) tensor->add_dims(dim);
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
  static void StringAttr(onnx::NodeProto* node, const char* name, const std::string& value) {
    auto* attribute = node->add_attribute();
    attribute->set_name(name);
    attribute->set_type(onnx::AttributeProto::STRING);
    attribute->set_s(value);
  }
  static void IntsAttr(onnx::NodeProto* node, const char* name, const std::vector<int64_t>& values) {
    auto* attribute = node->add_attribute();
    attribute->set_name(name);
    attribute->set_type(onnx::AttributeProto::INTS);
    for (int64_t value : values) attribute->add_ints(value);
  }
  static void FloatAttr(onnx::NodeProto* node, const char* name, float value) {
    auto* attribute = node->add_attribute();
    attribute->set_name(name);
    attribute->set_type(onnx::AttributeProto::FLOAT);
    attribute->set_f(value);
  }

  // For nodes of ai.traind.training in the forward model.
  void ImportTraindDomain() {
    auto* opset = model_.add_opset_import();
    opset->set_domain(kTraindTrainingDomain);
    opset->set_version(kTraindTrainingVersion);
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
        OpCase{"ReduceL1", {{"x", {2, 3, 4}}}, {}, {{"keepdims", 0}}, {{"axes", {1}}}},
        OpCase{"ReduceL1", {{"x", {3, 2}}}},
        OpCase{"ReduceLogSum", {{"x", {2, 3, 2}}}, {}, {}, {{"axes", {0, 2}}}, {}, true},
        OpCase{"ReduceProd", {{"x", {2, 3, 2}}}, {}, {{"keepdims", 0}}, {{"axes", {1}}}},
        OpCase{"ReduceProd", {{"x", {2, 3}}}, {}, {}, {}, {}, true},
        OpCase{"TopK", {{"x", {3, 5}}}, {{"k", {2}}}, {{"axis", 1}}, {}, {}, false, {}, 1},
        OpCase{"TopK", {{"x", {4, 3}}}, {{"k", {3}}}, {{"axis", 0}, {"largest", 0}}, {}, {}, false, {}, 1},
        OpCase{"Trilu", {{"x", {3, 4}}}}, OpCase{"Trilu", {{"x", {2, 4, 3}}}, {}, {{"upper", 0}}},
        OpCase{"GlobalMaxPool", {{"x", {2, 3, 3, 2}}}},
        OpCase{"AveragePool", {{"x", {2, 2, 5, 5}}}, {}, {},
               {{"kernel_shape", {3, 3}}, {"strides", {2, 2}}, {"pads", {1, 1, 1, 1}}}},
        OpCase{"AveragePool", {{"x", {1, 2, 5, 6}}}, {}, {{"count_include_pad", 1}},
               {{"kernel_shape", {3, 2}}, {"strides", {2, 2}}, {"pads", {1, 0, 2, 1}}}},
        OpCase{"AveragePool", {{"x", {1, 2, 7, 5}}}, {}, {{"ceil_mode", 1}},
               {{"kernel_shape", {2, 3}}, {"strides", {3, 2}}, {"pads", {0, 1, 0, 0}}}},
        OpCase{"AveragePool", {{"x", {1, 1, 7}}}, {}, {{"ceil_mode", 1}, {"count_include_pad", 1}},
               {{"kernel_shape", {3}}, {"strides", {2}}, {"pads", {1, 0}}}},
        OpCase{"AveragePool", {{"x", {1, 2, 7}}}, {}, {}, {{"kernel_shape", {2}}, {"strides", {3}}}},
        OpCase{"ConvTranspose", {{"x", {2, 2, 3, 3}}, {"w", {2, 3, 3, 2}}, {"b", {3}}}, {}, {},
               {{"strides", {2, 1}}, {"pads", {1, 0, 0, 1}}, {"output_padding", {1, 0}}, {"dilations", {1, 2}}}, {},
               false, {}, 0, true},
        OpCase{"ConvTranspose", {{"x", {2, 4, 3, 2}}, {"w", {4, 1, 2, 2}}}, {}, {{"group", 2}},
               {{"strides", {2, 2}}, {"pads", {0, 1, 1, 0}}}, {}, false, {}, 0, true},
        OpCase{"ConvTranspose", {{"x", {1, 2, 4}}, {"w", {2, 2, 3}}}, {}, {}, {{"strides", {3}}, {"output_shape", {12}}},
               {}, false, {}, 0, true},
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

// Cases the table above cannot express (string attributes, shaped integer operands, chosen input values).
// Each ends in loss = sum(y * y).
void AddSquaredSumLoss(ModelBuilder& b, const std::string& y = "y") {
  b.Node("Mul", {y, y}, "y2");
  ModelBuilder::IntAttr(b.Node("ReduceSum", {"y2"}, "loss"), "keepdims", 0);
  b.Output("loss");
}

TEST(GradientBuilderTest, CumSumInEveryDirection) {
  for (int exclusive : {0, 1}) {
    for (int reverse : {0, 1}) {
      ModelBuilder b;
      b.Input("x", {2, 4});
      b.Int64Tensor("axis", {}, {1});
      onnx::NodeProto* node = b.Node("CumSum", {"x", "axis"}, "y");
      ModelBuilder::IntAttr(node, "exclusive", exclusive);
      ModelBuilder::IntAttr(node, "reverse", reverse);
      AddSquaredSumLoss(b);
      SCOPED_TRACE(testing::Message() << "exclusive " << exclusive << " reverse " << reverse);
      ExpectGradientsMatchFiniteDifferences(b, {"x"}, RandomInputs(b, 3, false));
    }
  }
}

TEST(GradientBuilderTest, TriluWithAnOffset) {
  for (int64_t k : {-1, 2}) {
    ModelBuilder b;
    b.Input("x", {3, 4});
    b.Int64Tensor("k", {}, {k});
    ModelBuilder::IntAttr(b.Node("Trilu", {"x", "k"}, "y"), "upper", k > 0 ? 1 : 0);
    AddSquaredSumLoss(b);
    ExpectGradientsMatchFiniteDifferences(b, {"x"}, RandomInputs(b, 5, false));
  }
}

// dx of a product over a group with one zero is non-zero only at the zero; with two zeros it is zero everywhere.
// The loss is the plain sum of the products: a squared product would zero every gradient of a group with a zero.
TEST(GradientBuilderTest, ReduceProdWithZeros) {
  ModelBuilder b;
  b.Input("x", {3, 4});
  onnx::NodeProto* node = b.Node("ReduceProd", {"x"}, "y");
  ModelBuilder::IntsAttr(node, "axes", {1});
  ModelBuilder::IntAttr(b.Node("ReduceSum", {"y"}, "loss"), "keepdims", 0);
  b.Output("loss");
  NamedTensors inputs = RandomInputs(b, 13, false);
  Tensor& x = inputs[0].second;
  Set(x, 1, 0.0);  // row 0: one zero
  Set(x, 4, 0.0);  // row 1: two zeros
  Set(x, 6, 0.0);
  ExpectGradientsMatchFiniteDifferences(b, {"x"}, inputs);
}

TEST(GradientBuilderTest, GatherND) {
  ModelBuilder b;
  b.Input("data", {3, 2, 2});
  b.Int64Tensor("indices", {3, 2}, {2, 0, 1, 1, 2, 0});  // repeated slice: its gradients add
  b.Node("GatherND", {"data", "indices"}, "y");
  AddSquaredSumLoss(b);
  ExpectGradientsMatchFiniteDifferences(b, {"data"}, RandomInputs(b, 15, false));
}

TEST(GradientBuilderTest, GatherNDWithBatchDims) {
  ModelBuilder b;
  b.Input("data", {2, 3, 2});
  b.Int64Tensor("indices", {2, 3, 1}, {0, 2, 2, 1, 0, 1});  // repeated index: its gradients add
  ModelBuilder::IntAttr(b.Node("GatherND", {"data", "indices"}, "y"), "batch_dims", 1);
  AddSquaredSumLoss(b);
  ExpectGradientsMatchFiniteDifferences(b, {"data"}, RandomInputs(b, 17, false));
}

TEST(GradientBuilderTest, ScatterElementsAndScatterNDWithEveryReduction) {
  for (const char* reduction : {"none", "add", "mul"}) {
    const bool distinct = std::string(reduction) == "none";  // "none" with repeated indices is unspecified
    {
      ModelBuilder b;
      b.Input("data", {3, 4});
      b.Input("updates", {2, 3});
      b.Int64Tensor("indices", {2, 3}, {1, 0, 3, distinct ? 0 : 2, 2, 3});
      onnx::NodeProto* node = b.Node("ScatterElements", {"data", "indices", "updates"}, "y");
      ModelBuilder::IntAttr(node, "axis", 1);
      ModelBuilder::StringAttr(node, "reduction", reduction);
      AddSquaredSumLoss(b);
      SCOPED_TRACE(testing::Message() << "ScatterElements " << reduction);
      ExpectGradientsMatchFiniteDifferences(b, {"data", "updates"}, RandomInputs(b, 19, true));
    }
    {
      ModelBuilder b;
      b.Input("data", {4, 3});
      b.Input("updates", {3, 3});
      b.Int64Tensor("indices", {3, 1}, {2, 0, distinct ? 3 : 2});
      onnx::NodeProto* node = b.Node("ScatterND", {"data", "indices", "updates"}, "y");
      ModelBuilder::StringAttr(node, "reduction", reduction);
      AddSquaredSumLoss(b);
      SCOPED_TRACE(testing::Message() << "ScatterND " << reduction);
      ExpectGradientsMatchFiniteDifferences(b, {"data", "updates"}, RandomInputs(b, 23, true));
    }
  }
}

TEST(GradientBuilderTest, ConvTransposeWithSamePadding) {
  ModelBuilder b(onnx::TensorProto::FLOAT);
  b.Input("x", {1, 2, 3, 3});
  b.Input("w", {2, 2, 2, 3});
  onnx::NodeProto* node = b.Node("ConvTranspose", {"x", "w"}, "y");
  ModelBuilder::StringAttr(node, "auto_pad", "SAME_LOWER");
  ModelBuilder::IntsAttr(node, "strides", {2, 2});
  AddSquaredSumLoss(b);
  ExpectGradientsMatchFiniteDifferences(b, {"x", "w"}, RandomInputs(b, 29, false));
}

// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss over [N, C] and [N, C, d], with and without (trained)
// class weights and an ignored target (one inside [0, C), which only the mask can exclude), for every reduction.
TEST(GradientBuilderTest, LossesWithWeightsIgnoreIndexAndEveryReduction) {
  for (const char* op : {"NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"}) {
    for (const char* reduction : {"none", "sum", "mean"}) {
      for (bool spatial : {false, true}) {
        for (bool weighted : {false, true}) {
          ModelBuilder b;
          b.Input("scores", spatial ? std::vector<int64_t>{3, 4, 2} : std::vector<int64_t>{3, 4});
          if (spatial) {
            b.Int64Tensor("target", {3, 2}, {0, 3, 1, 1, 2, 0});
          } else {
            b.Int64Tensor("target", {3}, {3, 1, 2});
          }
          std::vector<std::string> inputs = {"scores", "target"}, parameters = {"scores"};
          if (weighted) {
            parameters.push_back("weight");
            b.Input("weight", {4});
            inputs.push_back("weight");
          }
          onnx::NodeProto* node = b.Node(op, inputs, "y");
          ModelBuilder::StringAttr(node, "reduction", reduction);
          ModelBuilder::IntAttr(node, "ignore_index", 1);
          AddSquaredSumLoss(b);
          SCOPED_TRACE(testing::Message() << op << " " << reduction << (spatial ? " spatial" : "")
                                          << (weighted ? " weighted" : ""));
          // Weights in [0.5, 2]; scores positive too, which NLL (any real input) does not mind.
          ExpectGradientsMatchFiniteDifferences(b, parameters, RandomInputs(b, 31, true));
        }
      }
    }
  }
}

// The log-probabilities output of SoftmaxCrossEntropyLoss carries a gradient of its own.
TEST(GradientBuilderTest, SoftmaxCrossEntropyLossLogProbabilityOutput) {
  ModelBuilder b;
  b.Input("scores", {3, 4});
  b.Int64Tensor("target", {3}, {3, 0, 2});
  onnx::NodeProto* node = b.Node("SoftmaxCrossEntropyLoss", {"scores", "target"}, "y");
  node->add_output("log_prob");
  b.Node("Mul", {"y", "y"}, "y2");
  b.Node("Mul", {"log_prob", "log_prob"}, "lp2");
  ModelBuilder::IntAttr(b.Node("ReduceSum", {"lp2"}, "lp_sum"), "keepdims", 0);
  b.Node("Add", {"y2", "lp_sum"}, "loss");
  b.Output("loss");
  ExpectGradientsMatchFiniteDifferences(b, {"scores"}, RandomInputs(b, 37, false));
}

// The class weights' gradient when only they are trained, through a [N, C, d] loss whose log-probabilities output
// is used as well (it does not depend on the weights).
TEST(GradientBuilderTest, ClassWeightGradientAlone) {
  ModelBuilder b;
  b.Input("scores", {2, 3, 2});
  b.Input("weight", {3});
  b.Int64Tensor("target", {2, 2}, {2, 0, 1, 2});
  onnx::NodeProto* node = b.Node("SoftmaxCrossEntropyLoss", {"scores", "target", "weight"}, "y");
  node->add_output("log_prob");
  b.Node("Mul", {"y", "y"}, "y2");
  ModelBuilder::IntAttr(b.Node("ReduceSum", {"log_prob"}, "lp_sum"), "keepdims", 0);
  b.Node("Add", {"y2", "lp_sum"}, "loss");
  b.Output("loss");
  ExpectGradientsMatchFiniteDifferences(b, {"weight"}, RandomInputs(b, 59, true));
}

// Models below opset 13 are converted by onnx's version converter, then differentiated with the modern rules:
// opset-6 legacy broadcasting (`broadcast`/`axis`), Gemm's `broadcast`, attribute axes, Max without broadcasting.
TEST(GradientBuilderTest, Opset6ModelsAreConvertedThenDifferentiated) {
  ModelBuilder b(onnx::TensorProto::DOUBLE, 6);
  b.Input("x", {2, 3});
  b.Input("column", {2});
  b.Input("W", {3, 4});
  b.Input("c", {4});
  b.Input("V", {4, 2});
  onnx::NodeProto* add = b.Node("Add", {"x", "column"}, "shifted");  // column broadcast along axis 0
  ModelBuilder::IntAttr(add, "broadcast", 1);
  ModelBuilder::IntAttr(add, "axis", 0);
  ModelBuilder::IntAttr(b.Node("Gemm", {"shifted", "W", "c"}, "h"), "broadcast", 1);
  b.Node("Sigmoid", {"h"}, "s");
  b.Node("Tanh", {"h"}, "t");
  b.Node("Max", {"s", "t"}, "m");
  b.Node("Elu", {"m"}, "e");
  b.Node("MatMul", {"e", "V"}, "p");
  ModelBuilder::IntsAttr(b.Node("Unsqueeze", {"p"}, "u"), "axes", {0});
  ModelBuilder::IntsAttr(b.Node("Transpose", {"u"}, "tr"), "perm", {2, 1, 0});
  ModelBuilder::IntsAttr(b.Node("Squeeze", {"tr"}, "sq"), "axes", {2});
  b.Node("Flatten", {"sq"}, "y");
  AddSquaredSumLoss(b);
  ExpectGradientsMatchFiniteDifferences(b, {"x", "column", "W", "c", "V"}, RandomInputs(b, 41, false));
  auto gradient_model = BuildGradientModel(b.model(), {"loss", {"W"}});
  ASSERT_TRUE(gradient_model.ok());
  EXPECT_EQ(gradient_model->opset_import(0).version(), kMinGradientOpset);
}

TEST(GradientBuilderTest, Opset6ElementwiseOpsAreConvertedThenDifferentiated) {
  ModelBuilder b(onnx::TensorProto::DOUBLE, 6);
  b.Input("a", {2, 3});
  b.Input("b", {3});
  b.Input("c", {2, 3});
  onnx::NodeProto* div = b.Node("Div", {"a", "b"}, "q");  // trailing legacy broadcast
  ModelBuilder::IntAttr(div, "broadcast", 1);
  b.Node("Abs", {"q"}, "abs");
  b.Node("Sqrt", {"abs"}, "root");
  onnx::NodeProto* pow = b.Node("Pow", {"root", "b"}, "power");
  ModelBuilder::IntAttr(pow, "broadcast", 1);
  b.Node("Exp", {"c"}, "exp");
  b.Node("Softplus", {"exp"}, "soft");
  ModelBuilder::FloatAttr(b.Node("LeakyRelu", {"c"}, "leaky"), "alpha", 0.3f);
  b.Node("Selu", {"leaky"}, "selu");
  b.Node("Relu", {"selu"}, "relu");
  b.Node("Neg", {"relu"}, "neg");
  b.Node("Sub", {"soft", "neg"}, "diff");
  b.Node("Mul", {"diff", "power"}, "prod");
  b.Node("Min", {"prod", "a"}, "low");
  ModelBuilder::IntAttr(b.Node("Concat", {"low", "prod"}, "both"), "axis", 0);
  b.Int64Tensor("shape", {1}, {12});
  b.Node("Reshape", {"both", "shape"}, "y");
  AddSquaredSumLoss(b);
  ExpectGradientsMatchFiniteDifferences(b, {"a", "b", "c"}, RandomInputs(b, 43, true));
}

// Scatter (opsets 9-10) becomes ScatterElements.
TEST(GradientBuilderTest, Opset10ScatterIsConvertedThenDifferentiated) {
  ModelBuilder b(onnx::TensorProto::DOUBLE, 10);
  b.Input("data", {3, 4});
  b.Input("updates", {2, 2});
  b.Int64Tensor("indices", {2, 2}, {1, 3, 0, 2});
  ModelBuilder::IntAttr(b.Node("Scatter", {"data", "indices", "updates"}, "y"), "axis", 1);
  AddSquaredSumLoss(b);
  ExpectGradientsMatchFiniteDifferences(b, {"data", "updates"}, RandomInputs(b, 47, false));
}

// Clip-6 has min/max attributes. loss = sum(clip(x)^2): dx = 2 clip(x) inside (min, max), 0 outside.
TEST(GradientBuilderTest, Opset6ClipIsConvertedThenDifferentiated) {
  ModelBuilder b(onnx::TensorProto::FLOAT, 6);
  b.Input("x", {2, 4});
  onnx::NodeProto* clip = b.Node("Clip", {"x"}, "y");
  ModelBuilder::FloatAttr(clip, "min", -0.5f);
  ModelBuilder::FloatAttr(clip, "max", 0.75f);
  AddSquaredSumLoss(b);
  auto gradient_model = BuildGradientModel(b.model(), {"loss", {"x"}});
  ASSERT_TRUE(gradient_model.ok()) << gradient_model.status();
  auto validated = LoadModelFromBytes(gradient_model->SerializeAsString());
  ASSERT_TRUE(validated.ok()) << validated.status();
  auto session = Session::Create(*validated);
  ASSERT_TRUE(session.ok()) << session.status();
  const NamedTensors inputs = RandomInputs(b, 53, false);
  auto outputs = (*session)->Run(inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  const Tensor* gradient = nullptr;
  for (const auto& [name, tensor] : *outputs) {
    if (name == GradientName("x")) gradient = &tensor;
  }
  ASSERT_NE(gradient, nullptr);
  for (int64_t i = 0; i < 8; ++i) {
    const double x = Get(inputs[0].second, i);
    const double expected = x > -0.5 && x < 0.75 ? 2 * x : 0.0;
    EXPECT_NEAR(Get(*gradient, i), expected, 1e-6) << i;
  }
}

TEST(GradientBuilderTest, ConvertForDifferentiationLeavesModernModelsAlone) {
  ModelBuilder modern;
  modern.Input("x", {2});
  modern.Node("Neg", {"x"}, "y");
  AddSquaredSumLoss(modern);
  auto same = ConvertForDifferentiation(modern.model());
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->SerializeAsString(), modern.model().SerializeAsString());

  ModelBuilder legacy(onnx::TensorProto::DOUBLE, 6);
  legacy.Input("x", {2});
  legacy.Node("Neg", {"x"}, "y");
  AddSquaredSumLoss(legacy);
  auto converted = ConvertForDifferentiation(legacy.model());
  ASSERT_TRUE(converted.ok()) << converted.status();
  EXPECT_EQ(converted->opset_import(0).version(), kMinGradientOpset);
  EXPECT_TRUE(LoadModelFromBytes(converted->SerializeAsString()).ok());
}

// onnx 1.12's Clip 10->11 adapter makes float bounds even for a double input; the converted model is checked,
// and the failure is a clear error rather than a broken gradient model.
TEST(GradientBuilderTest, AFailedVersionConversionIsReported) {
  ModelBuilder b(onnx::TensorProto::DOUBLE, 6);
  b.Input("x", {2, 4});
  onnx::NodeProto* clip = b.Node("Clip", {"x"}, "y");
  ModelBuilder::FloatAttr(clip, "min", -0.5f);
  AddSquaredSumLoss(b);
  auto result = BuildGradientModel(b.model(), {"loss", {"x"}});
  ASSERT_EQ(result.status().code(), absl::StatusCode::kUnimplemented) << result.status();
  EXPECT_THAT(result.status().message(), HasSubstr("converting it to opset 13"));
}

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

// PyTorch's q, k, v = qkv[0], qkv[1], qkv[2]: three one-slice Gathers that cover axis 0. Their gradients are
// concatenated (no Pad, no Sum left in the backward pass); with a slice left out (or read twice) they are summed
// as before. Exact either way.
TEST(GradientBuilderTest, OneSliceGathersCoveringTheAxisHaveTheirGradientsConcatenated) {
  for (const std::vector<int64_t>& picked : {std::vector<int64_t>{2, 0, 1}, std::vector<int64_t>{0, 2},
                                             std::vector<int64_t>{1, 1, 0}}) {
    ModelBuilder b;
    b.Input("data", {3, 2, 4});
    b.Input("w", {2, 4});
    std::vector<std::string> terms;
    for (size_t i = 0; i < picked.size(); ++i) {
      const std::string k = std::to_string(i);
      b.Int64ScalarInitializer("index" + k, picked[i]);
      b.Node("Gather", {"data", "index" + k}, "slice" + k);
      b.Node("Mul", {"slice" + k, i == 0 ? "w" : "slice" + k}, "term" + k);  // slices enter the loss differently
      terms.push_back("term" + k);
    }
    b.Node("Sum", terms, "total");
    ModelBuilder::IntAttr(b.Node("ReduceSum", {"total"}, "loss"), "keepdims", 0);
    b.Output("loss");
    ExpectGradientsMatchFiniteDifferences(b, {"data"}, RandomInputs(b, 7, false));
    auto gradient_model = BuildGradientModel(b.model(), {"loss", {"data"}});
    ASSERT_TRUE(gradient_model.ok()) << gradient_model.status();
    int pads = 0, concats = 0;
    for (const auto& node : gradient_model->graph().node()) {
      pads += node.op_type() == "Pad";
      concats += node.op_type() == "Concat";
    }
    const bool covers = picked.size() == 3 && picked != std::vector<int64_t>{1, 1, 0};
    EXPECT_EQ(pads, covers ? 0 : static_cast<int>(picked.size()));
    EXPECT_EQ(concats, covers ? 1 : 0);
  }
}

// The batched MatMul gradient multiplies by its operands transposed: FusedMatMul reads them in place, so the
// backward pass has no Transpose at all (it had one per operand and product before).
TEST(GradientBuilderTest, BatchedMatMulGradientsReadTransposedOperandsInPlace) {
  ModelBuilder b;
  b.Input("a", {2, 1, 3, 4});
  b.Input("b", {3, 4, 2});
  b.Node("MatMul", {"a", "b"}, "y");
  AddSquaredSumLoss(b);
  ExpectGradientsMatchFiniteDifferences(b, {"a", "b"}, RandomInputs(b, 13, false));
  auto gradient_model = BuildGradientModel(b.model(), {"loss", {"a", "b"}});
  ASSERT_TRUE(gradient_model.ok()) << gradient_model.status();
  int transposes = 0, fused = 0;
  for (const auto& node : gradient_model->graph().node()) {
    transposes += node.op_type() == "Transpose";
    fused += node.op_type() == "FusedMatMul" && node.domain() == kTraindTrainingDomain;
  }
  EXPECT_EQ(transposes, 0);
  EXPECT_EQ(fused, 2);
}

// FusedMatMul's own rule, for every pair of transposes and with broadcast batches.
TEST(GradientBuilderTest, FusedMatMulWithEveryTransposeMatchesFiniteDifferences) {
  for (int trans_a : {0, 1}) {
    for (int trans_b : {0, 1}) {
      SCOPED_TRACE(::testing::Message() << "transA " << trans_a << " transB " << trans_b);
      ModelBuilder b;
      b.ImportTraindDomain();
      b.Input("a", trans_a ? std::vector<int64_t>{2, 1, 4, 3} : std::vector<int64_t>{2, 1, 3, 4});
      b.Input("b", trans_b ? std::vector<int64_t>{3, 2, 4} : std::vector<int64_t>{3, 4, 2});
      onnx::NodeProto* node = b.Node("FusedMatMul", {"a", "b"}, "y");
      node->set_domain(kTraindTrainingDomain);
      ModelBuilder::IntAttr(node, "transA", trans_a);
      ModelBuilder::IntAttr(node, "transB", trans_b);
      AddSquaredSumLoss(b);
      ExpectGradientsMatchFiniteDifferences(b, {"a", "b"}, RandomInputs(b, 17 + 2 * trans_a + trans_b, false));
    }
  }
}

// With a bias (the input a CPU plan folds a Linear's bias Add into): its gradient is dY summed over the rows.
TEST(GradientBuilderTest, FusedMatMulWithABiasMatchesFiniteDifferences) {
  ModelBuilder b;
  b.ImportTraindDomain();
  b.Input("a", {2, 3, 4});
  b.Input("b", {5, 4});
  b.Input("bias", {5});
  onnx::NodeProto* node = b.Node("FusedMatMul", {"a", "b", "bias"}, "y");
  node->set_domain(kTraindTrainingDomain);
  ModelBuilder::IntAttr(node, "transB", 1);
  AddSquaredSumLoss(b);
  ExpectGradientsMatchFiniteDifferences(b, {"a", "b", "bias"}, RandomInputs(b, 23, false));
}

// A GELU-like chain with tanh, x * 0.5 * (1 + tanh(x / sqrt(2))), which no fused rule covers: its gradient needs
// tanh(...) (Tanh's) and 1 + tanh(...) (Mul's) beside x, but the backward pass recomputes both from x instead of
// keeping them from the forward pass, and the gradients stay exact.
TEST(GradientBuilderTest, CheapElementwiseValuesAreRecomputedInTheBackwardPassNotKept) {
  ModelBuilder b;
  b.Input("in", {4, 8});
  b.Input("W", {8, 300});
  b.Input("bias", {300});
  b.ScalarInitializer("sqrt2", std::sqrt(2.0));
  b.ScalarInitializer("one", 1.0);
  b.ScalarInitializer("half", 0.5);
  b.Node("MatMul", {"in", "W"}, "mm");
  b.Node("Add", {"mm", "bias"}, "x");
  b.Node("Div", {"x", "sqrt2"}, "scaled");
  b.Node("Tanh", {"scaled"}, "tanh");
  b.Node("Add", {"tanh", "one"}, "one_plus_tanh");
  b.Node("Mul", {"x", "one_plus_tanh"}, "x_times");
  b.Node("Mul", {"x_times", "half"}, "gelu");
  b.Node("Mul", {"gelu", "gelu"}, "squared");
  ModelBuilder::IntAttr(b.Node("ReduceSum", {"squared"}, "loss"), "keepdims", 0);
  b.Output("loss");
  ExpectGradientsMatchFiniteDifferences(b, {"bias"}, RandomInputs(b, 3, /*positive=*/false));

  auto gradient_model = BuildGradientModel(b.model(), {"loss", {"bias"}});
  ASSERT_TRUE(gradient_model.ok()) << gradient_model.status();
  const int forward_nodes = b.model().graph().node_size();
  bool reads_x = false;
  int recomputed = 0;
  for (int n = forward_nodes; n < gradient_model->graph().node_size(); ++n) {
    const onnx::NodeProto& node = gradient_model->graph().node(n);
    recomputed += node.name().find("_Grad/Recompute") != std::string::npos;
    for (const std::string& input : node.input()) {
      reads_x |= input == "x";
      EXPECT_NE(input, "tanh") << node.name() << " reads a forward value it could recompute";
      EXPECT_NE(input, "one_plus_tanh") << node.name() << " reads a forward value it could recompute";
    }
  }
  EXPECT_TRUE(reads_x);
  EXPECT_EQ(recomputed, 3);  // Div, Tanh, Add: once each
}


// Exact GELU in the forms exporters write (PyTorch's F.gelu: Mul(Mul(x, 1 + erf(x / sqrt(2))), 0.5); by hand:
// Mul(Mul(x, 0.5), ...), Mul by 1/sqrt(2), operands swapped), in float64 and float32: one GeluGrad(dY, x) is its
// whole backward, no node of the backward pass reads or recomputes the chain's inner values, and the gradients
// match central differences.
void AddGelu(int form, ModelBuilder& b) {
  // 40 x 30 values: not tiny, so that x itself is kept rather than recomputed; a linear loss reads no GELU output.
  b.Input("in", {40, 8});
  b.Input("W", {8, 30});
  b.Input("bias", {30});
  b.Input("c", {40, 30});
  b.ScalarInitializer("sqrt2", std::sqrt(2.0));
  b.ScalarInitializer("inv_sqrt2", 1.0 / std::sqrt(2.0));
  b.ScalarInitializer("one", 1.0);
  b.ScalarInitializer("half", 0.5);
  b.Node("MatMul", {"in", "W"}, "mm");
  b.Node("Add", {"mm", "bias"}, "x");
  if (form == 1) {
    b.Node("Mul", {"inv_sqrt2", "x"}, "scaled");
  } else {
    b.Node("Div", {"x", "sqrt2"}, "scaled");
  }
  b.Node("Erf", {"scaled"}, "erf");
  if (form == 2) {
    b.Node("Add", {"one", "erf"}, "one_plus_erf");
    b.Node("Mul", {"half", "x"}, "x_half");
    b.Node("Mul", {"one_plus_erf", "x_half"}, "gelu");
  } else {
    b.Node("Add", {"erf", "one"}, "one_plus_erf");
    b.Node("Mul", {"x", "one_plus_erf"}, "x_times");
    b.Node("Mul", {"x_times", "half"}, "gelu");
  }
  b.Node("Mul", {"gelu", "c"}, "weighted");
  ModelBuilder::IntAttr(b.Node("ReduceSum", {"weighted"}, "loss"), "keepdims", 0);
  b.Output("loss");
}

TEST(GradientBuilderTest, ExactGeluHasOneFusedGradientInEveryExportedForm) {
  for (int form = 0; form < 3; ++form) {
    SCOPED_TRACE(form);
    ModelBuilder b;
    AddGelu(form, b);
    ExpectGradientsMatchFiniteDifferences(b, {"W", "bias"}, RandomInputs(b, 11 + form, /*positive=*/false));
    auto gradient_model = BuildGradientModel(b.model(), {"loss", {"W", "bias"}});
    ASSERT_TRUE(gradient_model.ok()) << gradient_model.status();
    int gelu_grads = 0;
    for (int n = b.model().graph().node_size(); n < gradient_model->graph().node_size(); ++n) {
      const onnx::NodeProto& node = gradient_model->graph().node(n);
      gelu_grads += node.op_type() == "GeluGrad";
      EXPECT_NE(node.op_type(), "ErfGrad");
      EXPECT_EQ(node.name().find("_Grad/Recompute"), std::string::npos) << node.name();
      for (const std::string& input : node.input()) {
        for (const char* inner : {"scaled", "erf", "one_plus_erf", "x_times", "x_half"}) {
          EXPECT_NE(input, inner) << node.name() << " reads the inner value " << inner;
        }
      }
    }
    EXPECT_EQ(gelu_grads, 1);
  }
}

// The same chain where an inner value also feeds something else: no fusion (the other reader needs its
// gradient through the chain's own rules), and the gradients are still exact.
TEST(GradientBuilderTest, AGeluWhoseInnerValueIsReadElsewhereIsDifferentiatedNodeByNode) {
  ModelBuilder b;
  b.Input("in", {4, 8});
  b.Input("W", {8, 30});
  b.ScalarInitializer("sqrt2", std::sqrt(2.0));
  b.ScalarInitializer("one", 1.0);
  b.ScalarInitializer("half", 0.5);
  b.Node("MatMul", {"in", "W"}, "x");
  b.Node("Div", {"x", "sqrt2"}, "scaled");
  b.Node("Erf", {"scaled"}, "erf");
  b.Node("Add", {"erf", "one"}, "one_plus_erf");
  b.Node("Mul", {"x", "one_plus_erf"}, "x_times");
  b.Node("Mul", {"x_times", "half"}, "gelu");
  b.Node("Mul", {"gelu", "erf"}, "mixed");  // erf read a second time
  b.Node("Mul", {"mixed", "mixed"}, "squared");
  ModelBuilder::IntAttr(b.Node("ReduceSum", {"squared"}, "loss"), "keepdims", 0);
  b.Output("loss");
  ExpectGradientsMatchFiniteDifferences(b, {"W"}, RandomInputs(b, 17, /*positive=*/false));
  auto gradient_model = BuildGradientModel(b.model(), {"loss", {"W"}});
  ASSERT_TRUE(gradient_model.ok()) << gradient_model.status();
  for (const auto& node : gradient_model->graph().node()) EXPECT_NE(node.op_type(), "GeluGrad");
}

// float32, as models are trained: the fused gradient against float64 central differences of the same model.
TEST(GradientBuilderTest, ExactGeluInFloat32MatchesTheFloat64Gradient) {
  ModelBuilder b32(onnx::TensorProto::FLOAT), b64;
  AddGelu(0, b32);
  AddGelu(0, b64);
  const NamedTensors inputs64 = RandomInputs(b64, 23, /*positive=*/false);
  NamedTensors inputs32;
  for (const auto& [name, tensor] : inputs64) {
    Tensor single = *Tensor::Allocate(DataType::kFloat32, tensor.shape());
    for (int64_t i = 0; i < tensor.num_elements(); ++i) Set(single, i, Get(tensor, i));
    inputs32.emplace_back(name, single);
  }
  auto run = [](const ModelBuilder& b, const NamedTensors& inputs) {
    auto gradient_model = BuildGradientModel(b.model(), {"loss", {"bias"}});
    EXPECT_TRUE(gradient_model.ok()) << gradient_model.status();
    auto session = Session::Create(*gradient_model);
    EXPECT_TRUE(session.ok()) << session.status();
    auto outputs = (*session)->Run(inputs);
    EXPECT_TRUE(outputs.ok()) << outputs.status();
    for (const auto& [name, tensor] : *outputs) {
      if (name == GradientName("bias")) return tensor;
    }
    return Tensor();
  };
  const Tensor g32 = run(b32, inputs32), g64 = run(b64, inputs64);
  ASSERT_EQ(g32.num_elements(), 30);
  for (int64_t i = 0; i < 30; ++i) EXPECT_NEAR(Get(g32, i), Get(g64, i), 1e-4 * std::max(1.0, std::fabs(Get(g64, i))));
}

// Scaled dot-product attention as exporters write it, MatMul(Q, K^T) -> scale -> Softmax -> MatMul(P, V), in three
// forms: the keys transposed by a Transpose of the last two axes and Mul by the scale (the transformer workload),
// the keys given transposed and Div by the scale, and a rank-3 chain with the scale first in its Mul and Softmax's
// axis named. `p_read_elsewhere`: the loss also reads P.
void AddAttention(int form, bool p_read_elsewhere, ModelBuilder& b) {
  const bool rank3 = form == 2;
  const std::vector<int64_t> batch = rank3 ? std::vector<int64_t>{3} : std::vector<int64_t>{2, 3};
  auto with = [&](int64_t rows, int64_t cols) {
    std::vector<int64_t> dims = batch;
    dims.push_back(rows);
    dims.push_back(cols);
    return dims;
  };
  b.Input("Q", with(5, 4));
  b.Input(form == 1 ? "Kt" : "K", form == 1 ? with(4, 6) : with(6, 4));
  b.Input("V", with(6, 2));
  b.Input("C", with(5, 2));
  b.ScalarInitializer("scale", 0.5);
  std::string keys = "Kt";
  if (form != 1) {
    ModelBuilder::IntsAttr(b.Node("Transpose", {"K"}, "Kt"), "perm", rank3 ? std::vector<int64_t>{0, 2, 1}
                                                                             : std::vector<int64_t>{0, 1, 3, 2});
  }
  b.Node("MatMul", {"Q", keys}, "S");
  if (form == 0) b.Node("Mul", {"S", "scale"}, "S_scaled");
  if (form == 1) b.Node("Div", {"S", "scale"}, "S_scaled");
  if (form == 2) b.Node("Mul", {"scale", "S"}, "S_scaled");
  onnx::NodeProto* softmax = b.Node("Softmax", {"S_scaled"}, "P");
  if (form == 2) ModelBuilder::IntAttr(softmax, "axis", 2);
  b.Node("MatMul", {"P", "V"}, "O");
  b.Node("Mul", {"O", "C"}, "weighted");
  std::string summed = "weighted";
  if (p_read_elsewhere) {
    b.Node("ReduceSum", {"P"}, "p_sum");  // keepdims: [1, ..] broadcasts against O's shape
    b.Node("Mul", {"weighted", "p_sum"}, "weighted_p");
    summed = "weighted_p";
  }
  ModelBuilder::IntAttr(b.Node("ReduceSum", {summed}, "loss"), "keepdims", 0);
  b.Output("loss");
}

// The gradients of `parameters` in float32 against those of the same model in float64 (where the chain's own rules
// run, themselves checked against central differences).
void ExpectFloat32AttentionGradientsMatchFloat64(int form, bool p_read_elsewhere,
                                                 const std::vector<std::string>& parameters) {
  ModelBuilder b32(onnx::TensorProto::FLOAT), b64;
  AddAttention(form, p_read_elsewhere, b32);
  AddAttention(form, p_read_elsewhere, b64);
  const NamedTensors inputs64 = RandomInputs(b64, 31 + form, /*positive=*/false);
  ExpectGradientsMatchFiniteDifferences(b64, parameters, inputs64);
  NamedTensors inputs32;
  for (const auto& [name, tensor] : inputs64) {
    Tensor single = *Tensor::Allocate(DataType::kFloat32, tensor.shape());
    for (int64_t i = 0; i < tensor.num_elements(); ++i) Set(single, i, Get(tensor, i));
    inputs32.emplace_back(name, single);
  }
  auto run = [&parameters](const ModelBuilder& b, const NamedTensors& inputs) {
    std::map<std::string, Tensor> gradients;
    auto gradient_model = BuildGradientModel(b.model(), {"loss", parameters});
    EXPECT_TRUE(gradient_model.ok()) << gradient_model.status();
    if (!gradient_model.ok()) return gradients;
    auto validated = LoadModelFromBytes(gradient_model->SerializeAsString());
    EXPECT_TRUE(validated.ok()) << validated.status();
    if (!validated.ok()) return gradients;
    auto session = Session::Create(*validated);
    EXPECT_TRUE(session.ok()) << session.status();
    auto outputs = (*session)->Run(inputs);
    EXPECT_TRUE(outputs.ok()) << outputs.status();
    if (outputs.ok()) {
      for (const auto& [name, tensor] : *outputs) gradients[name] = tensor;
    }
    return gradients;
  };
  std::map<std::string, Tensor> g32 = run(b32, inputs32), g64 = run(b64, inputs64);
  for (const std::string& parameter : parameters) {
    const Tensor& single = g32.at(GradientName(parameter));
    const Tensor& reference = g64.at(GradientName(parameter));
    ASSERT_EQ(single.shape(), reference.shape()) << parameter;
    for (int64_t i = 0; i < reference.num_elements(); ++i) {
      EXPECT_NEAR(Get(single, i), Get(reference, i), 1e-5 * std::max(1.0, std::fabs(Get(reference, i))))
          << parameter << " element " << i;
    }
  }
}

// Which ops a float32 model's backward pass is made of.
std::map<std::string, int> BackwardOps(const ModelBuilder& b, const std::vector<std::string>& parameters) {
  std::map<std::string, int> ops;
  auto gradient_model = BuildGradientModel(b.model(), {"loss", parameters});
  EXPECT_TRUE(gradient_model.ok()) << gradient_model.status();
  if (!gradient_model.ok()) return ops;
  for (int n = b.model().graph().node_size(); n < gradient_model->graph().node_size(); ++n) {
    ++ops[gradient_model->graph().node(n).op_type()];
  }
  return ops;
}

TEST(GradientBuilderTest, AttentionHasOneFusedGradientInEveryExportedForm) {
  for (int form = 0; form < 3; ++form) {
    SCOPED_TRACE(form);
    const std::vector<std::string> parameters = {"Q", form == 1 ? "Kt" : "K", "V"};
    ModelBuilder b(onnx::TensorProto::FLOAT);
    AddAttention(form, /*p_read_elsewhere=*/false, b);
    std::map<std::string, int> ops = BackwardOps(b, parameters);
    EXPECT_EQ(ops["ScaledDotProductAttentionGrad"], 1);
    EXPECT_EQ(ops["SoftmaxGrad"], 0);
    EXPECT_EQ(ops["FusedMatMul"], 0);
    EXPECT_EQ(ops["Transpose"], 0) << "the keys' gradient goes to K directly";
    ExpectFloat32AttentionGradientsMatchFloat64(form, /*p_read_elsewhere=*/false, parameters);
  }
  // Only the gradients asked for: V frozen.
  ModelBuilder b(onnx::TensorProto::FLOAT);
  AddAttention(0, /*p_read_elsewhere=*/false, b);
  EXPECT_EQ(BackwardOps(b, {"Q", "K"})["ScaledDotProductAttentionGrad"], 1);
  ExpectFloat32AttentionGradientsMatchFloat64(0, /*p_read_elsewhere=*/false, {"Q", "K"});
}

// P read by something else: its gradient has another part, so the chain is differentiated node by node.
TEST(GradientBuilderTest, AttentionWhoseWeightsAreReadElsewhereIsDifferentiatedNodeByNode) {
  ModelBuilder b(onnx::TensorProto::FLOAT);
  AddAttention(0, /*p_read_elsewhere=*/true, b);
  std::map<std::string, int> ops = BackwardOps(b, {"Q", "K", "V"});
  EXPECT_EQ(ops["ScaledDotProductAttentionGrad"], 0);
  EXPECT_EQ(ops["SoftmaxGrad"], 1);
  ExpectFloat32AttentionGradientsMatchFloat64(0, /*p_read_elsewhere=*/true, {"Q", "K", "V"});
}

TEST(GradientBuilderTest, AnOpWithoutAGradientRuleOnThePathIsReportedWithTheParametersItBlocks) {
  ModelBuilder b;
  b.Input("x", {2});
  b.Input("w", {2});
  b.Node("Mul", {"x", "w"}, "p");
  ModelBuilder::IntAttr(b.Node("ReduceLogSum", {"p"}, "loss"), "keepdims", 0);
  b.Output("loss");
  // A registry in which ReduceLogSum has no rule yet, as a newly added op would.
  std::vector<OpRegistration> registrations = BuiltinOpRegistrations();
  for (OpRegistration& registration : registrations) {
    if (std::string(registration.op_type) == "ReduceLogSum") registration.gradient = kGradientNotYetWritten;
  }
  const OpRegistry registry(registrations);
  auto result = BuildGradientModel(b.model(), {"loss", {"w"}, &registry});
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

// Found by train_fuzzer: shape inference lets LayerNormalization's axis outside the input's rank through, and the
// rule sliced the shape with it. Every rule that indexes a shape with an axis refuses it, naming the node.
TEST(GradientBuilderTest, AnAxisOutsideTheRankIsRefusedNotIndexed) {
  for (int64_t axis : {2, 7, -3, -1000000}) {
    ModelBuilder b;
    b.Input("x", {2, 3});
    b.Input("scale", {3});
    ModelBuilder::IntAttr(b.Node("LayerNormalization", {"x", "scale"}, "y"), "axis", axis);
    ModelBuilder::IntAttr(b.Node("ReduceSum", {"y"}, "loss"), "keepdims", 0);
    b.Output("loss");
    auto result = BuildGradientModel(b.model(), {"loss", {"scale"}});
    ASSERT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << axis << ": " << result.status();
  }
}

// Also found by train_fuzzer: a Transpose perm that is no permutation indexed the inverse out of bounds.
TEST(GradientBuilderTest, ATransposePermThatIsNoPermutationIsRefused) {
  for (const std::vector<int64_t>& perm : std::vector<std::vector<int64_t>>{{0, 5}, {1, 1}, {-1, 0}, {0}}) {
    ModelBuilder b;
    b.Input("x", {2, 3});
    ModelBuilder::IntsAttr(b.Node("Transpose", {"x"}, "y"), "perm", perm);
    ModelBuilder::IntAttr(b.Node("ReduceSum", {"y"}, "loss"), "keepdims", 0);
    b.Output("loss");
    b.Output("y", {3, 2});  // what shape inference cannot say, so that the rule of the loss gets through
    auto result = BuildGradientModel(b.model(), {"loss", {"x"}});
    ASSERT_FALSE(result.ok()) << perm[0];
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
    EXPECT_THAT(result.status().message(), HasSubstr("perm")) << result.status();
  }
}

}  // namespace
}  // namespace traind::engine
