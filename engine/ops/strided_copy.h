// Copies a strided view of a tensor into a contiguous output: the shared inner loop of Transpose (a permuted
// view) and Slice (a stepped view).
#ifndef TRAIND_ENGINE_OPS_STRIDED_COPY_H_
#define TRAIND_ENGINE_OPS_STRIDED_COPY_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "absl/types/span.h"
#include "engine/core/shape.h"
#include "engine/core/thread_pool.h"

namespace traind::engine {

namespace strided_copy_internal {

// The view with size-1 dims dropped and adjacent dims merged where the input walks them contiguously
// (strides[d] == strides[d + 1] * shape[d + 1]): the same copy over the fewest dims. Rank >= 1 afterwards.
inline void Simplify(const Shape& out_shape, absl::Span<const int64_t> strides, Shape& shape,
                     std::vector<int64_t>& view_strides) {
  for (size_t d = 0; d < out_shape.size(); ++d) {
    if (out_shape[d] == 1) continue;
    if (!shape.empty() && view_strides.back() == strides[d] * out_shape[d]) {
      shape.back() *= out_shape[d];
      view_strides.back() = strides[d];
      continue;
    }
    shape.push_back(out_shape[d]);
    view_strides.push_back(strides[d]);
  }
  if (shape.empty()) {
    shape.push_back(1);
    view_strides.push_back(1);
  }
}

// Input offset of the element at `index` (an output index over `shape`, all dims).
inline int64_t OffsetOf(const Shape& shape, const std::vector<int64_t>& strides, int64_t index,
                        std::vector<int64_t>& counter) {
  int64_t offset = 0;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    counter[d] = index % shape[d];
    offset += counter[d] * strides[d];
    index /= shape[d];
  }
  return offset;
}

// Steps the odometer `counter` over dims [0, last) of `shape` by one, keeping `offset` in step.
inline void Advance(const Shape& shape, const std::vector<int64_t>& strides, int64_t last,
                    std::vector<int64_t>& counter, int64_t& offset) {
  for (int64_t d = last - 1; d >= 0; --d) {
    offset += strides[d];
    if (++counter[d] < shape[d]) return;
    offset -= counter[d] * strides[d];
    counter[d] = 0;
  }
}

#if defined(__AVX2__)
// dst[j * dst_stride + i] = src[i * src_stride + j] for an 8 x 8 block of 4-byte elements, in registers (moved
// as float bit patterns: shuffles never change them).
inline void Transpose8x8(const void* src_block, int64_t src_stride, void* dst_block, int64_t dst_stride) {
  const float* src = static_cast<const float*>(src_block);
  float* dst = static_cast<float*>(dst_block);
  __m256 r[8];
  for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(src + i * src_stride);
  const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  const __m256 u7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  _mm256_storeu_ps(dst + 0 * dst_stride, _mm256_permute2f128_ps(u0, u4, 0x20));
  _mm256_storeu_ps(dst + 1 * dst_stride, _mm256_permute2f128_ps(u1, u5, 0x20));
  _mm256_storeu_ps(dst + 2 * dst_stride, _mm256_permute2f128_ps(u2, u6, 0x20));
  _mm256_storeu_ps(dst + 3 * dst_stride, _mm256_permute2f128_ps(u3, u7, 0x20));
  _mm256_storeu_ps(dst + 4 * dst_stride, _mm256_permute2f128_ps(u0, u4, 0x31));
  _mm256_storeu_ps(dst + 5 * dst_stride, _mm256_permute2f128_ps(u1, u5, 0x31));
  _mm256_storeu_ps(dst + 6 * dst_stride, _mm256_permute2f128_ps(u2, u6, 0x31));
  _mm256_storeu_ps(dst + 7 * dst_stride, _mm256_permute2f128_ps(u3, u7, 0x31));
}
#endif

}  // namespace strided_copy_internal

