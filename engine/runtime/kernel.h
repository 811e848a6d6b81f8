// The kernel interface. A kernel is created once per node at compile time from a KernelInit (where
// it parses and validates its attributes) and then computes on every run through a KernelContext.
// Kernels are immutable after creation: Compute is const and may run concurrently for different
// runs. Shapes are computed at run time from the actual inputs (models may have dynamic dims).
#ifndef TRAIND_ENGINE_RUNTIME_KERNEL_H_
#define TRAIND_ENGINE_RUNTIME_KERNEL_H_

#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/core/buffer_pool.h"
#include "engine/core/tensor.h"
#include "engine/core/thread_pool.h"
#include "onnx/onnx_pb.h"

namespace traind::engine {

// Compile-time view of one node: its attributes (typed, validated accessors), opset and input
// arity. Errors it returns name the node, op type, opset and attribute.
class KernelInit {
 public:
  KernelInit(const onnx::NodeProto& node, int opset) : node_(node), opset_(opset) {}

  const onnx::NodeProto& node() const { return node_; }
  const std::string& op_type() const { return node_.op_type(); }
  int opset() const { return opset_; }
  int num_inputs() const { return node_.input_size(); }
  int num_outputs() const { return node_.output_size(); }
  // False for an omitted optional input (absent or named "").
  bool has_input(int i) const { return i < node_.input_size() && !node_.input(i).empty(); }

  bool HasAttribute(absl::string_view name) const { return Find(name) != nullptr; }
  absl::StatusOr<int64_t> GetInt(absl::string_view name, std::optional<int64_t> fallback) const;
  absl::StatusOr<float> GetFloat(absl::string_view name, std::optional<float> fallback) const;
  absl::StatusOr<std::string> GetString(absl::string_view name,
                                        std::optional<std::string> fallback) const;
  // Absent => `fallback` (empty if none given).
  absl::StatusOr<std::vector<int64_t>> GetInts(absl::string_view name,
                                               std::vector<int64_t> fallback = {}) const;
  absl::StatusOr<std::vector<float>> GetFloats(absl::string_view name) const;
  absl::StatusOr<Tensor> GetTensor(absl::string_view name) const;

  // kInvalidArgument "node 'n' (Op, opset 13): <message>".
  absl::Status Error(absl::string_view message) const;
  // kUnimplemented, for valid models this kernel cannot run (the backend runner reports SKIP).
  absl::Status Unsupported(absl::string_view message) const;

 private:
  const onnx::AttributeProto* Find(absl::string_view name) const;
  absl::StatusOr<const onnx::AttributeProto*> FindTyped(absl::string_view name,
                                                        onnx::AttributeProto::AttributeType type) const;
  const onnx::NodeProto& node_;
  int opset_;
};

// Run-time view of one node: inputs, outputs, memory and threads.
class KernelContext {
 public:
  KernelContext(const Tensor* const* inputs, int num_inputs, Tensor* const* outputs,
                int num_outputs, BufferPool& buffers, ThreadPool& threads)
      : inputs_(inputs), num_inputs_(num_inputs), outputs_(outputs), num_outputs_(num_outputs),
        buffers_(buffers), threads_(threads) {}

  int num_inputs() const { return num_inputs_; }
  // nullptr for an omitted optional input (or i beyond the node's inputs).
  const Tensor* input(int i) const { return i < num_inputs_ ? inputs_[i] : nullptr; }
  // The input, or a kInvalidArgument error if it was omitted.
  absl::StatusOr<const Tensor*> RequiredInput(int i) const;
  // Every input, omitted ones as nullptr.
  absl::Span<const Tensor* const> inputs() const { return absl::MakeConstSpan(inputs_, num_inputs_); }
  int num_outputs() const { return num_outputs_; }
  // False when the node does not name output i (the kernel may skip computing it).
  bool wants_output(int i) const { return i < num_outputs_ && outputs_[i] != nullptr; }

  // An uninitialised pooled tensor for output i. If the node does not want output i, still
  // returns a scratch tensor so kernels need no special case.
  absl::StatusOr<Tensor*> AllocateOutput(int i, DataType dtype, Shape shape);
  // Forwards an existing tensor (for example an input with a new shape) as output i; no copy.
  void SetOutput(int i, Tensor tensor);

  // In-place updates by donation, the one exception to "kernels never write their inputs". The caller of a run
  // may donate graph inputs (RunOptions::donated_inputs); the executor hands a donated input to the node that is
  // its only reader, and only if no other input of the run shares its buffer. Such a node may write its result
  // into that input's buffer instead of a fresh one: ReuseInputAsOutput(input, output) makes output `output` the
  // input's tensor (same buffer, so the caller's tensor then holds the result) and returns it, writable; nullptr
  // when input `input` is not donated to this node or the node does not want `output`, and the kernel then
  // allocates as usual. A kernel that takes a donation checks everything before its first write, so a failing
  // node leaves donated buffers untouched; the output's dtype and shape are the input's.
  bool donated(int input) const;
  Tensor* ReuseInputAsOutput(int input, int output);
  // For the executor: positions (ascending) of this node's inputs donated to it in this run.
  void set_donated_inputs(absl::Span<const int> positions) { donated_inputs_ = positions; }

