// A forward model from a client, all the way: GenerateArtifacts (autodiff, loss, optimizer model, the artifacts'
// own validation), a Module and Optimizer under a memory budget, training steps and an eval step.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "tests/fuzz/harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  traind::fuzz::HarnessLimits limits;
  limits.memory_budget_bytes = int64_t{64} << 20;
  (void)traind::fuzz::GenerateAndTrain(absl::string_view(reinterpret_cast<const char*>(data), size), limits);
  return 0;
}
