#include "engine/gpu/kernel.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace traind::engine::gpu {

// ---- ClKernel

ClKernel::~ClKernel() {
  if (kernel_ != nullptr) clReleaseKernel(kernel_);
}

ClKernel::ClKernel(ClKernel&& other) noexcept : kernel_(other.kernel_), name_(std::move(other.name_)) {
  other.kernel_ = nullptr;
}

ClKernel& ClKernel::operator=(ClKernel&& other) noexcept {
  if (this != &other) {
    if (kernel_ != nullptr) clReleaseKernel(kernel_);
    kernel_ = other.kernel_;
    name_ = std::move(other.name_);
    other.kernel_ = nullptr;
  }
  return *this;
}

absl::StatusOr<ClKernel> ClKernel::Create(Device& device, absl::string_view file_name, const std::string& name) {
  TRAIND_ASSIGN_OR_RETURN(cl_program program, device.Program(file_name));
  cl_int code = CL_SUCCESS;
  ClKernel kernel;
  kernel.kernel_ = clCreateKernel(program, name.c_str(), &code);
  TRAIND_CL_RETURN_IF_ERROR(code, absl::StrCat("kernel ", name, " of ", file_name));
  kernel.name_ = name;
  return kernel;
}

absl::Status ClKernel::SetArg(cl_uint index, cl_mem value) const {
  return ClStatus(clSetKernelArg(kernel_, index, sizeof(value), &value), absl::StrCat(name_, " argument ", index));
}
absl::Status ClKernel::SetArg(cl_uint index, int32_t value) const {
  const cl_int v = value;
  return ClStatus(clSetKernelArg(kernel_, index, sizeof(v), &v), absl::StrCat(name_, " argument ", index));
}
absl::Status ClKernel::SetArg(cl_uint index, int64_t value) const {
  const cl_long v = value;
  return ClStatus(clSetKernelArg(kernel_, index, sizeof(v), &v), absl::StrCat(name_, " argument ", index));
}
absl::Status ClKernel::SetArg(cl_uint index, float value) const {
  const cl_float v = value;
  return ClStatus(clSetKernelArg(kernel_, index, sizeof(v), &v), absl::StrCat(name_, " argument ", index));
}
absl::Status ClKernel::SetArg(cl_uint index, const cl_long8& value) const {
  return ClStatus(clSetKernelArg(kernel_, index, sizeof(value), &value), absl::StrCat(name_, " argument ", index));
}
absl::Status ClKernel::SetArg(cl_uint index, const LocalMemory& value) const {
  return ClStatus(clSetKernelArg(kernel_, index, value.bytes, nullptr), absl::StrCat(name_, " argument ", index));
}

absl::Status ClKernel::Enqueue(const GpuKernelContext& context, size_t global, size_t local) const {
  return ClStatus(clEnqueueNDRangeKernel(context.queue(), kernel_, 1, nullptr, &global, &local, 0, nullptr, nullptr),
                  absl::StrCat("enqueueing ", name_));
}

// ---- GpuKernelContext

absl::StatusOr<const Tensor*> GpuKernelContext::RequiredInput(int i) const {
  const Tensor* tensor = input(i);
  if (tensor == nullptr) return absl::InvalidArgumentError(absl::StrCat("input ", i, " is required"));
  return tensor;
}

absl::StatusOr<Tensor*> GpuKernelContext::AllocateOutput(int i, DataType dtype, Shape shape) {
  TRAIND_ASSIGN_OR_RETURN(Tensor tensor, stream_.AllocateTensor(dtype, std::move(shape)));
  if (wants_output(i)) {
    *outputs_[i] = std::move(tensor);
    return outputs_[i];
  }
  unwanted_.push_back(std::move(tensor));
  return &unwanted_.back();
}

void GpuKernelContext::SetOutput(int i, Tensor tensor) {
  if (wants_output(i)) *outputs_[i] = std::move(tensor);
}

absl::StatusOr<DeviceMemory> GpuKernelContext::Scratch(size_t bytes) { return stream_.Allocate(bytes); }

// ---- GpuOpRegistry

namespace {
std::string Key(absl::string_view domain, absl::string_view op_type) {
  if (domain == "ai.onnx") domain = "";
  return absl::StrCat(domain, std::string(1, '\0'), op_type);
}
}  // namespace

GpuOpRegistry::GpuOpRegistry(std::vector<GpuOpRegistration> registrations)
    : registrations_(std::move(registrations)) {
  for (size_t i = 0; i < registrations_.size(); ++i) {
    by_name_[Key(registrations_[i].domain, registrations_[i].op_type)].push_back(i);
  }
}

const GpuOpRegistration* GpuOpRegistry::Find(absl::string_view domain, absl::string_view op_type, int opset) const {
  auto it = by_name_.find(Key(domain, op_type));
  if (it == by_name_.end()) return nullptr;
  for (size_t index : it->second) {
    const GpuOpRegistration& registration = registrations_[index];
    if (opset >= registration.first_opset && opset <= registration.last_opset) return &registration;
  }
  return nullptr;
}

}  // namespace traind::engine::gpu
