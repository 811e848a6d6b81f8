// .npy and .npz bytes from a client (trainctl, datasets of training jobs): headers, dtypes, shapes, zip entries.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/string_view.h"
#include "engine/io/npy.h"
#include "engine/io/npz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<traind::engine::Tensor> tensor = traind::engine::ParseNpy(bytes);
  if (tensor.ok()) {
    // What parses round-trips.
    absl::StatusOr<traind::engine::Tensor> again = traind::engine::ParseNpy(traind::engine::SerializeNpy(*tensor));
    if (!again.ok() || again->shape() != tensor->shape() || again->dtype() != tensor->dtype()) std::abort();
  }
  traind::engine::NpzLimits limits;
  limits.max_total_bytes = int64_t{64} << 20;
  (void)traind::engine::ParseNpz(bytes, limits);
  return 0;
}
