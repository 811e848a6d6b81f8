// Walks the single op list: well-formed registrations and a gradient slot filled for every op.
#include <set>
#include <string>

#include "engine/runtime/op_registry.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

TEST(OpListTest, EveryRegistrationIsWellFormedAndRangesDoNotOverlap) {
  const auto& registrations = OpRegistry::Global().registrations();
  ASSERT_FALSE(registrations.empty());
  for (const OpRegistration& op : registrations) {
    EXPECT_NE(op.factory, nullptr) << op.op_type;
    EXPECT_LE(op.first_opset, op.last_opset) << op.op_type;
    for (const OpRegistration& other : registrations) {
      if (&other == &op || std::string(other.domain) != op.domain ||
          std::string(other.op_type) != op.op_type) {
        continue;
      }
      EXPECT_TRUE(other.last_opset < op.first_opset || other.first_opset > op.last_opset)
          << op.op_type << " has overlapping opset ranges";
    }
  }
}

TEST(OpListTest, FindRespectsOpsetRange) {
  EXPECT_NE(OpRegistry::Global().Find("", "Add", 14), nullptr);
  EXPECT_NE(OpRegistry::Global().Find("ai.onnx", "Add", 14), nullptr);
  EXPECT_EQ(OpRegistry::Global().Find("", "Erf", 8), nullptr);  // Erf starts at opset 9.
  EXPECT_EQ(OpRegistry::Global().Find("", "NoSuchOp", 14), nullptr);
}

// A new op without a gradient rule (or an explicit kNotDifferentiable) fails here.
TEST(OpListTest, EveryOpHasAGradientRuleOrIsNotDifferentiable) {
  for (const OpRegistration& op : OpRegistry::Global().registrations()) {
    EXPECT_NE(op.gradient.state, GradientState::kNotYetWritten)
        << op.op_type << " " << op.first_opset << "-" << op.last_opset << ": gradient not yet written";
    EXPECT_EQ(op.gradient.state == GradientState::kWritten, op.gradient.rule != nullptr) << op.op_type;
  }
}

// kGradientViaVersionConversion promises that the gradient builder's version conversion lifts every node of the
// registration to kMinGradientOpset, where a registration of the same op has a rule (or is not differentiable).
TEST(OpListTest, VersionConvertedRegistrationsAreOldAndHaveAModernCounterpart) {
  int converted = 0;
  for (const OpRegistration& op : OpRegistry::Global().registrations()) {
    if (op.gradient.state != GradientState::kViaVersionConversion) continue;
    ++converted;
    EXPECT_LT(op.last_opset, kMinGradientOpset) << op.op_type;
    // Scatter became ScatterElements at opset 11.
    const std::string modern_type = std::string(op.op_type) == "Scatter" ? "ScatterElements" : op.op_type;
    const OpRegistration* modern = OpRegistry::Global().Find(op.domain, modern_type, kMinGradientOpset);
    ASSERT_NE(modern, nullptr) << op.op_type << " has no opset-" << kMinGradientOpset << " registration";
    EXPECT_TRUE(modern->gradient.state == GradientState::kWritten ||
                modern->gradient.state == GradientState::kNotDifferentiable)
        << op.op_type;
  }
  EXPECT_GT(converted, 0);
}

}  // namespace
}  // namespace traind::engine
