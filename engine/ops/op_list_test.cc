// Walks the single op list. Issue 4 turns on the gradient-completeness check below.
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

// Lists ops whose gradient slot is still empty. Issue 4 removes DISABLED_ once every op has a
// rule or says kNotDifferentiable.
TEST(OpListTest, DISABLED_EveryOpHasAGradientRuleOrIsNotDifferentiable) {
  for (const OpRegistration& op : OpRegistry::Global().registrations()) {
    EXPECT_NE(op.gradient.state, GradientState::kNotYetWritten)
        << op.op_type << ": gradient not yet written";
  }
}

}  // namespace
}  // namespace traind::engine
