// Prepended to every program of the GPU executor (engine/gpu/device.cc): shared index arithmetic.
//
// Broadcasting: a tensor of up to 8 dimensions is addressed by its output coordinates. The host passes the output
// dims innermost first (unused lanes 1) and each input's element strides in the same order (0 where it
// broadcasts), so every kernel decomposes the flat output index the same way.
#define TRAIND_LANE(L)                 \
  {                                    \
    const long c = rem % dims.s##L;    \
    rem /= dims.s##L;                  \
    offset += c * strides.s##L;        \
  }

inline long broadcast_offset(long index, long8 dims, long8 strides) {
  long rem = index, offset = 0;
  TRAIND_LANE(0) TRAIND_LANE(1) TRAIND_LANE(2) TRAIND_LANE(3)
  TRAIND_LANE(4) TRAIND_LANE(5) TRAIND_LANE(6) TRAIND_LANE(7)
  return offset;
}

// Sum of a work group's values (one per item, `scratch` holding a power-of-two group size), returned to every item.
inline float group_sum(float value, __local float* scratch) {
  const int lid = get_local_id(0);
  const int size = get_local_size(0);
  scratch[lid] = value;
  barrier(CLK_LOCAL_MEM_FENCE);
  for (int step = size / 2; step > 0; step /= 2) {
    if (lid < step) scratch[lid] += scratch[lid + step];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float total = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return total;
}

// The taps [*first, *last) of a sliding window's output position `o` along one dim whose input coordinate lies in
// [low, high); tap t reads coordinate o * stride - pad_begin + t * dilation (engine/ops/pool_window.h's TapRange).
inline void tap_range(long o, long stride, long pad_begin, long taps, long dilation, long low, long high,
                      long* first, long* last) {
  const long start = o * stride - pad_begin;
  const long begin_tap = start >= low ? 0 : (low - start + dilation - 1) / dilation;
  const long end_tap = start >= high ? 0 : (high - start + dilation - 1) / dilation;
  *first = min(begin_tap, taps);
  *last = max(min(end_tap, taps), *first);
}

// A 2-D sliding window (1-D ones have height 1), the arguments every pooling and convolution kernel takes.
#define TRAIND_WINDOW_ARGS                                                                                   \
  long height, long width, long out_height, long out_width, long kernel_h, long kernel_w, long stride_h,     \
      long stride_w, long dilation_h, long dilation_w, long pad_h, long pad_w, long pad_end_h, long pad_end_w
