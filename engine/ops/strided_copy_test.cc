// CopyStridedView against the definition (an element-by-element gather) on every loop it has: row copies, square
// tiles (a Transpose that moves the last axis, sizes that are and are not multiples of the tile), and the
// element gather; negative strides (Slice with negative steps); 1, 2 and 4 threads.
#include "engine/ops/strided_copy.h"

#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace traind::engine {
namespace {

template <typename T>
std::vector<T> Reference(const std::vector<T>& in, int64_t base, const Shape& shape,
                         const std::vector<int64_t>& strides) {
  const int64_t count = DimProduct(shape, 0, shape.size());
  std::vector<T> out(count);
  for (int64_t i = 0; i < count; ++i) {
    int64_t rest = i, offset = base;
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      offset += (rest % shape[d]) * strides[d];
      rest /= shape[d];
    }
    out[i] = in[offset];
  }
  return out;
}

// The strides of `perm` applied to a contiguous tensor of `in_shape`, and the permuted shape.
void Permuted(const Shape& in_shape, const std::vector<int64_t>& perm, Shape& out_shape,
              std::vector<int64_t>& strides) {
  std::vector<int64_t> in_strides(in_shape.size(), 1);
  for (int64_t d = static_cast<int64_t>(in_shape.size()) - 2; d >= 0; --d) {
    in_strides[d] = in_strides[d + 1] * in_shape[d + 1];
  }
  out_shape.clear();
  strides.clear();
  for (int64_t p : perm) {
    out_shape.push_back(in_shape[p]);
    strides.push_back(in_strides[p]);
  }
}

template <typename T>
void ExpectTransposeMatches(const Shape& in_shape, const std::vector<int64_t>& perm, int threads) {
  const int64_t count = DimProduct(in_shape, 0, in_shape.size());
  std::vector<T> in(count);
  for (int64_t i = 0; i < count; ++i) in[i] = static_cast<T>(i * 7 + 3);
  Shape out_shape;
  std::vector<int64_t> strides;
  Permuted(in_shape, perm, out_shape, strides);
  std::vector<T> out(count, T{0});
  ThreadPool pool(threads);
  CopyStridedView(in.data(), out_shape, strides, out.data(), pool);
  EXPECT_EQ(out, Reference(in, 0, out_shape, strides))
      << "shape " << ::testing::PrintToString(in_shape) << " perm " << ::testing::PrintToString(perm)
      << " threads " << threads;
}

TEST(StridedCopyTest, TransposesEqualTheGatherOnEveryLoop) {
  for (int threads : {1, 2, 4}) {
    // Weights (the tiled loop), square and ragged against the 16-float tile.
    ExpectTransposeMatches<float>({512, 128}, {1, 0}, threads);
    ExpectTransposeMatches<float>({37, 53}, {1, 0}, threads);
    ExpectTransposeMatches<float>({1, 300}, {1, 0}, threads);  // a size-1 dim: a plain copy once dropped
    // Attention heads: the last axis kept (row copies) and moved (tiles with planes around them).
    ExpectTransposeMatches<float>({16, 64, 4, 32}, {0, 2, 1, 3}, threads);
    ExpectTransposeMatches<float>({16, 4, 64, 32}, {0, 2, 1, 3}, threads);
    ExpectTransposeMatches<float>({3, 4, 17, 19}, {0, 1, 3, 2}, threads);
    ExpectTransposeMatches<float>({5, 64, 4, 32}, {0, 2, 3, 1}, threads);
    ExpectTransposeMatches<float>({2, 3, 5, 7, 11}, {4, 2, 0, 3, 1}, threads);
    ExpectTransposeMatches<float>({32, 16, 9, 9}, {0, 2, 3, 1}, threads);  // NCHW -> NHWC
    // Dims the input walks contiguously merge (the last two stay together): row copies of 77.
    ExpectTransposeMatches<float>({6, 7, 11}, {0, 1, 2}, threads);
    ExpectTransposeMatches<float>({6, 7, 11}, {2, 0, 1}, threads);
    // Other element sizes use other tiles.
    ExpectTransposeMatches<uint8_t>({70, 90}, {1, 0}, threads);
    ExpectTransposeMatches<uint16_t>({3, 40, 33}, {2, 1, 0}, threads);
    ExpectTransposeMatches<uint64_t>({9, 13, 2}, {1, 2, 0}, threads);
  }
}

TEST(StridedCopyTest, SteppedAndNegativeViewsEqualTheGather) {
  std::vector<float> in(10 * 12 * 14);
  std::iota(in.begin(), in.end(), 0.0f);
  struct View {
    int64_t base;
    Shape shape;
    std::vector<int64_t> strides;
  };
  const std::vector<View> views = {
      {0, {10, 12, 14}, {168, 14, 1}},                      // whole
      {14 + 1, {4, 5, 6}, {336, 28, 2}},                    // every second element on each axis: the gather
      {9 * 168 + 11 * 14 + 13, {10, 12, 14}, {-168, -14, -1}},  // every axis reversed
      {13, {10, 12, 14}, {168, 14, -1}},                    // the last axis reversed
      {0, {14, 10}, {1, 168}},                              // a transposed plane: the tiled loop
      {13, {7, 10}, {-2, 168}},                             // stepped along the moved axis: the gather
  };
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (const View& view : views) {
      std::vector<float> out(DimProduct(view.shape, 0, view.shape.size()), -1.0f);
      CopyStridedView(in.data() + view.base, view.shape, view.strides, out.data(), pool);
      EXPECT_EQ(out, Reference(in, view.base, view.shape, view.strides))
          << "shape " << ::testing::PrintToString(view.shape) << " strides "
          << ::testing::PrintToString(view.strides);
    }
  }
}

}  // namespace
}  // namespace traind::engine
