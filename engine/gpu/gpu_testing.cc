#include "engine/gpu/gpu_testing.h"

#include <unistd.h>

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace traind::engine::gpu::testing {
namespace {

// Bazel runs tests with HOME empty, where pocl would put its compiled-kernel cache under /.cache: give it one
// place per user shared by every test process instead, so each kernel compiles once per machine, not per test.
const bool kPoclCacheSet = [] {
  const char* home = std::getenv("HOME");
  if (std::getenv("POCL_CACHE_DIR") == nullptr && (home == nullptr || home[0] != '/')) {
    setenv("POCL_CACHE_DIR", absl::StrCat("/tmp/traind-test-pocl-cache-", getuid()).c_str(), 0);
  }
  return true;
}();

}  // namespace

std::shared_ptr<Device> TestDevice(std::string* why) {
  int index = 0;
  if (const char* chosen = std::getenv("TRAIND_TEST_GPU_DEVICE"); chosen != nullptr) {
    if (!absl::SimpleAtoi(chosen, &index)) index = -1;
  }
  absl::StatusOr<std::shared_ptr<Device>> device = Device::Get(index);
  if (!device.ok()) {
    if (why != nullptr) *why = std::string(device.status().message());
    return nullptr;
  }
  return *device;
}

}  // namespace traind::engine::gpu::testing
