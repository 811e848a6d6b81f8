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
  for (int half = size / 2; half > 0; half /= 2) {
    if (lid < half) scratch[lid] += scratch[lid + half];
    barrier(CLK_LOCAL_MEM_FENCE);
  }
  const float total = scratch[0];
  barrier(CLK_LOCAL_MEM_FENCE);
  return total;
}
