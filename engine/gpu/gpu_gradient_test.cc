// GPU gradients against finite differences: for one op at a time, loss = sum(op(inputs) * R) with a fixed random R,
// the gradient model (engine/autodiff) runs on the GPU executor, backward kernels included, and every checked
// element agrees with a central difference of the forward model run on the GPU too. Everything is float32 here
// (the device's type), so steps and tolerances are float32's: this catches a wrong formula, not the last ulp (that
// the op tests do, GPU against CPU, and the CPU rules are checked in float64 by gradient_builder_test).
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "engine/autodiff/gradient_builder.h"
#include "engine/core/status_macros.h"
#include "engine/gpu/gpu_executor.h"
#include "engine/gpu/gpu_testing.h"
#include "engine/model/model_loader.h"
#include "engine/model/traind_schemas.h"
#include "engine/runtime/session.h"
#include "gtest/gtest.h"

namespace traind::engine::gpu {
namespace {

struct Input {
  std::string name;
  Shape shape;
  float low = -1, high = 1;
  bool differentiate = true;
};

struct OpCase {
  std::string op;
  std::vector<Input> inputs;
  Shape output;
  std::vector<onnx::AttributeProto> attributes;
  std::vector<std::string> on_gpu;  // op types of the gradient model that must run on the GPU
  int extra_outputs = 0;            // unused outputs after y
  double step = 1e-2;
  std::vector<std::pair<std::string, std::vector<int64_t>>> int64_constants = {};  // appended inputs
};

onnx::AttributeProto Ints(const char* name, std::vector<int64_t> values) {
  onnx::AttributeProto attribute;
  attribute.set_name(name);
  attribute.set_type(onnx::AttributeProto::INTS);
  for (int64_t v : values) attribute.add_ints(v);
  return attribute;
}

onnx::AttributeProto Int(const char* name, int64_t value) {
  onnx::AttributeProto attribute;
  attribute.set_name(name);
  attribute.set_type(onnx::AttributeProto::INT);
  attribute.set_i(value);
  return attribute;
}

void Declare(onnx::ValueInfoProto* info, const std::string& name, const Shape& shape) {
  info->set_name(name);
  auto* type = info->mutable_type()->mutable_tensor_type();
  type->set_elem_type(onnx::TensorProto::FLOAT);
  auto* dims = type->mutable_shape();
  for (int64_t dim : shape) dims->add_dim()->set_dim_value(dim);
}

Tensor Random(const Shape& shape, float low, float high, uint32_t seed) {
  Tensor tensor = *Tensor::Allocate(DataType::kFloat32, shape);
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> distribution(low, high);
  for (int64_t i = 0; i < tensor.num_elements(); ++i) {
    float value = distribution(generator);
    // Away from 0, where Relu and friends have a kink a finite difference would straddle.
    if (std::fabs(value) < 0.05f) value = value < 0 ? -0.05f : 0.05f;
    tensor.mutable_data<float>()[i] = value;
  }
  return tensor;
}

// y = op(inputs); loss = ReduceSum(y * R).
onnx::ModelProto ForwardModel(const OpCase& c, const Tensor& weights) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  auto* training = model.add_opset_import();
  training->set_domain(kTraindTrainingDomain);
  training->set_version(kTraindTrainingVersion);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("gradient_check");
  onnx::NodeProto* node = graph->add_node();
  node->set_op_type(c.op);
  node->set_name("op");
  for (const Input& input : c.inputs) {
    Declare(graph->add_input(), input.name, input.shape);
    node->add_input(input.name);
  }
  for (const auto& [name, values] : c.int64_constants) {
    onnx::TensorProto* constant = graph->add_initializer();
    constant->set_name(name);
    constant->set_data_type(onnx::TensorProto::INT64);
    constant->add_dims(static_cast<int64_t>(values.size()));
    for (int64_t v : values) constant->add_int64_data(v);
    node->add_input(name);
  }
  node->add_output("y");
  for (int i = 0; i < c.extra_outputs; ++i) node->add_output("unused" + std::to_string(i));
  for (const auto& attribute : c.attributes) *node->add_attribute() = attribute;
  onnx::TensorProto* r = graph->add_initializer();
  r->set_name("R");
  r->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t dim : weights.shape()) r->add_dims(dim);
  for (int64_t i = 0; i < weights.num_elements(); ++i) r->add_float_data(weights.data<float>()[i]);
  onnx::NodeProto* mul = graph->add_node();
  mul->set_op_type("Mul");
  mul->add_input("y");
  mul->add_input("R");
  mul->add_output("weighted");
  onnx::NodeProto* sum = graph->add_node();
  sum->set_op_type("ReduceSum");
  sum->add_input("weighted");
  sum->add_output("loss");
  *sum->add_attribute() = Int("keepdims", 0);
  onnx::ValueInfoProto* loss = graph->add_output();
  loss->set_name("loss");
  loss->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  loss->mutable_type()->mutable_tensor_type()->mutable_shape();
  return model;
}

