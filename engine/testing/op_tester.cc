#include "engine/testing/op_tester.h"

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "engine/model/tensor_proto.h"
#include "engine/gpu/gpu_executor.h"
#include "engine/gpu/gpu_testing.h"
#include "engine/runtime/cpu_executor.h"
#include "engine/runtime/plan.h"
#include "gtest/gtest.h"

namespace traind::engine::testing {
namespace {

// Reads element i of any stored dtype as double (int64 beyond 2^53 compares approximately; tests
// use small values).
double ElementAsDouble(const Tensor& tensor, int64_t i) {
  const void* data = tensor.raw_data();
  switch (tensor.dtype()) {
    case DataType::kFloat32: return static_cast<const float*>(data)[i];
    case DataType::kFloat64: return static_cast<const double*>(data)[i];
    case DataType::kInt8: return static_cast<const int8_t*>(data)[i];
    case DataType::kInt16: return static_cast<const int16_t*>(data)[i];
    case DataType::kInt32: return static_cast<const int32_t*>(data)[i];
    case DataType::kInt64: return static_cast<double>(static_cast<const int64_t*>(data)[i]);
    case DataType::kUint8:
    case DataType::kBool: return static_cast<const uint8_t*>(data)[i];
    case DataType::kUint16: return static_cast<const uint16_t*>(data)[i];
    case DataType::kUint32: return static_cast<const uint32_t*>(data)[i];
    case DataType::kUint64: return static_cast<double>(static_cast<const uint64_t*>(data)[i]);
    case DataType::kFloat16: return Float16ToFloat(static_cast<const Float16*>(data)[i]);
    case DataType::kBFloat16: return BFloat16ToFloat(static_cast<const BFloat16*>(data)[i]);
    default: return NAN;
  }
}

void SetValueInfo(onnx::ValueInfoProto* info, const std::string& name, const Tensor& tensor) {
  info->set_name(name);
  auto* tensor_type = info->mutable_type()->mutable_tensor_type();
  tensor_type->set_elem_type(static_cast<int32_t>(tensor.dtype()));
  auto* shape = tensor_type->mutable_shape();
  for (int64_t dim : tensor.shape()) shape->add_dim()->set_dim_value(dim);
}

}  // namespace

Tensor RandomTensor(Shape shape, float low, float high, uint32_t seed) {
  Tensor tensor = *Tensor::Allocate(DataType::kFloat32, std::move(shape));
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> distribution(low, high);
  float* values = tensor.mutable_data<float>();
  for (int64_t i = 0; i < tensor.num_elements(); ++i) values[i] = distribution(generator);
  return tensor;
}

OpTester::OpTester(std::string op_type, int opset, std::string domain)
    : op_type_(std::move(op_type)), opset_(opset), domain_(std::move(domain)) {}

OpTester& OpTester::AddInputTensor(const std::string& name, Tensor tensor) {
  EXPECT_TRUE(tensor.defined()) << "bad test input '" << name << "' (value count vs shape?)";
  inputs_.push_back({name, std::move(tensor)});
  return *this;
}

OpTester& OpTester::AddMissingInput() {
  inputs_.push_back({"", Tensor()});
  return *this;
}

OpTester& OpTester::AddRepeatedInput(const std::string& name) {
  inputs_.push_back({name, Tensor(), /*repeated=*/true});
  return *this;
}

OpTester& OpTester::AddMissingOutput() {
  outputs_.push_back({"", Tensor()});
  return *this;
}

std::vector<const OpTester::Named*> OpTester::GraphOutputs() const {
  std::vector<const Named*> named;
  for (const Named& output : outputs_) {
    if (!output.name.empty()) named.push_back(&output);
  }
  return named;
}

OpTester& OpTester::AddAttribute(const std::string& name, int64_t value) {
  onnx::AttributeProto attribute;
  attribute.set_name(name);
  attribute.set_type(onnx::AttributeProto::INT);
  attribute.set_i(value);
  attributes_.push_back(attribute);
  return *this;
}

OpTester& OpTester::AddAttribute(const std::string& name, float value) {
  onnx::AttributeProto attribute;
  attribute.set_name(name);
  attribute.set_type(onnx::AttributeProto::FLOAT);
  attribute.set_f(value);
  attributes_.push_back(attribute);
  return *this;
}

OpTester& OpTester::AddAttribute(const std::string& name, const std::string& value) {
  onnx::AttributeProto attribute;
  attribute.set_name(name);
  attribute.set_type(onnx::AttributeProto::STRING);
  attribute.set_s(value);
  attributes_.push_back(attribute);
  return *this;
}

OpTester& OpTester::AddAttribute(const std::string& name, std::vector<int64_t> values) {
  onnx::AttributeProto attribute;
  attribute.set_name(name);
  attribute.set_type(onnx::AttributeProto::INTS);
  for (int64_t v : values) attribute.add_ints(v);
  attributes_.push_back(attribute);
  return *this;
}

OpTester& OpTester::AddAttribute(const std::string& name, std::vector<float> values) {
  onnx::AttributeProto attribute;
  attribute.set_name(name);
  attribute.set_type(onnx::AttributeProto::FLOATS);
  for (float v : values) attribute.add_floats(v);
  attributes_.push_back(attribute);
  return *this;
}

OpTester& OpTester::AddAttribute(const std::string& name, const Tensor& value) {
  onnx::AttributeProto attribute;
  attribute.set_name(name);
  attribute.set_type(onnx::AttributeProto::TENSOR);
  *attribute.mutable_t() = TensorToProto(value, name);
  attributes_.push_back(attribute);
  return *this;
}

OpTester& OpTester::AddOutputShape(const std::string& name, DataType dtype, Shape shape) {
  outputs_.push_back({name, *Tensor::Allocate(dtype, std::move(shape))});
  return *this;
}

OpTester& OpTester::OnDevice(TestDevice device) {
  device_ = device;
  return *this;
}

OpTester& OpTester::SetTolerance(double rtol, double atol) {
  rtol_ = rtol;
  atol_ = atol;
  return *this;
}

void OpTester::BuildModel() {
  model_.Clear();
  model_.set_ir_version(8);
  auto* opset = model_.add_opset_import();
  opset->set_domain(domain_);
  opset->set_version(opset_);
  auto* graph = model_.mutable_graph();
  graph->set_name("op_tester");
  auto* node = graph->add_node();
  node->set_name("node0");
  node->set_op_type(op_type_);
  node->set_domain(domain_);
  for (const Named& input : inputs_) {
    node->add_input(input.name);
    if (input.name.empty() || input.repeated) continue;
    if (constant_inputs_.count(input.name)) {
      *graph->add_initializer() = TensorToProto(input.tensor, input.name);
    } else {
      SetValueInfo(graph->add_input(), input.name, input.tensor);
    }
  }
  for (const Named& output : outputs_) {
    node->add_output(output.name);
    if (!output.name.empty()) SetValueInfo(graph->add_output(), output.name, output.tensor);
  }
  for (const auto& attribute : attributes_) *node->add_attribute() = attribute;
}

absl::StatusOr<std::vector<Tensor>> OpTester::RunRaw() {
  BuildModel();
  CompileOptions compile_options;
  // The GPU executor finds each node in the model by its outputs: its plans keep the model's nodes as they are.
  compile_options.fuse_elementwise = device_ == TestDevice::kCpu;
  compile_options.fold_bias_adds = device_ == TestDevice::kCpu;
  compile_options.fuse_attention = device_ == TestDevice::kCpu;
  compile_options.fuse_gelu = device_ == TestDevice::kCpu;
  compile_options.fold_transposes = device_ == TestDevice::kCpu;
  compile_options.channels_last = device_ == TestDevice::kCpu && channels_last_;
  auto plan = Compile(model_, compile_options);
  if (!plan.ok()) return plan.status();
  std::vector<Tensor> feeds;
  for (const Named& input : inputs_) {
    if (!input.name.empty() && !input.repeated && !constant_inputs_.count(input.name)) feeds.push_back(input.tensor);
  }
  // Three threads even on small machines, so kernels that split work run their parallel path.
  ThreadPool threads(3);
  if (device_ == TestDevice::kCpu) {
    CpuExecutor executor(&threads);
    return executor.Run(**plan, feeds);
  }
  std::string why;
  std::shared_ptr<gpu::Device> device = gpu::testing::TestDevice(&why);
  if (device == nullptr) return absl::FailedPreconditionError(absl::StrCat("no OpenCL device: ", why));
  auto stream = gpu::Stream::Create(device);
  if (!stream.ok()) return stream.status();
  gpu::GpuExecutorOptions options;
  options.stream = *stream;
  options.threads = &threads;
  auto executor = gpu::GpuExecutor::Create(*plan, model_, options);
  if (!executor.ok()) return executor.status();
  const gpu::Placement& placement = (*executor)->placement();
  if (placement.cpu_nodes > 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(op_type_, " did not run on the GPU: ", placement.Summary()));
  }
  auto outputs = (*executor)->Run(**plan, feeds);
  if (!outputs.ok()) return outputs.status();
  for (const Tensor& output : *outputs) {
    absl::Status synced = output.buffer()->SyncToHost();
    if (!synced.ok()) return synced;
  }
  return outputs;
}

