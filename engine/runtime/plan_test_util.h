// Helpers for the tests of the plan passes that rewrite the node list (transpose_folding_test, bias_folding_test):
// small graphs by hand, deterministic values, and a pass's plan checked against the plan without it.
#ifndef TRAIND_ENGINE_RUNTIME_PLAN_TEST_UTIL_H_
#define TRAIND_ENGINE_RUNTIME_PLAN_TEST_UTIL_H_

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/tensor.h"
#include "engine/runtime/cpu_executor.h"
#include "engine/runtime/plan.h"
#include "engine/runtime/session.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace traind::engine::testing {

// A float32 value of static `dims`.
inline void AddFloatValue(onnx::ValueInfoProto* info, const std::string& name, const std::vector<int64_t>& dims) {
  info->set_name(name);
  auto* type = info->mutable_type()->mutable_tensor_type();
  type->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t dim : dims) type->mutable_shape()->add_dim()->set_dim_value(dim);
}

// A node named after its one output, with integer attributes.
inline onnx::NodeProto MakeNode(const std::string& op, const std::vector<std::string>& inputs,
                                const std::string& output,
                                const std::vector<std::pair<std::string, int64_t>>& attributes = {}) {
  onnx::NodeProto node;
  node.set_op_type(op);
  node.set_name(output);
  for (const auto& input : inputs) node.add_input(input);
  node.add_output(output);
  for (const auto& [name, value] : attributes) {
    auto* attribute = node.add_attribute();
    attribute->set_name(name);
    attribute->set_type(onnx::AttributeProto::INT);
    attribute->set_i(value);
  }
  return node;
}

// scale * sin(0.7 i + scale): distinct, signed, deterministic.
inline Tensor SineValues(const Shape& shape, float scale) {
  std::vector<float> values(DimProduct(shape, 0, shape.size()));
  for (size_t i = 0; i < values.size(); ++i) values[i] = scale * std::sin(0.7f * static_cast<float>(i) + scale);
  return *Tensor::FromVector<float>(shape, values);
}

// Runs `inputs` through both plans on the CPU executor, EXPECTs every float output of `plan` within
// `relative` * (1 + |reference|) of `reference`'s, and returns `plan`'s outputs (empty on failure).
inline NamedTensors ExpectSameOutputs(const std::shared_ptr<const Plan>& plan,
                                      const std::shared_ptr<const Plan>& reference, const NamedTensors& inputs,
                                      double relative) {
  Session session(plan, std::make_unique<CpuExecutor>());
  Session reference_session(reference, std::make_unique<CpuExecutor>());
  absl::StatusOr<NamedTensors> outputs = session.Run(inputs);
  absl::StatusOr<NamedTensors> expected = reference_session.Run(inputs);
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_TRUE(expected.ok()) << expected.status();
  if (!outputs.ok() || !expected.ok()) return {};
  EXPECT_EQ(outputs->size(), expected->size());
  for (size_t output = 0; output < std::min(outputs->size(), expected->size()); ++output) {
    const Tensor& got = (*outputs)[output].second;
    const Tensor& want = (*expected)[output].second;
    EXPECT_EQ(got.shape(), want.shape()) << (*outputs)[output].first;
    if (got.shape() != want.shape()) continue;
    for (int64_t i = 0; i < got.num_elements(); ++i) {
      EXPECT_NEAR(got.data<float>()[i], want.data<float>()[i], relative * (1 + std::fabs(want.data<float>()[i])))
          << (*outputs)[output].first << "[" << i << "]";
    }
  }
  return *std::move(outputs);
}

}  // namespace traind::engine::testing

#endif  // TRAIND_ENGINE_RUNTIME_PLAN_TEST_UTIL_H_
