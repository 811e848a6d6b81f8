#include "engine/ops/broadcast.h"

#include <algorithm>

#include "engine/core/status_macros.h"

namespace traind::engine {

absl::StatusOr<BroadcastPlan> BroadcastPlan::Make(absl::Span<const Shape* const> input_shapes) {
  BroadcastPlan plan;
  TRAIND_ASSIGN_OR_RETURN(plan.output_shape_, BroadcastShapes(input_shapes));
  TRAIND_ASSIGN_OR_RETURN(plan.output_size_, ElementCount(plan.output_shape_));
  plan.num_inputs_ = input_shapes.size();
  const size_t rank = plan.output_shape_.size();
  const size_t num_inputs = input_shapes.size();

  // Collapse: drop output dims of size 1; merge a dim into the previous one when every input
  // "follows" (dim equals output dim) or "broadcasts" both of them alike.
  Shape dims;
  std::vector<std::vector<bool>> follows;  // follows[d][k]
  for (size_t d = 0; d < rank; ++d) {
    const int64_t out_dim = plan.output_shape_[d];
    if (out_dim == 1) continue;
    std::vector<bool> pattern(num_inputs);
    for (size_t k = 0; k < num_inputs; ++k) {
      const Shape& shape = *input_shapes[k];
      const size_t offset = rank - shape.size();
      pattern[k] = d >= offset && shape[d - offset] == out_dim;
    }
    if (!dims.empty() && follows.back() == pattern) {
      dims.back() *= out_dim;  // Bounded by output_size_, which ElementCount validated.
    } else {
      dims.push_back(out_dim);
      follows.push_back(std::move(pattern));
    }
  }
  if (dims.empty()) {  // Scalar output (or all dims 1).
    dims.push_back(1);
    follows.emplace_back(num_inputs, true);
  }

  // Element strides per input along the collapsed dims (0 where it broadcasts).
  const size_t collapsed_rank = dims.size();
  std::vector<int64_t> strides(num_inputs * collapsed_rank);
  for (size_t k = 0; k < num_inputs; ++k) {
    int64_t stride = 1;
    for (size_t d = collapsed_rank; d-- > 0;) {
      strides[k * collapsed_rank + d] = follows[d][k] ? stride : 0;
      if (follows[d][k]) stride *= dims[d];
    }
  }
  plan.row_length_ = dims.back();
  plan.num_rows_ = plan.output_size_ == 0 ? 0 : plan.output_size_ / plan.row_length_;
  plan.outer_dims_.assign(dims.begin(), dims.end() - 1);
  const size_t outer_rank = plan.outer_dims_.size();
  plan.outer_strides_.resize(num_inputs * outer_rank);
  plan.inner_strides_.resize(num_inputs);
  for (size_t k = 0; k < num_inputs; ++k) {
    for (size_t d = 0; d < outer_rank; ++d) {
      plan.outer_strides_[k * outer_rank + d] = strides[k * collapsed_rank + d];
    }
    plan.inner_strides_[k] = strides[k * collapsed_rank + collapsed_rank - 1] != 0 ? 1 : 0;
  }
  return plan;
}

void BroadcastPlan::RowOffsets(int64_t row, int64_t* offsets) const {
  const size_t outer_rank = outer_dims_.size();
  std::fill(offsets, offsets + num_inputs_, 0);
  for (size_t d = outer_rank; d-- > 0;) {
    const int64_t index = row % outer_dims_[d];
    row /= outer_dims_[d];
    for (size_t k = 0; k < num_inputs_; ++k) offsets[k] += index * outer_strides_[k * outer_rank + d];
  }
}

}  // namespace traind::engine
