#include <cstdint>
#include <vector>

#include "engine/testing/op_tester.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using testing::OpTester;

TEST(GatherTest, AxisZeroAndOneWithNegativeAndMatrixIndices) {
  // data [3,2]; rows 2, 0 and -1 (= 2).
  OpTester("Gather", 13).AddInput<float>("data", {3, 2}, {1, 2, 3, 4, 5, 6})
      .AddInput<int64_t>("indices", {3}, {2, 0, -1})
      .AddOutput<float>("y", {3, 2}, {5, 6, 1, 2, 5, 6}).Run();
  // axis 1 with int32 [2,2] indices: y[i][a][b] = data[i][idx[a][b]].
  OpTester("Gather", 13).AddAttribute("axis", int64_t{1})
      .AddInput<int16_t>("data", {2, 3}, {0, 1, 2, 10, 11, 12})
      .AddInput<int32_t>("indices", {2, 2}, {2, 0, 1, -3})
      .AddOutput<int16_t>("y", {2, 2, 2}, {2, 0, 1, 0, 12, 10, 11, 10}).Run();
  // Scalar index drops the axis.
  OpTester("Gather", 13).AddInput<int64_t>("data", {3}, {7, 8, 9})
      .AddInput<int64_t>("indices", {}, {1}).AddOutput<int64_t>("y", {}, {8}).Run();
}

