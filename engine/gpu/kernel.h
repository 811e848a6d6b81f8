// The GPU kernel interface, beside the CPU one (engine/runtime/kernel.h). A GPU kernel is created once per node
// when the GPU executor places the node (it may refuse: the node then runs on the CPU) and computes on every run
// through a GpuKernelContext, whose inputs and outputs are tensors on the device. Its OpenCL C code lives in a
// `.cl` file beside the op it implements (engine/ops/<op>.cl), embedded into the binary (cl_sources.bzl).
//
//   absl::StatusOr<std::unique_ptr<GpuKernel>> CreateReluGpuKernel(const GpuKernelInit& init) {
//     if (init.input_dtype(0) != DataType::kFloat32) return init.Unsupported("float32 only");
//     TRAIND_ASSIGN_OR_RETURN(ClKernel kernel, init.Kernel("unary_ops.cl", "relu"));
//     return std::make_unique<ReluGpuKernel>(std::move(kernel));
//   }
//   absl::Status ReluGpuKernel::Compute(GpuKernelContext& context) const {
//     const Tensor& x = *context.input(0);
//     TRAIND_ASSIGN_OR_RETURN(Tensor* y, context.AllocateOutput(0, x.dtype(), x.shape()));
//     return kernel_.Launch1D(context, x.num_elements(), context.mem(x), context.mem(*y), x.num_elements());
//   }
#ifndef TRAIND_ENGINE_GPU_KERNEL_H_
#define TRAIND_ENGINE_GPU_KERNEL_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/core/tensor.h"
#include "engine/gpu/device.h"
#include "engine/gpu/opencl.h"
#include "engine/gpu/stream.h"
#include "engine/runtime/kernel.h"

namespace traind::engine::gpu {

class GpuKernelContext;

// __local memory of `bytes` for one kernel argument.
struct LocalMemory {
  size_t bytes;
};

// One kernel function of a compiled program. Each GPU kernel object owns its own (OpenCL kernel arguments belong to
// the cl_kernel, and an executor runs one node at a time). Move-only.
class ClKernel {
 public:
  ClKernel() = default;
  ~ClKernel();
  ClKernel(ClKernel&& other) noexcept;
  ClKernel& operator=(ClKernel&& other) noexcept;
  ClKernel(const ClKernel&) = delete;
  ClKernel& operator=(const ClKernel&) = delete;

  // `name` from the program of the embedded source `file_name`, built for `device` if it is not yet.
  static absl::StatusOr<ClKernel> Create(Device& device, absl::string_view file_name, const std::string& name);

  // Enqueues the kernel over `items` work items (rounded up to whole work groups of the device's size; the kernel
  // checks its bound). Nothing is enqueued for zero items.
  template <typename... Args>
  absl::Status Launch1D(const GpuKernelContext& context, int64_t items, const Args&... args) const;
  // One work group of `group_size` items per group index (reductions with __local memory).
  template <typename... Args>
  absl::Status LaunchGroups(const GpuKernelContext& context, int64_t groups, size_t group_size,
                            const Args&... args) const;

  const std::string& name() const { return name_; }

 private:
  absl::Status SetArg(cl_uint index, cl_mem value) const;
  absl::Status SetArg(cl_uint index, int32_t value) const;
  absl::Status SetArg(cl_uint index, int64_t value) const;
  absl::Status SetArg(cl_uint index, float value) const;
  absl::Status SetArg(cl_uint index, const cl_long8& value) const;
  absl::Status SetArg(cl_uint index, const LocalMemory& value) const;
  template <typename... Args>
  absl::Status SetArgs(const Args&... args) const;
  absl::Status Enqueue(const GpuKernelContext& context, size_t global, size_t local) const;

  cl_kernel kernel_ = nullptr;
  std::string name_;
};

// Compile-time view of a node for a GPU kernel factory: the node's attributes (KernelInit), the dtypes of its
// values as the model declares them (kUndefined where unknown), and the device.
class GpuKernelInit : public KernelInit {
 public:
  GpuKernelInit(const onnx::NodeProto& node, int opset, std::vector<DataType> input_dtypes,
                std::vector<DataType> output_dtypes, Device& device)
      : KernelInit(node, opset),
        input_dtypes_(std::move(input_dtypes)),
        output_dtypes_(std::move(output_dtypes)),
        device_(device) {}

  DataType input_dtype(int i) const {
    return i < static_cast<int>(input_dtypes_.size()) ? input_dtypes_[i] : DataType::kUndefined;
  }
  DataType output_dtype(int i) const {
    return i < static_cast<int>(output_dtypes_.size()) ? output_dtypes_[i] : DataType::kUndefined;
  }
  Device& device() const { return device_; }
  absl::StatusOr<ClKernel> Kernel(absl::string_view file_name, const std::string& name) const {
    return ClKernel::Create(device_, file_name, name);
  }

