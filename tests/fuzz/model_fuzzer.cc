// Model bytes from a client: the loader (protobuf, limits, the onnx checker, strict shape inference), the compiler
// (kernels' attribute validation, constant folding) and one run under a memory budget.
#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "tests/fuzz/harness.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  traind::fuzz::HarnessLimits limits;
  limits.memory_budget_bytes = int64_t{64} << 20;
  (void)traind::fuzz::LoadCompileAndRun(absl::string_view(reinterpret_cast<const char*>(data), size), limits);
  return 0;
}
