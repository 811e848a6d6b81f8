#include "engine/gpu/gpu_executor.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/status_macros.h"
#include "engine/model/tensor_proto.h"
#include "engine/runtime/cpu_executor.h"

namespace traind::engine::gpu {
namespace {

// Values up to this size made on the CPU are compared with their last upload before uploading again.
constexpr size_t kSmallUploadBytes = 4096;

// CPU kernels that read only their inputs' shapes: a device value feeding them needs no download.
bool ReadsOnlyShapes(const std::string& op_type) { return op_type == "Shape" || op_type == "Size"; }

}  // namespace

struct GpuExecutor::Step {
  std::unique_ptr<GpuKernel> gpu;  // null: the node runs on the CPU
};

std::string Placement::Summary() const {
  std::map<std::string, int> cpu_counts;
  for (const Node& node : nodes) {
    if (!node.on_gpu) ++cpu_counts[absl::StrCat(node.op_type, " (", node.reason, ")")];
  }
  std::vector<std::string> parts;
  for (const auto& [what, count] : cpu_counts) parts.push_back(count > 1 ? absl::StrCat(what, " x", count) : what);
  return absl::StrCat(gpu_nodes, " of ", gpu_nodes + cpu_nodes, " nodes on the GPU",
                      parts.empty() ? "" : absl::StrCat("; on the CPU: ", absl::StrJoin(parts, ", ")),
                      "; per run at most ", planned_uploads, " uploads, ", planned_downloads, " downloads");
}

GpuExecutor::GpuExecutor(std::shared_ptr<const Plan> plan, GpuExecutorOptions options)
    : plan_(std::move(plan)),
      stream_(std::move(options.stream)),
      threads_(options.threads ? *options.threads : ThreadPool::Default()),
      random_seed_(options.random_seed),
      host_buffers_(options.host_buffers != nullptr ? std::move(options.host_buffers) : BufferPool::Create()) {}

GpuExecutor::~GpuExecutor() {
  // The queue may still run kernels that read this executor's cached uploads.
  stream_->Finish().IgnoreError();
}

absl::StatusOr<std::unique_ptr<GpuExecutor>> GpuExecutor::Create(std::shared_ptr<const Plan> plan,
                                                                   const onnx::ModelProto& model,
                                                                   GpuExecutorOptions options) {
  if (plan == nullptr || options.stream == nullptr) {
    return absl::InvalidArgumentError("the GPU executor needs a plan and a stream");
  }
  const GpuOpRegistry& registry = options.registry ? *options.registry : GpuOpRegistry::Global();
  const absl::flat_hash_set<std::string> cpu_ops(options.cpu_ops.begin(), options.cpu_ops.end());
  std::unique_ptr<GpuExecutor> executor(new GpuExecutor(plan, std::move(options)));
  Device& device = executor->stream_->device();

  // What the model declares: the dtype of every named value, the node producing it, the opset of each domain.
  absl::flat_hash_map<std::string, DataType> dtypes;
  const onnx::GraphProto& graph = model.graph();
  for (const auto* infos : {&graph.input(), &graph.output(), &graph.value_info()}) {
    for (const auto& info : *infos) {
      if (!info.type().has_tensor_type()) continue;
      absl::StatusOr<DataType> dtype = DataTypeFromOnnx(info.type().tensor_type().elem_type());
      if (dtype.ok()) dtypes[info.name()] = *dtype;
    }
  }
  for (const auto& initializer : graph.initializer()) {
    absl::StatusOr<DataType> dtype = DataTypeFromOnnx(initializer.data_type());
    if (dtype.ok()) dtypes[initializer.name()] = *dtype;
  }
  for (const auto& [slot, tensor] : plan->constants) dtypes[plan->slot_names[slot]] = tensor.dtype();
  absl::flat_hash_map<std::string, int> producer;
  for (int n = 0; n < graph.node_size(); ++n) {
    for (const auto& output : graph.node(n).output()) {
      if (!output.empty()) producer.emplace(output, n);
    }
  }
  absl::flat_hash_map<std::string, int> opsets;
  for (const auto& opset : model.opset_import()) {
    opsets[opset.domain() == "ai.onnx" ? "" : opset.domain()] = static_cast<int>(opset.version());
  }
  auto dtype_of = [&](int slot) {
    if (slot < 0) return DataType::kUndefined;
    auto it = dtypes.find(plan->slot_names[slot]);
    return it == dtypes.end() ? DataType::kUndefined : it->second;
  };

  // Placement, node by node, simulating where each value is current to plan the transfers.
  const int num_slots = plan->num_slots;
  std::vector<bool> on_host(num_slots, true), on_device(num_slots, false);
  executor->made_on_cpu_.assign(num_slots, false);
  executor->small_uploads_.resize(num_slots);
  Placement& placement = executor->placement_;
  for (const PlannedNode& node : plan->nodes) {
    Step step;
    Placement::Node placed{node.op_type, false, ""};
    const onnx::NodeProto* proto = nullptr;
    for (int slot : node.outputs) {
      if (slot < 0) continue;
      auto it = producer.find(plan->slot_names[slot]);
      if (it != producer.end()) proto = &graph.node(it->second);
      break;
    }
    const GpuOpRegistration* registration = nullptr;
    int opset = -1;
    if (proto != nullptr) {
      auto it = opsets.find(proto->domain() == "ai.onnx" ? "" : proto->domain());
      if (it != opsets.end()) opset = it->second;
      registration = registry.Find(proto->domain(), proto->op_type(), opset);
    }
    if (proto == nullptr) {
      placed.reason = "not found in the model";
    } else if (registration == nullptr) {
      placed.reason = "no GPU kernel";
    } else if (cpu_ops.contains(node.op_type)) {
      placed.reason = "kept on the CPU";
    } else {
      std::vector<DataType> input_dtypes, output_dtypes;
      for (int slot : node.inputs) input_dtypes.push_back(dtype_of(slot));
      for (int slot : node.outputs) output_dtypes.push_back(dtype_of(slot));
      GpuKernelInit init(*proto, opset, std::move(input_dtypes), std::move(output_dtypes), device);
      absl::StatusOr<std::unique_ptr<GpuKernel>> kernel = registration->factory(init);
      if (kernel.ok()) {
        step.gpu = *std::move(kernel);
        placed.on_gpu = true;
      } else if (kernel.status().code() == absl::StatusCode::kUnimplemented ||
                 kernel.status().code() == absl::StatusCode::kInvalidArgument) {
        // Not for this GPU kernel (a dtype, an attribute it does not cover), or a bad attribute the CPU kernel
        // reports in its own words at run time.
        placed.reason = std::string(kernel.status().message());
        const size_t colon = placed.reason.rfind("): ");
        if (colon != std::string::npos) placed.reason = placed.reason.substr(colon + 3);
      } else {
        return absl::Status(kernel.status().code(), absl::StrCat(node.label, ": ", kernel.status().message()));
      }
    }

    if (placed.on_gpu) {
      for (size_t k = 0; k < node.inputs.size(); ++k) {
        const int slot = node.inputs[k];
        if (slot < 0) continue;
        if (step.gpu->IsHostInput(static_cast<int>(k))) {
          if (!on_host[slot]) ++placement.planned_downloads;
          on_host[slot] = true;
        } else {
          if (!on_device[slot]) ++placement.planned_uploads;
          on_device[slot] = true;
        }
      }
      for (int slot : node.outputs) {
        if (slot < 0) continue;
        on_device[slot] = true;
        on_host[slot] = false;
      }
      ++placement.gpu_nodes;
    } else {
      for (int slot : node.inputs) {
        if (slot < 0 || ReadsOnlyShapes(node.op_type)) continue;
        if (!on_host[slot]) ++placement.planned_downloads;
        on_host[slot] = true;
      }
      for (int slot : node.outputs) {
        if (slot < 0) continue;
        executor->made_on_cpu_[slot] = true;
      }
      ++placement.cpu_nodes;
    }
    placement.nodes.push_back(std::move(placed));
    executor->steps_.push_back(std::move(step));
  }
  return executor;
}

TransferCounts GpuExecutor::last_run_transfers() const {
  std::lock_guard<std::mutex> lock(run_mutex_);
  return last_run_;
}

absl::Status GpuExecutor::ToDevice(int slot, std::vector<Tensor>& slots) const {
  Tensor& tensor = slots[slot];
  if (stream_->HoldsCopyOf(tensor) && tensor.buffer()->device_current()) return absl::OkStatus();
  if (made_on_cpu_[slot] && tensor.byte_size() <= kSmallUploadBytes) {
    TRAIND_RETURN_IF_ERROR(tensor.buffer()->SyncToHost());
    SmallUpload& last = small_uploads_[slot];
    const absl::string_view bytes(static_cast<const char*>(tensor.raw_data()), tensor.byte_size());
    if (last.device.defined() && last.device.dtype() == tensor.dtype() && last.device.shape() == tensor.shape() &&
        last.bytes == bytes) {
      tensor = last.device;
      return absl::OkStatus();
    }
    TRAIND_ASSIGN_OR_RETURN(Tensor device, stream_->AllocateTensor(tensor.dtype(), tensor.shape()));
    TRAIND_RETURN_IF_ERROR(stream_->Upload(bytes.data(), stream_->MemOf(device), bytes.size()));
    last.bytes = std::string(bytes);
    last.device = device;
    tensor = std::move(device);
    return absl::OkStatus();
  }
  return stream_->MakeDeviceCurrent(tensor).status();
}

absl::StatusOr<std::vector<Tensor>> GpuExecutor::Run(const Plan& plan, absl::Span<const Tensor> inputs) const {
  if (&plan != plan_.get()) return absl::InvalidArgumentError("this GPU executor was made for another plan");
  if (inputs.size() != plan.inputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("expected ", plan.inputs.size(), " inputs, got ", inputs.size()));
  }
  std::lock_guard<std::mutex> lock(run_mutex_);
  const TransferCounts before = stream_->transfers();
  threads_.MakeCurrent();
  const uint64_t run_seed = RunRandomSeed(random_seed_, runs_.fetch_add(1));
  std::vector<Tensor> slots(plan.num_slots);
  for (const auto& [slot, tensor] : plan.constants) slots[slot] = tensor;
  for (size_t i = 0; i < inputs.size(); ++i) {
    TRAIND_RETURN_IF_ERROR(CheckInputMatchesDeclaration(plan.inputs[i], inputs[i]));
    slots[plan.inputs[i].slot] = inputs[i];
  }

