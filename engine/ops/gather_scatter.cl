// Gather (any axis) and ScatterND (reduction none / add / mul) on float32 data (gather_scatter.cc). The host checks
// the indices and gives them wrapped to [0, dim), as row offsets for Gather and slice offsets for ScatterND.
__kernel void gather_f32(__global const float* data, __global const long* rows, __global float* output, long n,
                         long count, long axis_dim, long inner) {
  const long i = get_global_id(0);
  if (i >= n) return;
  const long row = i / inner;  // (outer, index) pair
  const long o = row / count;
  output[i] = data[(o * axis_dim + rows[row % count]) * inner + i % inner];
}

// One work item per element of a slice, walking the updates in index order: the same order of writes (and sums)
// as the CPU kernel, so repeated indices give the CPU's answer exactly. `reduction`: 0 none, 1 add, 2 mul.
__kernel void scatter_nd_f32(__global float* output, __global const long* offsets, __global const float* updates,
                             long count, long slice, int reduction) {
  const long j = get_global_id(0);
  if (j >= slice) return;
  for (long t = 0; t < count; ++t) {
    __global float* target = output + offsets[t] + j;
    const float update = updates[t * slice + j];
    *target = reduction == 1 ? *target + update : reduction == 2 ? *target * update : update;
  }
}
