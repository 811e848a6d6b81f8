// One-op tests in the style of onnxruntime's OpTester: declare inputs, attributes and expected
// outputs, then Run() builds a one-node model, compiles it with the real registry and executor,
// and compares every output (dtype, shape, values; floats with a tolerance).
//
//   OpTester test("Add", 14);
//   test.AddInput<float>("a", {2}, {1, 2});
//   test.AddInput<float>("b", {2}, {3, 4});
//   test.AddOutput<float>("c", {2}, {4, 6});
//   test.Run();
//
// The device is a parameter: OnDevice(TestDevice::kGpu) runs the node with the GPU executor (OpenCL, on the device
// engine/gpu/gpu_testing.h picks; tests call TRAIND_REQUIRE_GPU() first), and CompareDevices() runs it on both and
// compares, which is how every GPU kernel is checked against its CPU kernel:
//
//   OpTester test("Add", 14);
//   test.AddInputTensor("a", RandomTensor({8, 3}, -1, 1, 1)).AddInputTensor("b", RandomTensor({3}, -1, 1, 2));
//   test.AddOutputShape("c", DataType::kFloat32, {8, 3});
//   test.CompareDevices();
#ifndef TRAIND_ENGINE_TESTING_OP_TESTER_H_
#define TRAIND_ENGINE_TESTING_OP_TESTER_H_

#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/tensor.h"
#include "onnx/onnx_pb.h"

namespace traind::engine::testing {

enum class TestDevice { kCpu, kGpu };

// Values drawn uniformly from [low, high), repeatable for a seed.
Tensor RandomTensor(Shape shape, float low, float high, uint32_t seed);

class OpTester {
 public:
  OpTester(std::string op_type, int opset, std::string domain = "");

  template <typename T>
  OpTester& AddInput(const std::string& name, Shape shape, std::vector<T> values,
                     DataType dtype = DataTypeOf<T>::value) {
    return AddInputTensor(name, Make(std::move(shape), values, dtype));
  }
  OpTester& AddInputTensor(const std::string& name, Tensor tensor);
  // An omitted optional input (empty name in the node).
  OpTester& AddMissingInput();
  // The node reads an input already added once more, at this position (one graph input, read twice).
  OpTester& AddRepeatedInput(const std::string& name);
  // An omitted optional output (empty name in the node): the kernel need not compute it, and Run compares the others.
  OpTester& AddMissingOutput();
  // An input fed as an initializer (constant) rather than a graph input.
  template <typename T>
  OpTester& AddConstantInput(const std::string& name, Shape shape, std::vector<T> values,
                             DataType dtype = DataTypeOf<T>::value) {
    constant_inputs_.insert(name);
    return AddInputTensor(name, Make(std::move(shape), values, dtype));
  }

  template <typename T>
  OpTester& AddOutput(const std::string& name, Shape shape, std::vector<T> values,
                      DataType dtype = DataTypeOf<T>::value) {
    outputs_.push_back({name, Make(std::move(shape), values, dtype)});
    return *this;
  }

  OpTester& AddAttribute(const std::string& name, int64_t value);
  OpTester& AddAttribute(const std::string& name, float value);
  OpTester& AddAttribute(const std::string& name, const std::string& value);
  OpTester& AddAttribute(const std::string& name, std::vector<int64_t> values);
  OpTester& AddAttribute(const std::string& name, std::vector<float> values);
  OpTester& AddAttribute(const std::string& name, const Tensor& value);

  // An output whose values the test does not state (CompareDevices compares the devices with each other).
  OpTester& AddOutputShape(const std::string& name, DataType dtype, Shape shape);

  OpTester& SetTolerance(double rtol, double atol);
  // Where Run() and RunRaw() run the node (default: the CPU). On the GPU, a node the GPU kernel refuses (it then
  // runs on the CPU) fails the test: it would not test the GPU kernel.
  OpTester& OnDevice(TestDevice device);

  // Runs and EXPECTs the declared outputs.
  void Run();
  // Runs and returns the outputs (or the compile/run error) without comparing.
  absl::StatusOr<std::vector<Tensor>> RunRaw();
  // Runs on the CPU and on the GPU and EXPECTs equal dtypes and shapes and values within |cpu - gpu| <= atol +
  // rtol * |cpu|.
  void CompareDevices(double rtol = 1e-5, double atol = 1e-6);

  const onnx::ModelProto& model() const { return model_; }

 private:
  struct Named {
    std::string name;
    Tensor tensor;
    bool repeated = false;  // AddRepeatedInput: a node input only
  };
  template <typename T>
  static Tensor Make(Shape shape, const std::vector<T>& values, DataType dtype) {
    auto tensor = Tensor::FromVector<T>(std::move(shape), values, dtype);
    return tensor.ok() ? *tensor : Tensor();
  }
  void BuildModel();
  // The outputs the model's graph returns: the declared ones, without the missing ones.
  std::vector<const Named*> GraphOutputs() const;

  std::string op_type_;
  int opset_;
  std::string domain_;
  std::vector<Named> inputs_;  // Tensor undefined => omitted optional input.
  std::set<std::string> constant_inputs_;
  std::vector<Named> outputs_;
  std::vector<onnx::AttributeProto> attributes_;
  double rtol_ = 1e-5;
  double atol_ = 1e-6;
  TestDevice device_ = TestDevice::kCpu;
  bool channels_last_ = true;  // RunRaw on the CPU: the channels-last pass on (Run tries convolutions both ways).
  onnx::ModelProto model_;
};

// EXPECTs equal dtype and shape, and values within tolerance (NaN equals NaN).
void ExpectTensorNear(const Tensor& expected, const Tensor& actual, double rtol, double atol,
                      const std::string& what);

}  // namespace traind::engine::testing

#endif  // TRAIND_ENGINE_TESTING_OP_TESTER_H_
