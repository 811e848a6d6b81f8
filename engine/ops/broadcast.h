// Numpy broadcasting shared by all elementwise ops with several inputs (Add ... Where).
//
// BroadcastPlan collapses the output shape into as few dims as possible (adjacent dims merge when
// every input broadcasts them the same way) and splits it into "rows": the innermost collapsed
// dim, along which each input either advances by one element (stride 1) or stays put (stride 0).
// Kernels then run a plain inner loop per row, which the compiler vectorises; same-shape inputs
// collapse to a single row, so they get one contiguous loop.
#ifndef TRAIND_ENGINE_OPS_BROADCAST_H_
#define TRAIND_ENGINE_OPS_BROADCAST_H_

#include <cstdint>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/core/shape.h"
#include "engine/core/thread_pool.h"

namespace traind::engine {

class BroadcastPlan {
 public:
  static absl::StatusOr<BroadcastPlan> Make(absl::Span<const Shape* const> input_shapes);

  const Shape& output_shape() const { return output_shape_; }
  int64_t output_size() const { return output_size_; }
  int64_t row_length() const { return row_length_; }
  int64_t num_rows() const { return num_rows_; }
  // 0 or 1: how input k advances along a row.
  int64_t inner_stride(size_t input) const { return inner_strides_[input]; }

  // Calls fn(row_begin_offset_in_output, input_offsets (one per input), length) for every row,
  // split across threads when the output is large. Work is chunked by rows; a single huge row is
  // split into pieces as well.
  template <typename Fn>
  void ForEachRow(ThreadPool& threads, Fn&& fn) const;

 private:
  // Offsets of each input at the start of output row `row`.
  void RowOffsets(int64_t row, int64_t* offsets) const;

  Shape output_shape_;
  int64_t output_size_ = 0;
  int64_t row_length_ = 1;
  int64_t num_rows_ = 0;
  size_t num_inputs_ = 0;
  Shape outer_dims_;  // Collapsed dims except the innermost.
  // outer_strides_[k * outer_dims_.size() + d]: element stride of input k along outer dim d.
  std::vector<int64_t> outer_strides_;
  absl::InlinedVector<int64_t, 4> inner_strides_;
};

template <typename Fn>
void BroadcastPlan::ForEachRow(ThreadPool& threads, Fn&& fn) const {
  if (output_size_ == 0) return;
  if (num_rows_ == 1) {
    // One contiguous row (same shapes, or scalars): split it into element ranges.
    threads.ParallelFor(row_length_, kParallelElementThreshold, [&](int64_t begin, int64_t end) {
      absl::InlinedVector<int64_t, 4> offsets(num_inputs_);
      for (size_t k = 0; k < num_inputs_; ++k) offsets[k] = begin * inner_strides_[k];
      fn(begin, offsets.data(), end - begin);
    });
    return;
  }
  const int64_t rows_per_chunk = std::max<int64_t>(1, kParallelElementThreshold / row_length_);
  threads.ParallelFor(num_rows_, rows_per_chunk, [&](int64_t begin, int64_t end) {
    absl::InlinedVector<int64_t, 4> offsets(num_inputs_);
    for (int64_t row = begin; row < end; ++row) {
      RowOffsets(row, offsets.data());
      fn(row * row_length_, offsets.data(), row_length_);
    }
  });
}

// out[i] = op(a[i], b[i]) over one row, with the two inputs' strides fixed to 0 or 1. Each case
// is its own loop so that each vectorises.
template <typename A, typename B, typename Out, typename Op>
inline void BinaryRow(const A* a, int64_t a_stride, const B* b, int64_t b_stride, Out* out,
                      int64_t n, Op op) {
  if (a_stride == 1 && b_stride == 1) {
    for (int64_t i = 0; i < n; ++i) out[i] = op(a[i], b[i]);
  } else if (a_stride == 1) {
    const B b0 = *b;
    for (int64_t i = 0; i < n; ++i) out[i] = op(a[i], b0);
  } else if (b_stride == 1) {
    const A a0 = *a;
    for (int64_t i = 0; i < n; ++i) out[i] = op(a0, b[i]);
  } else {
    const Out value = op(*a, *b);
    for (int64_t i = 0; i < n; ++i) out[i] = value;
  }
}

// Broadcasting binary elementwise: out = op(a, b) over plan (built from {a.shape, b.shape}).
template <typename A, typename B, typename Out, typename Op>
void BinaryBroadcast(const BroadcastPlan& plan, const A* a, const B* b, Out* out,
                     ThreadPool& threads, Op op) {
  const int64_t a_stride = plan.inner_stride(0);
  const int64_t b_stride = plan.inner_stride(1);
  plan.ForEachRow(threads, [&](int64_t out_offset, const int64_t* offsets, int64_t n) {
    BinaryRow(a + offsets[0], a_stride, b + offsets[1], b_stride, out + out_offset, n, op);
  });
}

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_BROADCAST_H_
