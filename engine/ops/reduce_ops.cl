// Reductions over any set of axes (reduce_ops.cc), float32. The host merges the input's dims into groups that are
// all kept or all reduced and passes both sets innermost first (broadcast_offset, prelude.cl): output o starts at
// offset(o over the kept groups), its r-th reduced element is at offset(r over the reduced groups) from there.
// Small outputs with long reductions use a work group per output, the rest one work item per output.
#define TRAIND_REDUCE(name, INIT, STEP, FINISH)                                                                \
  __kernel void name(__global const float* x, __global float* y, long outputs, long count, long8 kept_dims,   \
                     long8 kept_strides, long8 reduced_dims, long8 reduced_strides) {                         \
    const long o = get_global_id(0);                                                                           \
    if (o >= outputs) return;                                                                                  \
    __global const float* base = x + broadcast_offset(o, kept_dims, kept_strides);                            \
    float acc = INIT;                                                                                          \
    for (long r = 0; r < count; ++r) {                                                                         \
      const float v = base[broadcast_offset(r, reduced_dims, reduced_strides)];                                \
      acc = STEP;                                                                                              \
    }                                                                                                          \
    y[o] = FINISH;                                                                                             \
  }

// The sum family only: a work group per output, its items striding over the reduced elements.
#define TRAIND_REDUCE_GROUP(name, STEP, FINISH)                                                                \
  __kernel void name##_group(__global const float* x, __global float* y, long count, long8 kept_dims,         \
                             long8 kept_strides, long8 reduced_dims, long8 reduced_strides,                   \
                             __local float* scratch) {                                                        \
    const long o = get_group_id(0);                                                                            \
    __global const float* base = x + broadcast_offset(o, kept_dims, kept_strides);                            \
    float acc = 0.0f;                                                                                          \
    for (long r = get_local_id(0); r < count; r += get_local_size(0)) {                                        \
      const float v = base[broadcast_offset(r, reduced_dims, reduced_strides)];                                \
      acc = STEP;                                                                                              \
    }                                                                                                          \
    acc = group_sum(acc, scratch);                                                                             \
    if (get_local_id(0) == 0) y[o] = FINISH;                                                                   \
  }

TRAIND_REDUCE(reduce_sum, 0.0f, acc + v, acc)
TRAIND_REDUCE(reduce_mean, 0.0f, acc + v, acc / (float)count)
TRAIND_REDUCE(reduce_sum_square, 0.0f, acc + v * v, acc)
TRAIND_REDUCE(reduce_l1, 0.0f, acc + (v < 0.0f ? -v : v), acc)
TRAIND_REDUCE(reduce_l2, 0.0f, acc + v * v, sqrt(acc))
// NaN propagates (numpy.max); an empty reduction gives -inf / +inf.
TRAIND_REDUCE(reduce_max, -INFINITY, (v > acc || isnan(v)) ? v : acc, acc)
TRAIND_REDUCE(reduce_min, INFINITY, (v < acc || isnan(v)) ? v : acc, acc)

TRAIND_REDUCE_GROUP(reduce_sum, acc + v, acc)
TRAIND_REDUCE_GROUP(reduce_mean, acc + v, acc / (float)count)
TRAIND_REDUCE_GROUP(reduce_sum_square, acc + v * v, acc)
TRAIND_REDUCE_GROUP(reduce_l1, acc + (v < 0.0f ? -v : v), acc)
TRAIND_REDUCE_GROUP(reduce_l2, acc + v * v, sqrt(acc))