  ThreadPool& threads() const { return threads_; }
  BufferPool& buffers() const { return buffers_; }

  // A seed for this node in this run, for kernels that draw random numbers without a seed attribute (Dropout).
  // Derived by the executor from the session's seed, the run and the node, so a seeded session repeats its
  // sequence of masks exactly; 0 when the session has no seed (the kernel then draws a fresh one).
  uint64_t random_seed() const { return random_seed_; }
  void set_random_seed(uint64_t seed) { random_seed_ = seed; }

 private:
  const Tensor* const* inputs_;
  int num_inputs_;
  Tensor* const* outputs_;
  int num_outputs_;
  BufferPool& buffers_;
  ThreadPool& threads_;
  uint64_t random_seed_ = 0;
  absl::Span<const int> donated_inputs_;
  std::deque<Tensor> scratch_;  // Unwanted outputs; deque keeps earlier pointers valid.
};

// A float32 computation where each output element depends only on the input elements at its position, which a
// kernel hands to the compiler's elementwise fusion (engine/runtime/fused_elementwise.h): out[i] =
// f(in_0[i], ..., in_k[i]), each input either n values or one value used for every i (`broadcast`). It must compute
// exactly what the kernel's Compute computes for those inputs (same operations in the same order), so that fusing
// changes no bit of any result. Pure: reads its inputs, writes `out`, keeps no state.
class ElementwiseFloatFn {
 public:
  virtual ~ElementwiseFloatFn() = default;
  virtual int arity() const = 0;
  virtual void Apply(const float* const* inputs, const bool* broadcast, int64_t n, float* out) const = 0;
};

class ElementwiseEpilogue;  // engine/runtime/fused_elementwise.h

class Kernel {
 public:
  virtual ~Kernel() = default;
  // Reads inputs, writes every wanted output. Errors are annotated with the node by the executor.
  virtual absl::Status Compute(KernelContext& context) const = 0;

  // Compile time, once, after constant folding and before the plan is shared: `constants[i]` is input i when it
  // is one of the plan's constants (immutable and alive as long as the plan), nullptr otherwise. A kernel may
  // derive data from them now — weights in the layout its math library prefers — and use that data at run time
  // only when it is handed exactly those tensors (the same buffer). Returns the bytes it keeps, which the plan
  // counts with its constants. Best effort: a kernel that cannot prepare keeps nothing and runs as usual.
  virtual int64_t PrepareConstants(const std::vector<const Tensor*>& /*constants*/) { return 0; }

  // Non-null when this node, on float32 inputs and output, is an elementwise computation the compiler may fuse
  // with its neighbours (see ElementwiseFloatFn); owned by the kernel.
  virtual const ElementwiseFloatFn* elementwise_float() const { return nullptr; }

  // Compile time, CPU plans: true when this node can apply an elementwise group to its output 0 as it writes it,
  // in place of the group's own pass over memory (ElementwiseEpilogue in fused_elementwise.h).
  virtual bool AcceptsEpilogue() const { return false; }
  // Only after AcceptsEpilogue(), before the plan is shared: from now on output 0 is the epilogue's value, and the
  // group's other operands follow the node's own inputs.
  virtual void SetEpilogue(std::shared_ptr<const ElementwiseEpilogue> /*epilogue*/) {}

  // Compile time, CPU plans: the max pool of 2x2 windows at stride 2 (no padding, no dilation, floor mode) of a
  // channels-last [N, H, W, C] value, which a producer of such values may apply as it writes its output 0 in place
  // of the pool's own pass over the full-size value (plan.cc, FuseMaxPools). IsChannelsLastMaxPool2x2: this node is
  // such a pool; AcceptsMaxPool2x2: this node can pool its output 0 (after its epilogue, if any).
  virtual bool IsChannelsLastMaxPool2x2() const { return false; }
  virtual bool AcceptsMaxPool2x2() const { return false; }
  // Only after AcceptsMaxPool2x2(), before the plan is shared: from now on output 0 is the pooled value,
  // [N, H / 2, W / 2, C]. The pooled maxima are those of the unpooled values, bit for bit.
  virtual void SetMaxPool2x2() {}
};

using KernelFactory = absl::StatusOr<std::unique_ptr<Kernel>> (*)(const KernelInit& init);

// Error helpers for run-time messages (the executor prefixes the node).
absl::Status UnsupportedDtype(absl::string_view op, DataType dtype);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_RUNTIME_KERNEL_H_
