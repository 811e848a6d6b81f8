// The OpenCL headers as the GPU executor uses them (OpenCL 1.2 API: every device of the edge fleets has it) and
// OpenCL errors as absl::Status.
#ifndef TRAIND_ENGINE_GPU_OPENCL_H_
#define TRAIND_ENGINE_GPU_OPENCL_H_

#ifndef CL_TARGET_OPENCL_VERSION
#define CL_TARGET_OPENCL_VERSION 120
#endif
#include <CL/cl.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace traind::engine::gpu {

// "CL_OUT_OF_RESOURCES" for -5, "OpenCL error -1234" for codes it does not know.
const char* ClErrorName(cl_int code);

// OkStatus for CL_SUCCESS, else "<what>: CL_..." with a code that says what happened: ResourceExhausted for the
// out-of-memory errors, FailedPrecondition for a missing platform or device, Internal otherwise.
absl::Status ClStatus(cl_int code, absl::string_view what);

}  // namespace traind::engine::gpu

#define TRAIND_CL_RETURN_IF_ERROR(call, what)                                  \
  do {                                                                         \
    const cl_int traind_cl_code_ = (call);                                     \
    if (traind_cl_code_ != CL_SUCCESS) return ::traind::engine::gpu::ClStatus(traind_cl_code_, what); \
  } while (0)

#endif  // TRAIND_ENGINE_GPU_OPENCL_H_