  absl::InlinedVector<const Tensor*, 8> node_inputs;
  absl::InlinedVector<Tensor*, 4> node_outputs;
  for (size_t n = 0; n < plan.nodes.size(); ++n) {
    const PlannedNode& node = plan.nodes[n];
    const Step& step = steps_[n];
    auto annotate = [&](const absl::Status& status) {
      return absl::Status(status.code(), absl::StrCat(node.label, ": ", status.message()));
    };
    if (step.gpu == nullptr) {
      if (!ReadsOnlyShapes(node.op_type)) {
        for (int slot : node.inputs) {
          if (slot < 0 || !slots[slot].defined()) continue;
          if (absl::Status status = stream_->MakeHostCurrent(slots[slot]); !status.ok()) return annotate(status);
        }
      }
      TRAIND_RETURN_IF_ERROR(RunNodeOnCpu(node, slots, *host_buffers_, threads_, run_seed));
    } else {
      node_inputs.clear();
      node_outputs.clear();
      for (size_t k = 0; k < node.inputs.size(); ++k) {
        const int slot = node.inputs[k];
        if (slot < 0 || !slots[slot].defined()) {
          node_inputs.push_back(nullptr);
          continue;
        }
        absl::Status status = step.gpu->IsHostInput(static_cast<int>(k)) ? stream_->MakeHostCurrent(slots[slot])
                                                                          : ToDevice(slot, slots);
        if (!status.ok()) return annotate(status);
        node_inputs.push_back(&slots[slot]);
      }
      for (int slot : node.outputs) node_outputs.push_back(slot >= 0 ? &slots[slot] : nullptr);
      GpuKernelContext context(*stream_, node_inputs.data(), static_cast<int>(node_inputs.size()),
                               node_outputs.data(), static_cast<int>(node_outputs.size()));
      absl::Status status;
      try {
        status = step.gpu->Compute(context);
      } catch (const std::bad_alloc&) {
        status = absl::ResourceExhaustedError("out of memory");
      } catch (const std::exception& e) {
        status = absl::InternalError(absl::StrCat("exception: ", e.what()));
      }
      if (!status.ok()) return annotate(status);
      for (size_t i = 0; i < node.outputs.size(); ++i) {
        if (node.outputs[i] >= 0 && !slots[node.outputs[i]].defined()) {
          return absl::InternalError(absl::StrCat(node.label, ": GPU kernel did not produce output ", i));
        }
      }
    }
    for (int slot : node.release_after) slots[slot] = Tensor();
  }
  TRAIND_RETURN_IF_ERROR(stream_->Finish());