TEST(GatherTest, OutOfRangeIndexIsInvalidArgument) {
  for (int64_t bad : {3, -4}) {
    auto result = OpTester("Gather", 13).AddInput<float>("data", {3}, {1, 2, 3})
                      .AddInput<int64_t>("indices", {2}, {0, bad})
                      .AddOutput<float>("y", {2}, {0, 0}).RunRaw();
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  auto float_indices = OpTester("Gather", 13).AddInput<float>("data", {3}, {1, 2, 3})
                           .AddInput<float>("indices", {1}, {0}).AddOutput<float>("y", {1}, {1})
                           .RunRaw();
  EXPECT_EQ(float_indices.status().code(), absl::StatusCode::kInvalidArgument);
  auto bad_axis = OpTester("Gather", 13).AddAttribute("axis", int64_t{2})
                      .AddInput<float>("data", {3}, {1, 2, 3})
                      .AddInput<int64_t>("indices", {1}, {0}).AddOutput<float>("y", {1}, {1})
                      .RunRaw();
  EXPECT_EQ(bad_axis.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GatherTest, LargeGatherRunsInParallelAndMatchesLoop) {
  const int64_t rows = 1000, cols = 70;
  std::vector<float> data(rows * cols);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
  std::vector<int64_t> indices;
  std::vector<float> expected;
  for (int64_t r = rows - 1; r >= 0; r -= 3) {
    indices.push_back(r);
    expected.insert(expected.end(), data.begin() + r * cols, data.begin() + (r + 1) * cols);
  }
  const int64_t n = static_cast<int64_t>(indices.size());
  OpTester("Gather", 13).AddInput<float>("data", {rows, cols}, data)
      .AddInput<int64_t>("indices", {n}, indices)
      .AddOutput<float>("y", {n, cols}, expected).Run();
}

TEST(GatherElementsTest, BothAxesNegativeIndicesAndSmallerIndices) {
  // numpy.take_along_axis(data, idx, axis=1).
  OpTester("GatherElements", 13).AddAttribute("axis", int64_t{1})
      .AddInput<float>("data", {2, 2}, {1, 2, 3, 4})
      .AddInput<int64_t>("indices", {2, 2}, {0, 0, 1, 0})
      .AddOutput<float>("y", {2, 2}, {1, 1, 4, 3}).Run();
  // axis 0, indices [2,3] on data [3,3], with a negative index.
  OpTester("GatherElements", 13).AddAttribute("axis", int64_t{0})
      .AddInput<int32_t>("data", {3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9})
      .AddInput<int32_t>("indices", {2, 3}, {1, 2, 0, 2, 0, -1})
      .AddOutput<int32_t>("y", {2, 3}, {4, 8, 3, 7, 2, 9}).Run();
  // Indices narrower than data in a non-axis dim: y[i][j] = data[i][idx[i][j]] for j < 1.
  OpTester("GatherElements", 13).AddAttribute("axis", int64_t{-1})
      .AddInput<float>("data", {2, 3}, {1, 2, 3, 4, 5, 6})
      .AddInput<int64_t>("indices", {2, 1}, {2, 1})
      .AddOutput<float>("y", {2, 1}, {3, 5}).Run();
}

TEST(GatherElementsTest, BadShapesAndIndices) {
  auto out_of_range = OpTester("GatherElements", 13)
                          .AddInput<float>("data", {2, 2}, {1, 2, 3, 4})
                          .AddInput<int64_t>("indices", {2, 2}, {0, 2, 0, 0})
                          .AddOutput<float>("y", {2, 2}, {0, 0, 0, 0}).RunRaw();
  EXPECT_EQ(out_of_range.status().code(), absl::StatusCode::kInvalidArgument);
  auto wrong_rank = OpTester("GatherElements", 13)
                        .AddInput<float>("data", {2, 2}, {1, 2, 3, 4})
                        .AddInput<int64_t>("indices", {2}, {0, 1})
                        .AddOutput<float>("y", {2}, {0, 0}).RunRaw();
  EXPECT_EQ(wrong_rank.status().code(), absl::StatusCode::kInvalidArgument);
  auto too_wide = OpTester("GatherElements", 13).AddAttribute("axis", int64_t{0})
                      .AddInput<float>("data", {2, 1}, {1, 2})
                      .AddInput<int64_t>("indices", {1, 2}, {0, 0})
                      .AddOutput<float>("y", {1, 2}, {0, 0}).RunRaw();
  EXPECT_EQ(too_wide.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GatherNDTest, ElementsSlicesAndBatchDims) {
  // The spec's examples 1, 2 and 5.
  OpTester("GatherND", 13).AddInput<int32_t>("data", {2, 2}, {0, 1, 2, 3})
      .AddInput<int64_t>("indices", {2, 2}, {0, 0, 1, 1})
      .AddOutput<int32_t>("y", {2}, {0, 3}).Run();
  OpTester("GatherND", 13).AddInput<int32_t>("data", {2, 2}, {0, 1, 2, 3})
      .AddInput<int64_t>("indices", {2, 1}, {1, -2})
      .AddOutput<int32_t>("y", {2, 2}, {2, 3, 0, 1}).Run();
  OpTester("GatherND", 13).AddAttribute("batch_dims", int64_t{1})
      .AddInput<int32_t>("data", {2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7})
      .AddInput<int64_t>("indices", {2, 1}, {1, 0})
      .AddOutput<int32_t>("y", {2, 2}, {2, 3, 4, 5}).Run();
}

TEST(GatherNDTest, BadIndicesAndAttributes) {
  auto out_of_range = OpTester("GatherND", 13).AddInput<float>("data", {2, 2}, {0, 1, 2, 3})
                          .AddInput<int64_t>("indices", {1, 2}, {0, 2})
                          .AddOutput<float>("y", {1}, {0}).RunRaw();
  EXPECT_EQ(out_of_range.status().code(), absl::StatusCode::kInvalidArgument);
  auto too_deep = OpTester("GatherND", 13).AddInput<float>("data", {2}, {0, 1})
                      .AddInput<int64_t>("indices", {1, 2}, {0, 0})
                      .AddOutput<float>("y", {1}, {0}).RunRaw();
  EXPECT_EQ(too_deep.status().code(), absl::StatusCode::kInvalidArgument);
  auto negative_batch = OpTester("GatherND", 13).AddAttribute("batch_dims", int64_t{-1})
                            .AddInput<float>("data", {2}, {0, 1})
                            .AddInput<int64_t>("indices", {1, 1}, {0})
                            .AddOutput<float>("y", {1}, {0}).RunRaw();
  EXPECT_EQ(negative_batch.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ScatterElementsTest, NoneAddMulAndNegativeIndices) {
  // The spec's example 2 (axis 1), with a negative index for 1.
  OpTester("ScatterElements", 16).AddAttribute("axis", int64_t{1})
      .AddInput<float>("data", {1, 5}, {1, 2, 3, 4, 5})
      .AddInput<int64_t>("indices", {1, 2}, {1, -2})
      .AddInput<float>("updates", {1, 2}, {1.1f, 2.1f})
      .AddOutput<float>("y", {1, 5}, {1, 1.1f, 3, 2.1f, 5}).Run();
  // axis 0 (default) with int32 indices.
  OpTester("ScatterElements", 16)
      .AddInput<float>("data", {3, 3}, {0, 0, 0, 0, 0, 0, 0, 0, 0})
      .AddInput<int32_t>("indices", {2, 3}, {1, 0, 2, 0, 2, 1})
      .AddInput<float>("updates", {2, 3}, {1, 1.1f, 1.2f, 2, 2.1f, 2.2f})
      .AddOutput<float>("y", {3, 3}, {2, 1.1f, 0, 1, 0, 2.2f, 0, 2.1f, 1.2f}).Run();
  // Duplicate indices accumulate.
  OpTester("ScatterElements", 16).AddAttribute("axis", int64_t{1})
      .AddAttribute("reduction", std::string("add"))
      .AddInput<int64_t>("data", {1, 3}, {1, 2, 3})
      .AddInput<int64_t>("indices", {1, 3}, {1, 1, 0})
      .AddInput<int64_t>("updates", {1, 3}, {10, 20, 30})
      .AddOutput<int64_t>("y", {1, 3}, {31, 32, 3}).Run();
  OpTester("ScatterElements", 16).AddAttribute("axis", int64_t{1})
      .AddAttribute("reduction", std::string("mul"))
      .AddInput<float>("data", {1, 3}, {1, 2, 3})
      .AddInput<int64_t>("indices", {1, 2}, {2, 2})
      .AddInput<float>("updates", {1, 2}, {2, 5})
      .AddOutput<float>("y", {1, 3}, {1, 2, 30}).Run();
  // The deprecated Scatter (opset 10) is the same op.
  OpTester("Scatter", 10).AddAttribute("axis", int64_t{1})
      .AddInput<float>("data", {1, 3}, {1, 2, 3})
      .AddInput<int64_t>("indices", {1, 1}, {2})
      .AddInput<float>("updates", {1, 1}, {9})
      .AddOutput<float>("y", {1, 3}, {1, 2, 9}).Run();
}

TEST(ScatterElementsTest, BadInputsAndAttributes) {
  auto out_of_range = OpTester("ScatterElements", 16)
                          .AddInput<float>("data", {2}, {1, 2})
                          .AddInput<int64_t>("indices", {1}, {-3})
                          .AddInput<float>("updates", {1}, {5})
                          .AddOutput<float>("y", {2}, {0, 0}).RunRaw();
  EXPECT_EQ(out_of_range.status().code(), absl::StatusCode::kInvalidArgument);
  auto shape_mismatch = OpTester("ScatterElements", 16)
                            .AddInput<float>("data", {2}, {1, 2})
                            .AddInput<int64_t>("indices", {1}, {0})
                            .AddInput<float>("updates", {2}, {5, 6})
                            .AddOutput<float>("y", {2}, {0, 0}).RunRaw();
  EXPECT_EQ(shape_mismatch.status().code(), absl::StatusCode::kInvalidArgument);
  auto bad_reduction = OpTester("ScatterElements", 16)
                           .AddAttribute("reduction", std::string("sum"))
                           .AddInput<float>("data", {2}, {1, 2})
                           .AddInput<int64_t>("indices", {1}, {0})
                           .AddInput<float>("updates", {1}, {5})
                           .AddOutput<float>("y", {2}, {0, 0}).RunRaw();
  EXPECT_EQ(bad_reduction.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad_reduction.status().message().find("reduction"), std::string::npos);
}

TEST(ScatterNDTest, AddsLongRowsInIndexOrder) {
  // An embedding's gradient: rows of 37 (vector loop and tail) added into a table, indices repeated.
  constexpr int64_t kRows = 5, kWidth = 37;
  const std::vector<int64_t> indices = {3, 0, 3, 4, 3, 0};
  std::vector<float> data(kRows * kWidth), updates(indices.size() * kWidth);
  for (size_t i = 0; i < data.size(); ++i) data[i] = 0.25f * static_cast<float>(i % 11);
  for (size_t i = 0; i < updates.size(); ++i) updates[i] = 1.0f + 0.125f * static_cast<float>(i % 13);
  std::vector<float> expected = data;
  for (size_t t = 0; t < indices.size(); ++t) {
    for (int64_t j = 0; j < kWidth; ++j) expected[indices[t] * kWidth + j] += updates[t * kWidth + j];
  }
  OpTester("ScatterND", 16).AddAttribute("reduction", std::string("add"))
      .AddInput<float>("data", {kRows, kWidth}, data)
      .AddInput<int64_t>("indices", {static_cast<int64_t>(indices.size()), 1}, indices)
      .AddInput<float>("updates", {static_cast<int64_t>(indices.size()), kWidth}, updates)
      .AddOutput<float>("y", {kRows, kWidth}, expected)
      .SetTolerance(0, 0)
      .Run();
}

TEST(ScatterNDTest, SlicesReductionsAndErrors) {
  // The spec's example 1 and the add / mul variants of it.
  OpTester("ScatterND", 16).AddInput<float>("data", {8}, {1, 2, 3, 4, 5, 6, 7, 8})
      .AddInput<int64_t>("indices", {4, 1}, {4, 3, 1, 7})
      .AddInput<float>("updates", {4}, {9, 10, 11, 12})
      .AddOutput<float>("y", {8}, {1, 11, 3, 10, 9, 6, 7, 12}).Run();
  OpTester("ScatterND", 16).AddAttribute("reduction", std::string("add"))
      .AddInput<float>("data", {4}, {1, 2, 3, 4})
      .AddInput<int64_t>("indices", {3, 1}, {0, 0, -1})
      .AddInput<float>("updates", {3}, {10, 20, 30})
      .AddOutput<float>("y", {4}, {31, 2, 3, 34}).Run();
  // Row slices of a matrix, multiplied.
  OpTester("ScatterND", 16).AddAttribute("reduction", std::string("mul"))
      .AddInput<int32_t>("data", {2, 2}, {1, 2, 3, 4})
      .AddInput<int32_t>("indices", {1, 1}, {1})
      .AddInput<int32_t>("updates", {1, 2}, {10, 100})
      .AddOutput<int32_t>("y", {2, 2}, {1, 2, 30, 400}).Run();
  auto out_of_range = OpTester("ScatterND", 16).AddInput<float>("data", {2}, {1, 2})
                          .AddInput<int64_t>("indices", {1, 1}, {2})
                          .AddInput<float>("updates", {1}, {5})
                          .AddOutput<float>("y", {2}, {0, 0}).RunRaw();
  EXPECT_EQ(out_of_range.status().code(), absl::StatusCode::kInvalidArgument);
  auto bad_updates = OpTester("ScatterND", 16).AddInput<float>("data", {2, 2}, {1, 2, 3, 4})
                         .AddInput<int64_t>("indices", {1, 1}, {0})
                         .AddInput<float>("updates", {1, 3}, {5, 6, 7})
                         .AddOutput<float>("y", {2, 2}, {0, 0, 0, 0}).RunRaw();
  EXPECT_EQ(bad_updates.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace traind::engine
