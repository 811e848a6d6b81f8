// The GPU executor: runs a Plan on an OpenCL device, beside the CPU executor and behind the same Executor
// interface. Each node runs on the device when it has a GPU kernel that accepts it (engine/ops/gpu_op_list.inc),
// else on the CPU with its CPU kernel; the placement and the transfers between host and device are planned once,
// when the executor is made for the plan, and every transfer is counted (Stream::transfers()).
//
// Residency: a graph input (a parameter, a gradient buffer, optimizer state) is uploaded once and keeps its device
// copy in its Buffer, so feeding the same tensor next run costs nothing; a value a GPU node makes stays on the
// device, returned as a tensor that is downloaded only when host code reads it (engine/core/tensor.h). So a
// training step moves the batch in and the values the caller reads out, nothing else.
#ifndef TRAIND_ENGINE_GPU_GPU_EXECUTOR_H_
#define TRAIND_ENGINE_GPU_GPU_EXECUTOR_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/buffer_pool.h"
#include "engine/core/thread_pool.h"
#include "engine/gpu/kernel.h"
#include "engine/gpu/stream.h"
#include "engine/runtime/executor.h"
#include "onnx/onnx_pb.h"

namespace traind::engine::gpu {

struct GpuExecutorOptions {
  // Where the GPU nodes run. Executors sharing a stream (a session's training, eval and optimizer models) share
  // device copies: a parameter uploaded by one is current for the others.
  std::shared_ptr<Stream> stream;
  // For the nodes placed on the CPU, as CpuExecutor's (null: ThreadPool::Default()).
  ThreadPool* threads = nullptr;
  uint64_t random_seed = 0;
  const GpuOpRegistry* registry = nullptr;  // null: GpuOpRegistry::Global()
  // Op types kept on the CPU even where a GPU kernel exists (mixed placement in tests, a workaround for a driver).
  std::vector<std::string> cpu_ops;
  // The pool for what the nodes placed on the CPU allocate (bound to the session's memory budget); null: a fresh
  // unbounded pool.
  std::shared_ptr<BufferPool> host_buffers;
};

// Where each node runs and what may cross per run.
struct Placement {
  struct Node {
    std::string op_type;
    bool on_gpu = false;
    std::string reason;  // why it runs on the CPU
  };
  std::vector<Node> nodes;  // indexed like Plan::nodes
  int gpu_nodes = 0;
  int cpu_nodes = 0;
  // Per run, at most: values a GPU node needs that are on the host (graph inputs not yet on the device, constants
  // before their first upload, outputs of CPU nodes), and values a CPU node reads that only the device has.
  int planned_uploads = 0;
  int planned_downloads = 0;
  // "41 of 45 nodes on the GPU; on the CPU: Dropout x2 (no GPU kernel), OneHot (no GPU kernel), ..."
  std::string Summary() const;
};

class GpuExecutor : public Executor {
 public:
  // Places every node of `plan` (compiled from `model`, whose declared value types tell the kernels their dtypes)
  // and builds the GPU kernels' programs (compiled once per device, cached on disk).
  static absl::StatusOr<std::unique_ptr<GpuExecutor>> Create(std::shared_ptr<const Plan> plan,
                                                             const onnx::ModelProto& model,
                                                             GpuExecutorOptions options);
  ~GpuExecutor() override;

  // Runs of one executor are serialised (one in-order queue). Outputs made on the device are returned as device
  // tensors (downloaded when read on the host). Errors name the node; a device out of memory is ResourceExhausted.
  // Donations (RunOptions::donated_inputs, executor.h) are not taken: RunWithOptions is the base class's, which runs
  // without them, so the fused optimizers' outputs are fresh device buffers and the Optimizer copies them back into
  // the parameters and moments on the device (one device-to-device copy each per step, no host transfer); nodes
  // placed on the CPU never see a donation either.
  absl::StatusOr<std::vector<Tensor>> Run(const Plan& plan, absl::Span<const Tensor> inputs) const override;

  // The loss and the finiteness of each group (batch statistics, gradients) in one download of 4 bytes per value
  // where they are on this device (float32); `scalar` is then replaced by a host tensor holding the loss.
  absl::StatusOr<std::vector<bool>> SyncScalarCheckingFinite(
      Tensor& scalar, absl::Span<const std::vector<Tensor>> groups) const override;

  const Placement& placement() const { return placement_; }
  Stream& stream() const { return *stream_; }
  const std::shared_ptr<Stream>& shared_stream() const { return stream_; }
  // What crossed during the last run.
  TransferCounts last_run_transfers() const;

 private:
  struct Step;
  GpuExecutor(std::shared_ptr<const Plan> plan, GpuExecutorOptions options);
  absl::Status ToDevice(int slot, std::vector<Tensor>& slots) const;

  std::shared_ptr<const Plan> plan_;
  std::shared_ptr<Stream> stream_;
  ThreadPool& threads_;
  uint64_t random_seed_;
  std::shared_ptr<BufferPool> host_buffers_;
  std::vector<Step> steps_;
  std::vector<bool> made_on_cpu_;  // per slot: produced by a node placed on the CPU
  Placement placement_;
  mutable std::mutex run_mutex_;
  mutable std::atomic<uint64_t> runs_{0};
  mutable TransferCounts last_run_;
  // The last upload of each small value made on the CPU (shape arithmetic, one-hot targets): unchanged bytes are
  // not uploaded again.
  struct SmallUpload {
    std::string bytes;
    Tensor device;
  };
  mutable std::vector<SmallUpload> small_uploads_;
  // step_check.cl's kernels, built at the first SyncScalarCheckingFinite (under run_mutex_).
  mutable std::unique_ptr<ClKernel> begin_step_check_, mark_non_finite_;
};

}  // namespace traind::engine::gpu

#endif  // TRAIND_ENGINE_GPU_GPU_EXECUTOR_H_