 private:
  std::vector<DataType> input_dtypes_;
  std::vector<DataType> output_dtypes_;
  Device& device_;
};

// Run-time view of one node on the device.
class GpuKernelContext {
 public:
  GpuKernelContext(Stream& stream, const Tensor* const* inputs, int num_inputs, Tensor* const* outputs,
                   int num_outputs)
      : stream_(stream), inputs_(inputs), num_inputs_(num_inputs), outputs_(outputs), num_outputs_(num_outputs) {}

  Stream& stream() const { return stream_; }
  cl_command_queue queue() const { return stream_.queue(); }
  size_t work_group_size() const { return stream_.device().work_group_size(); }

  int num_inputs() const { return num_inputs_; }
  // Current on the device (or, for the kernel's host inputs, on the host); nullptr for an omitted optional input.
  const Tensor* input(int i) const { return i < num_inputs_ ? inputs_[i] : nullptr; }
  absl::StatusOr<const Tensor*> RequiredInput(int i) const;
  // Every input, omitted ones as nullptr.
  absl::Span<const Tensor* const> inputs() const { return absl::MakeConstSpan(inputs_, num_inputs_); }
  // The device memory of an input or output.
  cl_mem mem(const Tensor& tensor) const { return stream_.MemOf(tensor); }

  int num_outputs() const { return num_outputs_; }
  bool wants_output(int i) const { return i < num_outputs_ && outputs_[i] != nullptr; }
  // Uninitialised device memory for output i (a scratch tensor if the node does not want it).
  absl::StatusOr<Tensor*> AllocateOutput(int i, DataType dtype, Shape shape);
  // Forwards an existing device tensor (an input with a new shape) as output i; no copy.
  void SetOutput(int i, Tensor tensor);
  // Device memory for the node's own use, returned to the pool when the node is done (later commands of the
  // in-order queue reuse it only after this node's kernels have run).
  absl::StatusOr<DeviceMemory> Scratch(size_t bytes);

 private:
  Stream& stream_;
  const Tensor* const* inputs_;
  int num_inputs_;
  Tensor* const* outputs_;
  int num_outputs_;
  std::deque<Tensor> unwanted_;
  std::vector<DeviceMemory> scratch_;
};

class GpuKernel {
 public:
  virtual ~GpuKernel() = default;
  // Inputs this kernel reads on the host (shapes, axes, flags): the executor makes them current on the host, not
  // on the device. All other inputs are given current on the device.
  virtual bool IsHostInput(int /*input*/) const { return false; }
  // Enqueues the node's work; errors are annotated with the node by the executor.
  virtual absl::Status Compute(GpuKernelContext& context) const = 0;
};

using GpuKernelFactory = absl::StatusOr<std::unique_ptr<GpuKernel>> (*)(const GpuKernelInit& init);

// One op's GPU kernel: one line in engine/ops/gpu_op_list.inc.
struct GpuOpRegistration {
  const char* domain;
  const char* op_type;
  int first_opset;
  int last_opset;
  GpuKernelFactory factory;
};

class GpuOpRegistry {
 public:
  // Built once from engine/ops/gpu_op_list.inc (BuiltinGpuOpRegistrations, defined in engine/ops/gpu_op_list.cc).
  static const GpuOpRegistry& Global();
  explicit GpuOpRegistry(std::vector<GpuOpRegistration> registrations);
  // nullptr if no GPU kernel covers (domain, op_type, opset). "ai.onnx" is "".
  const GpuOpRegistration* Find(absl::string_view domain, absl::string_view op_type, int opset) const;
  const std::vector<GpuOpRegistration>& registrations() const { return registrations_; }

 private:
  std::vector<GpuOpRegistration> registrations_;
  absl::flat_hash_map<std::string, std::vector<size_t>> by_name_;
};

std::vector<GpuOpRegistration> BuiltinGpuOpRegistrations();

// ---- Implementation of the templates.

template <typename... Args>
absl::Status ClKernel::SetArgs(const Args&... args) const {
  cl_uint index = 0;
  absl::Status status;
  ((status.ok() ? (status = SetArg(index++, args), 0) : 0), ...);
  return status;
}

template <typename... Args>
absl::Status ClKernel::Launch1D(const GpuKernelContext& context, int64_t items, const Args&... args) const {
  if (items <= 0) return absl::OkStatus();
  absl::Status status = SetArgs(args...);
  if (!status.ok()) return status;
  const size_t local = context.work_group_size();
  const size_t global = (static_cast<size_t>(items) + local - 1) / local * local;
  return Enqueue(context, global, local);
}

template <typename... Args>
absl::Status ClKernel::LaunchGroups(const GpuKernelContext& context, int64_t groups, size_t group_size,
                                    const Args&... args) const {
  if (groups <= 0) return absl::OkStatus();
  absl::Status status = SetArgs(args...);
  if (!status.ok()) return status;
  return Enqueue(context, static_cast<size_t>(groups) * group_size, group_size);
}

}  // namespace traind::engine::gpu

#endif  // TRAIND_ENGINE_GPU_KERNEL_H_