// out[i_0, ..., i_{r-1}] = in[sum_d i_d * strides[d]], strides in elements (negative ones allowed).
// Preconditions: rank >= 1, strides.size() == rank, every addressed input element exists, out has
// ElementCount(out_shape) > 0 elements.
//
// Three loops, after dropping size-1 dims and merging dims the input walks contiguously:
// - the last dim contiguous in the input (Slice, a Transpose that keeps the last axis): row copies;
// - some other dim contiguous in the input (a Transpose that moves the last axis: weights, attention scores):
//   square tiles of that dim x the last, so reads and writes both run along cache lines, 8 x 8 blocks of 4-byte
//   elements transposed in AVX2 registers. A plain gather reads a new line per element: a 512 x 128 float
//   weight took 106 us, now 27 us (1 thread); [16, 4, 64, 64] with the last two swapped 170 -> 63 us (2 threads);
// - neither (Slice with steps on every dim): an element gather.
// The odometer walks indices incrementally: a divide per dim per row cost more than copying 32-float rows.
template <typename T>
void CopyStridedView(const T* in, const Shape& out_shape, absl::Span<const int64_t> strides, T* out,
                     ThreadPool& threads) {
  using namespace strided_copy_internal;
  Shape shape;
  std::vector<int64_t> view;
  Simplify(out_shape, strides, shape, view);
  const int64_t rank = static_cast<int64_t>(shape.size());
  const int64_t row = shape[rank - 1];
  const int64_t row_stride = view[rank - 1];
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < rank; ++d) rows *= shape[d];

  int64_t unit_dim = -1;  // A dim before the last that the input walks contiguously.
  if (row_stride != 1) {
    for (int64_t d = rank - 2; d >= 0; --d) {
      if (view[d] == 1) {
        unit_dim = d;
        break;
      }
    }
  }
  if (unit_dim < 0) {
    threads.ParallelFor(rows, std::max<int64_t>(1, kParallelElementThreshold / row), [&](int64_t begin, int64_t end) {
      std::vector<int64_t> counter(rank, 0);
      int64_t offset = OffsetOf(shape, view, begin * row, counter);
      for (int64_t r = begin; r < end; ++r) {
        const T* src = in + offset;
        T* dst = out + r * row;
        if (row_stride == 1) {
          std::copy(src, src + row, dst);
        } else {
          for (int64_t i = 0; i < row; ++i) dst[i] = src[i * row_stride];
        }
        Advance(shape, view, rank - 1, counter, offset);
      }
    });
    return;
  }

  // Tiled: move the unit dim next to the last one (the "planes" are every other dim) and copy kTile x kTile
  // tiles of [unit dim, last dim]: a tile reads kTile input runs of kTile elements and writes kTile output runs.
  constexpr int64_t kTile = 64 / sizeof(T) >= 8 ? 64 / sizeof(T) : 8;
  const int64_t height = shape[unit_dim];
  std::vector<int64_t> out_strides(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d) out_strides[d] = out_strides[d + 1] * shape[d + 1];
  const int64_t height_out_stride = out_strides[unit_dim];
  Shape plane_shape;
  std::vector<int64_t> plane_in, plane_out;
  for (int64_t d = 0; d + 1 < rank; ++d) {
    if (d == unit_dim) continue;
    plane_shape.push_back(shape[d]);
    plane_in.push_back(view[d]);
    plane_out.push_back(out_strides[d]);
  }
  if (plane_shape.empty()) {
    plane_shape.push_back(1);
    plane_in.push_back(0);
    plane_out.push_back(0);
  }
  const int64_t planes = DimProduct(plane_shape, 0, plane_shape.size());
  const int64_t tile_rows = (height + kTile - 1) / kTile, tile_cols = (row + kTile - 1) / kTile;
  const int64_t tiles = planes * tile_rows * tile_cols;
  const int64_t plane_rank = static_cast<int64_t>(plane_shape.size());
  threads.ParallelFor(tiles, std::max<int64_t>(1, kParallelElementThreshold / (kTile * kTile)),
                      [&](int64_t begin, int64_t end) {
    std::vector<int64_t> counter(plane_rank, 0);
    int64_t plane = begin / (tile_rows * tile_cols);
    int64_t in_base = 0, out_base = 0;
    {
      int64_t rest = plane;
      for (int64_t d = plane_rank - 1; d >= 0; --d) {
        counter[d] = rest % plane_shape[d];
        in_base += counter[d] * plane_in[d];
        out_base += counter[d] * plane_out[d];
        rest /= plane_shape[d];
      }
    }
    for (int64_t t = begin; t < end; ++t) {
      const int64_t within = t % (tile_rows * tile_cols);
      if (within == 0 && t != begin) {  // the next plane
        for (int64_t d = plane_rank - 1; d >= 0; --d) {
          in_base += plane_in[d];
          out_base += plane_out[d];
          if (++counter[d] < plane_shape[d]) break;
          in_base -= counter[d] * plane_in[d];
          out_base -= counter[d] * plane_out[d];
          counter[d] = 0;
        }
      }
      const int64_t h0 = (within / tile_cols) * kTile, w0 = (within % tile_cols) * kTile;
      const int64_t tile_height = std::min(height - h0, kTile), tile_width = std::min(row - w0, kTile);
      // Through a tile in L1: contiguous input runs in, contiguous output runs out, the transposition between
      // them in registers and L1 (straight strided loops missed a cache line per element on one side).
      const T* src = in + in_base + h0 + w0 * row_stride;
      T* dst = out + out_base + h0 * height_out_stride + w0;
#if defined(__AVX2__)
      if constexpr (sizeof(T) == 4) {
        if (tile_height % 8 == 0 && tile_width % 8 == 0) {
          for (int64_t h = 0; h < tile_height; h += 8) {
            for (int64_t w = 0; w < tile_width; w += 8) {
              Transpose8x8(src + w * row_stride + h, row_stride, dst + h * height_out_stride + w,
                           height_out_stride);
            }
          }
          continue;
        }
      }
#endif
      T tile[kTile][kTile];
      for (int64_t w = 0; w < tile_width; ++w) {
        for (int64_t h = 0; h < tile_height; ++h) tile[w][h] = src[w * row_stride + h];
      }
      for (int64_t h = 0; h < tile_height; ++h) {
        for (int64_t w = 0; w < tile_width; ++w) dst[h * height_out_stride + w] = tile[w][h];
      }
    }
  });
}

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_STRIDED_COPY_H_