  std::vector<Tensor> outputs;
  outputs.reserve(plan.outputs.size());
  for (const GraphValue& output : plan.outputs) outputs.push_back(slots[output.slot]);
  last_run_ = stream_->transfers() - before;
  return outputs;
}

absl::StatusOr<std::vector<bool>> GpuExecutor::SyncScalarCheckingFinite(
    Tensor& scalar, absl::Span<const std::vector<Tensor>> groups) const {
  auto only_on_device = [&](const Tensor& tensor) {
    return tensor.dtype() == DataType::kFloat32 && !tensor.buffer()->host_current() && stream_->HoldsCopyOf(tensor);
  };
  const bool scalar_on_device = only_on_device(scalar) && scalar.num_elements() == 1;
  std::vector<bool> finite(groups.size(), true);
  std::vector<std::pair<const Tensor*, int32_t>> device_checked;  // tensor, its group
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const Tensor& tensor : groups[g]) {
      if (only_on_device(tensor)) {
        device_checked.emplace_back(&tensor, static_cast<int32_t>(g));
      } else {  // On the host already, or not float32: read there.
        TRAIND_RETURN_IF_ERROR(tensor.buffer()->SyncToHost());
        finite[g] = finite[g] && AllFinite(tensor);
      }
    }
  }
  if (!scalar_on_device) TRAIND_RETURN_IF_ERROR(scalar.buffer()->SyncToHost());
  if (!scalar_on_device && device_checked.empty()) return finite;

  std::lock_guard<std::mutex> lock(run_mutex_);  // The kernels' arguments are set per launch.
  if (begin_step_check_ == nullptr) {
    TRAIND_ASSIGN_OR_RETURN(ClKernel begin, ClKernel::Create(stream_->device(), "step_check.cl", "begin_step_check"));
    TRAIND_ASSIGN_OR_RETURN(ClKernel mark, ClKernel::Create(stream_->device(), "step_check.cl", "mark_non_finite"));
    begin_step_check_ = std::make_unique<ClKernel>(std::move(begin));
    mark_non_finite_ = std::make_unique<ClKernel>(std::move(mark));
  }
  GpuKernelContext context(*stream_, nullptr, 0, nullptr, 0);
  const int64_t count = 1 + static_cast<int64_t>(groups.size());
  TRAIND_ASSIGN_OR_RETURN(DeviceMemory result, stream_->Allocate(count * sizeof(float)));
  // Without a scalar on the device the kernel reads no `scalar` (has_scalar = 0): any buffer will do.
  TRAIND_RETURN_IF_ERROR(begin_step_check_->Launch1D(context, count,
                                                     scalar_on_device ? stream_->MemOf(scalar) : result.mem(),
                                                     int32_t{scalar_on_device}, result.mem(), count));
  for (const auto& [tensor, group] : device_checked) {
    TRAIND_RETURN_IF_ERROR(mark_non_finite_->Launch1D(context, tensor->num_elements(), stream_->MemOf(*tensor),
                                                      tensor->num_elements(), result.mem(), 1 + group));
  }
  std::vector<float> values(static_cast<size_t>(count));
  TRAIND_RETURN_IF_ERROR(stream_->Download(result.mem(), values.data(), values.size() * sizeof(float)));
  if (scalar_on_device) {
    TRAIND_ASSIGN_OR_RETURN(Tensor host, Tensor::FromVector<float>(scalar.shape(), {values[0]}));
    scalar = std::move(host);
  }
  for (size_t g = 0; g < groups.size(); ++g) finite[g] = finite[g] && values[1 + g] == 0.0f;
  return finite;
}

}  // namespace traind::engine::gpu
