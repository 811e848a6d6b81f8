// A client's ONNX loss graph (GenerateArtifacts' kOnnxGraph path: opset conversion, merging, differentiation)
// over a fixed small forward model, then training steps.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "tests/fuzz/harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  traind::fuzz::HarnessLimits limits;
  limits.memory_budget_bytes = int64_t{64} << 20;
  (void)traind::fuzz::TrainWithLossGraph(absl::string_view(reinterpret_cast<const char*>(data), size), limits);
  return 0;
}
