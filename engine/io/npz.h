// NumPy .npz archives (numpy.savez / savez_compressed: a zip of .npy files) as named engine tensors: how datasets
// reach training jobs. The archive comes from clients, so it is parsed as hostile: every offset and size is checked
// against the bytes there are, entries and sizes are bounded before anything is allocated, deflated entries are
// inflated into buffers of their declared size only, and every entry's CRC-32 is verified.
#ifndef TRAIND_ENGINE_IO_NPZ_H_
#define TRAIND_ENGINE_IO_NPZ_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/tensor.h"

namespace traind::engine {

struct NpzLimits {
  int64_t max_entries = 1024;
  int64_t max_total_bytes = int64_t{16} << 30;  // sum of the uncompressed entries
};

// Array name (the entry's name without ".npy") -> tensor. Stored and deflated entries, zip64 included.
// kInvalidArgument naming the entry for anything malformed; kResourceExhausted beyond `limits`.
absl::StatusOr<std::map<std::string, Tensor>> ParseNpz(absl::string_view bytes, const NpzLimits& limits = {},
                                                       absl::string_view name_for_errors = "npz");

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_IO_NPZ_H_