void OpTester::CompareDevices(double rtol, double atol) {
  const TestDevice chosen = device_;
  device_ = TestDevice::kCpu;
  auto cpu = RunRaw();
  device_ = TestDevice::kGpu;
  auto gpu = RunRaw();
  device_ = chosen;
  ASSERT_TRUE(cpu.ok()) << op_type_ << " on the CPU: " << cpu.status();
  ASSERT_TRUE(gpu.ok()) << op_type_ << " on the GPU: " << gpu.status();
  const std::vector<const Named*> declared = GraphOutputs();
  ASSERT_EQ(cpu->size(), declared.size());
  ASSERT_EQ(cpu->size(), gpu->size());
  for (size_t i = 0; i < cpu->size(); ++i) {
    ExpectTensorNear((*cpu)[i], (*gpu)[i], rtol, atol,
                     absl::StrCat(op_type_, " output '", declared[i]->name, "' on the GPU vs the CPU"));
  }
}

void OpTester::Run() {
  // Convolutions on the CPU run in the channels-last plan (what training graphs run) and in the NCHW one (what
  // 1-D / 3-D convolutions and plans without the pass run): both must give the expected outputs.
  const bool both_layouts = device_ == TestDevice::kCpu && (op_type_ == "Conv" || op_type_ == "ConvGrad");
  for (const bool channels_last : {true, false}) {
    if (!channels_last && !both_layouts) break;
    channels_last_ = channels_last;
    const std::string plan = both_layouts ? (channels_last ? " (channels-last plan)" : " (NCHW plan)") : "";
    auto outputs = RunRaw();
    ASSERT_TRUE(outputs.ok()) << op_type_ << plan << ": " << outputs.status();
    const std::vector<const Named*> declared = GraphOutputs();
    ASSERT_EQ(outputs->size(), declared.size());
    for (size_t i = 0; i < declared.size(); ++i) {
      ExpectTensorNear(declared[i]->tensor, (*outputs)[i], rtol_, atol_,
                       absl::StrCat(op_type_, plan, " output '", declared[i]->name, "'"));
    }
  }
  channels_last_ = true;
}

void ExpectTensorNear(const Tensor& expected, const Tensor& actual, double rtol, double atol,
                      const std::string& what) {
  ASSERT_TRUE(actual.defined()) << what;
  ASSERT_EQ(DataTypeName(expected.dtype()), DataTypeName(actual.dtype())) << what;
  ASSERT_EQ(ShapeToString(expected.shape()), ShapeToString(actual.shape())) << what;
  int reported = 0;
  for (int64_t i = 0; i < expected.num_elements(); ++i) {
    const double e = ElementAsDouble(expected, i);
    const double a = ElementAsDouble(actual, i);
    if (std::isnan(e) && std::isnan(a)) continue;
    if (e == a) continue;  // Also equal infinities.
    if (std::fabs(e - a) <= atol + rtol * std::fabs(e)) continue;
    ADD_FAILURE() << what << " element " << i << ": expected " << e << ", got " << a;
    if (++reported == 10) return;
  }
}

}  // namespace traind::engine::testing
