// A compiled model: kernels in a topological schedule over integer value slots. Immutable once
// built, so one Plan serves concurrent runs. All string lookups happen in Compile, none per run.
#ifndef TRAIND_ENGINE_RUNTIME_PLAN_H_
#define TRAIND_ENGINE_RUNTIME_PLAN_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/tensor.h"
#include "engine/runtime/kernel.h"
#include "engine/runtime/op_registry.h"
#include "onnx/onnx_pb.h"

namespace traind::engine {

// A graph input or output as the model declares it. Dims < 0 are dynamic (dim_param or unknown);
// `has_shape` is false when the model gives no rank.
struct GraphValue {
  std::string name;
  int slot = -1;
  DataType dtype = DataType::kUndefined;
  bool has_shape = false;
  Shape dims;
};

struct PlannedNode {
  std::string label;    // "node 'name' (Op, opset N)" for error messages.
  std::string op_type;  // For profiles.
  std::unique_ptr<Kernel> kernel;
  std::vector<int> inputs;   // Slot ids; -1 for an omitted optional input.
  std::vector<int> outputs;  // Slot ids; -1 for an unnamed (unwanted) output.
  // Which stream of a run's random draws the node takes (Dropout with a session seed): a hash of its first output's
  // name, so that rewrites of the plan (fusion, the channels-last pass's Transposes) leave every node its draws.
  uint64_t random_stream = 0;
  // Slots whose last consumer is this node (and that are not graph outputs): the executor drops
  // them right after this node, returning their buffers to the pool for later nodes.
  std::vector<int> release_after;
};

// What a plan needs in memory, computed by Compile from the shapes shape inference gave every value (the loader
// runs it strictly; traind's artifacts have static shapes), before anything runs: the executor's pool bytes
// (bucket capacities) held at once by intermediates and outputs, walking the schedule with its releases. Values
// that alias an input (Identity, Reshape, Squeeze, Unsqueeze, Flatten) count as fresh buffers, so the figure is an
// upper bound for them; kernel scratch (oneDNN's) is not counted, nor values without a static size
// (`unknown_sizes`): the pool's budget bounds those at run time. Sizes saturate at INT64_MAX.
struct PlanMemory {
  int64_t peak_bytes = 0;
  int64_t input_bytes = 0;     // graph inputs, by their declared shapes (unknown dims count as 0)
  int64_t constant_bytes = 0;  // initializers and folded constants, owned by the plan, and kernels' copies of them
  int unknown_sizes = 0;
};

struct Plan {
  int num_slots = 0;
  std::vector<GraphValue> inputs;   // Graph inputs that are not initializers, in model order.
  std::vector<GraphValue> outputs;  // In model order.
  std::vector<std::pair<int, Tensor>> constants;  // Initializers, loaded once.
  std::vector<PlannedNode> nodes;                 // Topological order.
  std::vector<std::string> slot_names;            // For debugging and errors only.
  // Where a donated graph input may be written in place (RunOptions::donated_inputs in executor.h), indexed like
  // `inputs`: the only node that reads it and the position among that node's inputs; node -1 when the input has
  // no reader or several (a node reading it twice counts as several), or is also a graph output.
  struct DonationTarget {
    int node = -1;
    int position = -1;
  };
  std::vector<DonationTarget> donation_targets;
  PlanMemory memory;

  // -1 if absent. Not for the hot path: resolve names once, then run by index.
  int InputIndex(const std::string& name) const;
  int OutputIndex(const std::string& name) const;
};

struct CompileOptions {
  const OpRegistry* registry = nullptr;  // nullptr: OpRegistry::Global().
  // Kernel::PrepareConstants after constant folding (weights of constant matrices in the math library's layout).
  // Off only to measure what it brings (eval_bench --noprepare_constants).
  bool prepare_constants = true;
  // Groups of float32 elementwise nodes run as one node, chunk by chunk (engine/runtime/fused_elementwise.h). Only
  // for plans the CPU executor runs: the GPU executor places nodes by op type.
  bool fuse_elementwise = true;
  // Matrix Transposes read in place by the products next to them (engine/runtime/transpose_folding.h). Like
  // elementwise fusion, only for plans the CPU executor runs: the GPU executor finds each planned node's NodeProto
  // in the model by its outputs, so its plans must keep the model's nodes.
  bool fold_transposes = true;
  // A Linear layer's bias Add folded into its product (engine/runtime/bias_folding.h); CPU plans only, as above.
  bool fold_bias_adds = true;
  // Attention's MatMul -> scale -> Softmax -> MatMul as one node (engine/runtime/attention_fusion.h); CPU plans only.
  bool fuse_attention = true;
  // Exact GELU's decomposition as one Gelu node (engine/runtime/gelu_fusion.h); CPU plans only.
  bool fuse_gelu = true;
  // Activations channels-last between convolutions (engine/runtime/channels_last.h); CPU plans only, as above.
  bool channels_last = true;
};

// Builds a Plan from a model that LoadModel* accepted. Errors: kUnimplemented for ops (or opsets)
// without a kernel, kInvalidArgument for cycles, undefined values or bad attributes; each names
// the node, op and opset.
absl::StatusOr<std::shared_ptr<const Plan>> Compile(const onnx::ModelProto& model,
                                                    const CompileOptions& options = {});

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_RUNTIME_PLAN_H_
