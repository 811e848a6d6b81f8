// The GPU kernels of the data-movement ops (Transpose, Concat, Slice, Expand, Tile, Pad, Gather, ScatterND) against
// the CPU.
#include "engine/gpu/gpu_testing.h"
#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;
using testing::RandomTensor;

TEST(LayoutGpuTest, TransposeConcatSliceExpandTileMatchTheCpu) {
  TRAIND_REQUIRE_GPU();
  OpTester transpose("Transpose", 13);
  transpose.AddInputTensor("x", RandomTensor({2, 3, 4, 5}, -1, 1, 1));
  transpose.AddAttribute("perm", std::vector<int64_t>{2, 0, 3, 1});
  transpose.AddOutputShape("y", DataType::kFloat32, {4, 2, 5, 3});
  transpose.CompareDevices(0, 0);
  OpTester concat("Concat", 13);
  concat.AddInputTensor("a", RandomTensor({2, 3, 4}, -1, 1, 1)).AddInputTensor("b", RandomTensor({2, 1, 4}, -1, 1, 2));
  concat.AddInputTensor("c", RandomTensor({2, 2, 4}, -1, 1, 3)).AddAttribute("axis", int64_t{1});
  concat.AddOutputShape("y", DataType::kFloat32, {2, 6, 4});
  concat.CompareDevices(0, 0);
  OpTester slice("Slice", 13);
  slice.AddInputTensor("x", RandomTensor({5, 6, 7}, -1, 1, 1));
  slice.AddConstantInput<int64_t>("starts", {2}, {4, 1}).AddConstantInput<int64_t>("ends", {2}, {0, 100});
  slice.AddConstantInput<int64_t>("axes", {2}, {0, 2}).AddConstantInput<int64_t>("steps", {2}, {-2, 3});
  slice.AddOutputShape("y", DataType::kFloat32, {2, 6, 2});
  slice.CompareDevices(0, 0);
  OpTester expand("Expand", 13);
  expand.AddInputTensor("x", RandomTensor({3, 1}, -1, 1, 1)).AddConstantInput<int64_t>("shape", {3}, {2, 3, 4});
  expand.AddOutputShape("y", DataType::kFloat32, {2, 3, 4});
  expand.CompareDevices(0, 0);
  OpTester tile("Tile", 13);
  tile.AddInputTensor("x", RandomTensor({2, 3}, -1, 1, 1)).AddConstantInput<int64_t>("repeats", {2}, {2, 2});
  tile.AddOutputShape("y", DataType::kFloat32, {4, 6});
  tile.CompareDevices(0, 0);
}

TEST(LayoutGpuTest, PadInEveryModeMatchesTheCpu) {
  TRAIND_REQUIRE_GPU();
  for (const char* mode : {"constant", "reflect", "edge"}) {
    SCOPED_TRACE(mode);
    OpTester pad("Pad", 13);
    pad.AddInputTensor("x", RandomTensor({3, 4}, -1, 1, 1));
    pad.AddConstantInput<int64_t>("pads", {4}, {1, 2, 2, 0});
    if (std::string(mode) == "constant") pad.AddConstantInput<float>("value", {}, {1.5f});
    pad.AddAttribute("mode", std::string(mode));
    pad.AddOutputShape("y", DataType::kFloat32, {6, 6});
    pad.CompareDevices(0, 0);
  }
}

TEST(GatherScatterGpuTest, GatherAndScatterNdMatchTheCpu) {
  TRAIND_REQUIRE_GPU();
  for (int64_t axis : {0, 1}) {
    OpTester gather("Gather", 13);
    gather.AddInputTensor("data", RandomTensor({5, 4}, -1, 1, 1));
    gather.AddInput<int64_t>("indices", {2, 3}, {0, -1, 3, 2, 2, 1});
    gather.AddAttribute("axis", axis);
    gather.AddOutputShape("y", DataType::kFloat32, axis == 0 ? Shape{2, 3, 4} : Shape{5, 2, 3});
    gather.CompareDevices(0, 0);
  }
  // Repeated indices add up in index order, as on the CPU (the embedding gradient).
  for (const char* reduction : {"none", "add", "mul"}) {
    SCOPED_TRACE(reduction);
    OpTester scatter("ScatterND", 16);
    scatter.AddInputTensor("data", RandomTensor({6, 3}, -1, 1, 1));
    scatter.AddInput<int64_t>("indices", {4, 1}, {1, 4, 1, -1});
    scatter.AddInputTensor("updates", RandomTensor({4, 3}, -1, 1, 2));
    scatter.AddAttribute("reduction", std::string(reduction));
    scatter.AddOutputShape("y", DataType::kFloat32, {6, 3});
    scatter.CompareDevices(0, 0);
  }
}

TEST(GatherScatterGpuTest, AnIndexOutOfRangeIsTheCpusError) {
  TRAIND_REQUIRE_GPU();
  OpTester gather("Gather", 13);
  gather.AddInputTensor("data", RandomTensor({5, 4}, -1, 1, 1));
  gather.AddInput<int64_t>("indices", {2}, {0, 5});
  gather.AddOutputShape("y", DataType::kFloat32, {2, 4});
  gather.OnDevice(testing::TestDevice::kGpu);
  auto result = gather.RunRaw();
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(result.status().message().find("out of range"), std::string::npos) << result.status();
}

}  // namespace
}  // namespace traind::engine