absl::StatusOr<std::unique_ptr<Session>> GpuSession(const onnx::ModelProto& model, std::shared_ptr<Stream> stream,
                                                    Placement* placement) {
  TRAIND_ASSIGN_OR_RETURN(onnx::ModelProto validated, LoadModelFromBytes(model.SerializeAsString()));
  SessionOptions options;
  options.make_executor = [stream, placement](std::shared_ptr<const Plan> plan, const onnx::ModelProto& compiled,
                                              std::shared_ptr<BufferPool> /*host_buffers: no budget here*/)
      -> absl::StatusOr<std::unique_ptr<Executor>> {
    GpuExecutorOptions gpu;
    gpu.stream = stream;
    TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<GpuExecutor> executor, GpuExecutor::Create(plan, compiled, gpu));
    if (placement != nullptr) *placement = executor->placement();
    return std::unique_ptr<Executor>(std::move(executor));
  };
  return Session::Create(validated, options);
}

double Loss(const Session& session, const NamedTensors& inputs) {
  auto outputs = session.Run(inputs);
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  return outputs.ok() ? double{(*outputs)[0].second.data<float>()[0]} : NAN;
}

void ExpectGradientsMatchFiniteDifferences(const OpCase& c) {
  SCOPED_TRACE(c.op);
  auto stream = Stream::Create(testing::TestDevice());
  ASSERT_TRUE(stream.ok());
  const Tensor weights = Random(c.output, -1, 1, 99);
  const onnx::ModelProto forward = ForwardModel(c, weights);
  std::vector<std::string> parameters;
  for (const Input& input : c.inputs) {
    if (input.differentiate) parameters.push_back(input.name);
  }
  auto gradient_model = BuildGradientModel(forward, {"loss", parameters});
  ASSERT_TRUE(gradient_model.ok()) << gradient_model.status();
  Placement placement;
  auto gradients = GpuSession(*gradient_model, *stream, &placement);
  ASSERT_TRUE(gradients.ok()) << gradients.status();
  for (const Placement::Node& node : placement.nodes) {
    if (std::count(c.on_gpu.begin(), c.on_gpu.end(), node.op_type)) {
      EXPECT_TRUE(node.on_gpu) << node.op_type << " ran on the CPU: " << node.reason;
    }
  }
  auto losses = GpuSession(forward, *stream, nullptr);
  ASSERT_TRUE(losses.ok()) << losses.status();

  NamedTensors inputs;
  uint32_t seed = 1;
  for (const Input& input : c.inputs) inputs.emplace_back(input.name, Random(input.shape, input.low, input.high, seed++));
  auto outputs = (*gradients)->Run(inputs);
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  std::map<std::string, Tensor> analytic(outputs->begin(), outputs->end());

  for (size_t k = 0; k < inputs.size(); ++k) {
    if (!c.inputs[k].differentiate) continue;
    const Tensor& gradient = analytic.at(GradientName(inputs[k].first));
    double largest = 0;
    for (int64_t i = 0; i < gradient.num_elements(); ++i) {
      largest = std::max(largest, std::fabs(double{gradient.data<float>()[i]}));
    }
    // Up to 16 elements per input, spread over it.
    const int64_t count = gradient.num_elements();
    for (int64_t i = 0; i < count; i += std::max<int64_t>(1, count / 16)) {
      NamedTensors plus = inputs, minus = inputs;
      plus[k].second = *Tensor::Allocate(DataType::kFloat32, inputs[k].second.shape());
      minus[k].second = *Tensor::Allocate(DataType::kFloat32, inputs[k].second.shape());
      for (int64_t j = 0; j < count; ++j) {
        const float value = inputs[k].second.data<float>()[j];
        plus[k].second.mutable_data<float>()[j] = value + (j == i ? static_cast<float>(c.step) : 0.0f);
        minus[k].second.mutable_data<float>()[j] = value - (j == i ? static_cast<float>(c.step) : 0.0f);
      }
      const double numeric = (Loss(**losses, plus) - Loss(**losses, minus)) / (2 * c.step);
      EXPECT_NEAR(gradient.data<float>()[i], numeric, 1e-2 * std::max(largest, 1.0))
          << inputs[k].first << "[" << i << "]";
    }
  }
}

