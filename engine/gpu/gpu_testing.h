// Test support for the GPU executor. Tests that need an OpenCL device call TRAIND_REQUIRE_GPU() first: where no
// OpenCL platform exists (no GPU driver, no pocl) they are skipped with the reason, never failed.
#ifndef TRAIND_ENGINE_GPU_GPU_TESTING_H_
#define TRAIND_ENGINE_GPU_GPU_TESTING_H_

#include <memory>
#include <string>

#include "engine/gpu/device.h"
#include "gtest/gtest.h"

namespace traind::engine::gpu::testing {

// The device tests run on: $TRAIND_TEST_GPU_DEVICE (an index of ListDevices()), else 0. Null, with `why` set, when
// there is none.
std::shared_ptr<Device> TestDevice(std::string* why = nullptr);

}  // namespace traind::engine::gpu::testing

#define TRAIND_REQUIRE_GPU()                                                              \
  do {                                                                                    \
    std::string traind_no_gpu_;                                                           \
    if (::traind::engine::gpu::testing::TestDevice(&traind_no_gpu_) == nullptr) {        \
      GTEST_SKIP() << "no OpenCL device, GPU executor not tested here: " << traind_no_gpu_; \
    }                                                                                     \
  } while (0)

#endif  // TRAIND_ENGINE_GPU_GPU_TESTING_H_
