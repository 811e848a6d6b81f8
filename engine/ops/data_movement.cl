// Kernels shared by the GPU ops that only move elements (gpu_util.h): a gather by a precomputed source index per
// output element (Transpose, Slice, Expand, Tile, Pad), and a copy of row blocks into a wider output (Concat).
// `map[i] < 0` marks an output element that takes `fill` (Pad's constant).
__kernel void gather_by_map(__global const float* input, __global const int* map, __global float* output, long n,
                            float fill) {
  const long i = get_global_id(0);
  if (i < n) {
    const int source = map[i];
    output[i] = source >= 0 ? input[source] : fill;
  }
}

// output[o * output_row + offset + j] = input[o * input_row + j] for j < input_row.
__kernel void copy_rows(__global const float* input, __global float* output, long n, long input_row, long output_row,
                        long offset) {
  const long i = get_global_id(0);
  if (i < n) output[(i / input_row) * output_row + offset + i % input_row] = input[i];
}