TEST(GpuGradientTest, BackwardKernelsMatchFiniteDifferences) {
  TRAIND_REQUIRE_GPU();
  const std::vector<OpCase> cases = {
      {"Gemm", {{"a", {4, 5}}, {"b", {3, 5}}, {"c", {3}}}, {4, 3}, {Int("transB", 1)}, {"Gemm"}},
      {"MatMul", {{"a", {2, 3, 4}}, {"b", {2, 4, 5}}}, {2, 3, 5}, {}, {"MatMul"}},
      {"Conv",
       {{"x", {2, 2, 5, 5}}, {"w", {3, 2, 3, 3}}, {"b", {3}}},
       {2, 3, 3, 3},
       {Ints("strides", {2, 2}), Ints("pads", {1, 1, 1, 1})},
       {"Conv", "ConvGrad"}},
      {"MaxPool", {{"x", {1, 2, 6, 6}}}, {1, 2, 3, 3}, {Ints("kernel_shape", {2, 2}), Ints("strides", {2, 2})},
       {"MaxPool", "MaxPoolGrad"}, 0, 1e-3},
      {"AveragePool", {{"x", {1, 2, 6, 6}}}, {1, 2, 3, 3}, {Ints("kernel_shape", {2, 2}), Ints("strides", {2, 2})},
       {"AveragePool"}},
      {"GlobalAveragePool", {{"x", {2, 3, 4, 4}}}, {2, 3, 1, 1}, {}, {"GlobalAveragePool"}},
      {"BatchNormalization",
       {{"x", {4, 3, 2, 2}}, {"scale", {3}, 0.5f, 2}, {"bias", {3}}, {"mean", {3}, -1, 1, false},
        {"var", {3}, 0.5f, 2, false}},
       {4, 3, 2, 2},
       {Int("training_mode", 1)},
       {"BatchNormalization", "BatchNormalizationGrad"},
       2,
       1e-2},
      {"LayerNormalization", {{"x", {3, 8}}, {"scale", {8}, 0.5f, 2}, {"bias", {8}}}, {3, 8}, {},
       {"LayerNormalization", "LayerNormalizationGrad"}},
      {"Relu", {{"x", {5, 6}}}, {5, 6}, {}, {"Relu", "ReluGrad"}},
      {"Erf", {{"x", {5, 6}}}, {5, 6}, {}, {"Erf", "ErfGrad"}},
      {"Softmax", {{"x", {3, 7}, -3, 3}}, {3, 7}, {}, {"Softmax"}},
      {"LogSoftmax", {{"x", {3, 7}, -3, 3}}, {3, 7}, {}, {"LogSoftmax"}},
      {"Sigmoid", {{"x", {4, 5}, -3, 3}}, {4, 5}, {}, {"Sigmoid"}},
      {"Tanh", {{"x", {4, 5}, -2, 2}}, {4, 5}, {}, {"Tanh"}},
      {"Div", {{"a", {4, 5}}, {"b", {5}, 0.5f, 2}}, {4, 5}, {}, {"Div"}},
      {"Transpose", {{"x", {2, 3, 4}}}, {4, 2, 3}, {Ints("perm", {2, 0, 1})}, {"Transpose"}},
      {"Gather", {{"data", {6, 4}}}, {3, 4}, {}, {"Gather", "ScatterND"}, 0, 1e-2, {{"indices", {4, 1, 4}}}},
      {"Slice", {{"x", {5, 6}}}, {3, 3}, {}, {"Slice", "Pad"}, 0, 1e-2,
       {{"starts", {1, 0}}, {"ends", {4, 3}}, {"axes", {0, 1}}, {"steps", {1, 1}}}},
  };
  for (const OpCase& c : cases) ExpectGradientsMatchFiniteDifferences(c);
}

}  // namespace
}  // namespace traind::engine::gpu
