#include "engine/runtime/plan.h"

#include <algorithm>
#include <functional>
#include <utility>
#include <limits>
#include <optional>
#include <queue>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/buffer_pool.h"
#include "engine/core/shape.h"
#include "engine/core/status_macros.h"
#include "engine/core/thread_pool.h"
#include "engine/model/tensor_proto.h"
#include "engine/model/traind_schemas.h"
#include "engine/runtime/attention_fusion.h"
#include "engine/runtime/bias_folding.h"
#include "engine/runtime/channels_last.h"
#include "engine/runtime/fused_elementwise.h"
#include "engine/runtime/gelu_fusion.h"
#include "engine/runtime/transpose_folding.h"

namespace traind::engine {
namespace {

std::string NodeLabel(const onnx::NodeProto& node, int opset) {
  return absl::StrCat("node '", node.name(), "' (", node.op_type(), ", opset ", opset, ")");
}

absl::StatusOr<GraphValue> DescribeValue(const onnx::ValueInfoProto& info, int slot) {
  GraphValue value;
  value.name = info.name();
  value.slot = slot;
  if (!info.type().has_tensor_type()) {
    return absl::UnimplementedError(
        absl::StrCat("graph value '", info.name(), "' is not a tensor (sequence/map/optional)"));
  }
  const auto& tensor_type = info.type().tensor_type();
  auto dtype = DataTypeFromOnnx(tensor_type.elem_type());
  if (!dtype.ok()) {
    return absl::Status(dtype.status().code(), absl::StrCat("graph value '", info.name(),
                                                            "': ", dtype.status().message()));
  }
  value.dtype = *dtype;
  value.has_shape = tensor_type.has_shape();
  for (const auto& dim : tensor_type.shape().dim()) {
    value.dims.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
  }
  return value;
}

// The newest default-domain opset the op list covers.
constexpr int kNewestOnnxOpset = 17;

class Compiler {
 public:
  Compiler(const onnx::ModelProto& model, const OpRegistry& registry, const CompileOptions& options)
      : graph_(model.graph()),
        nodes_(model.graph().node().begin(), model.graph().node().end()),
        registry_(registry),
        options_(options) {
    for (const auto& opset : model.opset_import()) {
      const std::string domain = opset.domain() == "ai.onnx" ? "" : opset.domain();
      opsets_[domain] = static_cast<int>(opset.version());
    }
  }

  absl::StatusOr<std::shared_ptr<const Plan>> Build() {
    auto plan = std::make_shared<Plan>();
    plan_ = plan.get();
    TRAIND_RETURN_IF_ERROR(AddInitializersAndInputs());
    if (options_.fold_transposes) FoldTransposes();
    if (options_.fold_bias_adds) FoldBiasAdds();
    if (options_.fuse_attention) FuseAttentionChains();
    if (options_.fuse_gelu) FuseGelu();
    if (options_.channels_last) ConvertToChannelsLast();
    TRAIND_ASSIGN_OR_RETURN(std::vector<int> order, TopologicalOrder());
    for (int index : order) TRAIND_RETURN_IF_ERROR(AddNode(nodes_[index]));
    TRAIND_RETURN_IF_ERROR(AddOutputs());
    FoldConstants();
    if (options_.prepare_constants) PrepareConstants();
    if (options_.fuse_elementwise) {
      FuseElementwise();
      FuseMaxPools();
    }
    PlanReleases();
    PlanDonations();
    EstimateMemory();
    plan_->num_slots = static_cast<int>(plan_->slot_names.size());
    return std::shared_ptr<const Plan>(std::move(plan));
  }

 private:
  int NewSlot(const std::string& name) {
    const int slot = static_cast<int>(plan_->slot_names.size());
    plan_->slot_names.push_back(name);
    slot_by_name_[name] = slot;
    return slot;
  }

  absl::Status AddInitializersAndInputs() {
    for (const auto& initializer : graph_.initializer()) {
      if (slot_by_name_.contains(initializer.name())) {
        return absl::InvalidArgumentError(
            absl::StrCat("initializer '", initializer.name(), "' is defined twice"));
      }
      TRAIND_ASSIGN_OR_RETURN(Tensor tensor, TensorFromProto(initializer));
      plan_->constants.emplace_back(NewSlot(initializer.name()), std::move(tensor));
    }
    if (graph_.sparse_initializer_size() > 0) {
      return absl::UnimplementedError("sparse initializers are unsupported");
    }
    for (const auto& input : graph_.input()) {
      // Since IR 4 an initializer may also be listed as an input (an overridable default); the
      // engine treats it as a constant.
      if (slot_by_name_.contains(input.name())) continue;
      TRAIND_ASSIGN_OR_RETURN(GraphValue value, DescribeValue(input, NewSlot(input.name())));
      plan_->inputs.push_back(std::move(value));
    }
    return absl::OkStatus();
  }

  // The static dims (-1 where symbolic or unknown) of every value the graph states a shape for (inputs, outputs,
  // value_info, initializers); the first statement of a name wins.
  absl::flat_hash_map<std::string, std::vector<int64_t>> StaticDims() const {
    absl::flat_hash_map<std::string, std::vector<int64_t>> dims;
    for (const auto* infos : {&graph_.input(), &graph_.output(), &graph_.value_info()}) {
      for (const auto& info : *infos) {
        if (!info.type().has_tensor_type() || !info.type().tensor_type().has_shape() || dims.contains(info.name())) {
          continue;
        }
        std::vector<int64_t>& value_dims = dims[info.name()];
        for (const auto& dim : info.type().tensor_type().shape().dim()) {
          value_dims.push_back(dim.has_dim_value() ? dim.dim_value() : -1);
        }
      }
    }
    for (const auto& initializer : graph_.initializer()) {
      dims.emplace(initializer.name(), std::vector<int64_t>(initializer.dims().begin(), initializer.dims().end()));
    }
    return dims;
  }

  // Their ranks (transpose folding and the channels-last pass need no more).
  absl::flat_hash_map<std::string, int> StaticRanks() const {
    absl::flat_hash_map<std::string, int> ranks;
    for (const auto& [name, dims] : StaticDims()) ranks.emplace(name, static_cast<int>(dims.size()));
    return ranks;
  }

  // engine/runtime/transpose_folding.h: matrix Transposes read in place by the products around them.
  void FoldTransposes() {
    TransposeFoldingGraph graph;
    graph.ranks = StaticRanks();
    for (const auto& initializer : graph_.initializer()) graph.constants.insert(initializer.name());
    for (const auto& output : graph_.output()) graph.outputs.insert(output.name());
    if (FoldTransposesIntoProducts(nodes_, graph) > 0 && !opsets_.contains(kTraindTrainingDomain)) {
      opsets_[kTraindTrainingDomain] = kTraindTrainingVersion;
    }
  }

  // engine/runtime/bias_folding.h: a Linear layer's bias Add done by its product.
  void FoldBiasAdds() {
    BiasFoldingGraph graph;
    graph.dims = StaticDims();
    for (const auto& output : graph_.output()) graph.outputs.insert(output.name());
    if (FoldBiasAddsIntoProducts(nodes_, graph) > 0) opsets_.try_emplace(kTraindTrainingDomain, kTraindTrainingVersion);
  }

  // The facts the pattern passes read besides the nodes (node_list.h): gathered once.
  const GraphValueFacts& ValueFacts() {
    if (value_facts_.has_value()) return *value_facts_;
    GraphValueFacts& facts = value_facts_.emplace();
    facts.dims = StaticDims();
    for (const auto* infos : {&graph_.input(), &graph_.output(), &graph_.value_info()}) {
      for (const auto& info : *infos) {
        if (info.type().has_tensor_type()) facts.elem_types.emplace(info.name(), info.type().tensor_type().elem_type());
      }
    }
    for (const auto& initializer : graph_.initializer()) {
      facts.elem_types.emplace(initializer.name(), initializer.data_type());
      if (initializer.data_location() == onnx::TensorProto::EXTERNAL) continue;
      if (initializer.data_type() == onnx::TensorProto::INT64) {
        absl::StatusOr<Tensor> values = TensorFromProto(initializer, /*max_elements=*/8);
        if (values.ok()) {
          facts.int_constants.emplace(initializer.name(),
                                      std::vector<int64_t>(values->data<int64_t>(),
                                                           values->data<int64_t>() + values->num_elements()));
        }
      } else if (initializer.data_type() == onnx::TensorProto::FLOAT) {
        absl::StatusOr<Tensor> scalar = TensorFromProto(initializer, /*max_elements=*/1);
        if (scalar.ok() && scalar->num_elements() == 1) {
          facts.scalar_constants.emplace(initializer.name(), scalar->data<float>()[0]);
        }
      }
    }
    for (const auto& output : graph_.output()) facts.outputs.insert(output.name());
    auto onnx_opset = opsets_.find("");
    facts.onnx_opset = onnx_opset == opsets_.end() ? kNewestOnnxOpset : onnx_opset->second;
    return facts;
  }

  // engine/runtime/attention_fusion.h: MatMul -> scale -> Softmax -> MatMul as one node; then the fused nodes, and
  // the gradient nodes of a training graph, read and write heads where they lie.
  void FuseAttentionChains() {
    if (FuseAttention(nodes_, ValueFacts()) > 0) opsets_.try_emplace(kTraindTrainingDomain, kTraindTrainingVersion);
    FoldAttentionLayouts(nodes_, ValueFacts());
  }

  // engine/runtime/gelu_fusion.h: exact GELU's decomposition as one node.
  void FuseGelu() {
    if (FuseExactGelu(nodes_, ValueFacts()) > 0) opsets_.try_emplace(kTraindTrainingDomain, kTraindTrainingVersion);
  }

  // engine/runtime/channels_last.h: activations stay channels-last from one convolution to the next.
  void ConvertToChannelsLast() {
    ChannelsLastGraph graph;
    graph.ranks = StaticRanks();
    for (const auto& output : graph_.output()) graph.outputs.insert(output.name());
    // The Transposes, Gathers and Constant it adds are default-domain ops: a model that imports only traind's
    // domain (a lone ConvGrad) gets the default domain at the newest opset for them; one older than 9 is left alone.
    auto onnx_opset = opsets_.find("");
    graph.onnx_opset = onnx_opset == opsets_.end() ? kNewestOnnxOpset : onnx_opset->second;
    if (graph.onnx_opset < 9) return;
    ChannelsLastResult result = engine::ConvertToChannelsLast(nodes_, graph);
    if (result.converted_nodes == 0) return;
    opsets_.try_emplace(kTraindTrainingDomain, kTraindTrainingVersion);
    opsets_.try_emplace("", kNewestOnnxOpset);
    size_aliases_ = std::move(result.same_size_as);
  }

  // Kahn's algorithm over node indices; refuses cycles and values with two producers.
  absl::StatusOr<std::vector<int>> TopologicalOrder() {
    const int num_nodes = static_cast<int>(nodes_.size());
    absl::flat_hash_map<std::string, int> producer;
    for (int i = 0; i < num_nodes; ++i) {
      for (const auto& output : nodes_[i].output()) {
        if (output.empty()) continue;
        if (slot_by_name_.contains(output) || !producer.emplace(output, i).second) {
          return absl::InvalidArgumentError(absl::StrCat(
              "value '", output, "' is produced twice (second time by ",
              NodeLabel(nodes_[i], OpsetOf(nodes_[i])), ")"));
        }
      }
    }
    std::vector<int> pending_inputs(num_nodes, 0);
    std::vector<std::vector<int>> consumers(num_nodes);
    for (int i = 0; i < num_nodes; ++i) {
      for (const auto& input : nodes_[i].input()) {
        auto it = producer.find(input);
        if (input.empty() || it == producer.end()) continue;
        ++pending_inputs[i];
        consumers[it->second].push_back(i);
      }
    }
    // The ready node that comes first in the model, so that a model already in topological order keeps its order:
    // that order is the memory plan the graph's author chose. A training graph computes a backward node that reads
    // only forward values (a transpose of an activation, a reshape of a layer's input) where its gradient rule put
    // it, in the backward pass; a FIFO would run it as soon as its inputs exist, in the forward pass, and keep its
    // output alive across every later layer's forward and backward. The exception: Shape and Size run as soon as
    // they can. Their outputs are a few integers, but a gradient rule's Shape of an activation (to reshape or
    // reduce a gradient back to it) would otherwise keep the whole activation alive until the backward pass.
    auto is_shape_query = [&](int i) {
      const onnx::NodeProto& node = nodes_[i];
      return (node.domain().empty() || node.domain() == "ai.onnx") &&
             (node.op_type() == "Shape" || node.op_type() == "Size");
    };
    using Priority = std::pair<bool, int>;  // (not a shape query, model index): smallest first
    std::priority_queue<Priority, std::vector<Priority>, std::greater<Priority>> ready;
    auto make_ready = [&](int i) { ready.emplace(!is_shape_query(i), i); };
    for (int i = 0; i < num_nodes; ++i) {
      if (pending_inputs[i] == 0) make_ready(i);
    }
    std::vector<int> order;
    order.reserve(num_nodes);
    while (!ready.empty()) {
      const int node = ready.top().second;
      ready.pop();
      order.push_back(node);
      for (int consumer : consumers[node]) {
        if (--pending_inputs[consumer] == 0) make_ready(consumer);
      }
    }
    if (static_cast<int>(order.size()) != num_nodes) {
      for (int i = 0; i < num_nodes; ++i) {
        if (pending_inputs[i] > 0) {
          return absl::InvalidArgumentError(absl::StrCat(
              "graph has a cycle through ", NodeLabel(nodes_[i], OpsetOf(nodes_[i]))));
        }
      }
    }
    return order;
  }

  int OpsetOf(const onnx::NodeProto& node) const {
    const std::string domain = node.domain() == "ai.onnx" ? "" : node.domain();
    auto it = opsets_.find(domain);
    return it == opsets_.end() ? -1 : it->second;
  }

  absl::Status AddNode(const onnx::NodeProto& node) {
    const int opset = OpsetOf(node);
    PlannedNode planned;
    planned.label = NodeLabel(node, opset);
    planned.op_type = node.op_type();
    // FNV-1a of the first output's name: stable across runs, processes and plan rewrites.
    planned.random_stream = 14695981039346656037ull;
    for (const char c : node.output_size() > 0 ? node.output(0) : node.name()) {
      planned.random_stream = (planned.random_stream ^ static_cast<uint8_t>(c)) * 1099511628211ull;
    }
    if (opset < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(planned.label, ": domain '", node.domain(), "' is not imported"));
    }
    const OpRegistration* registration = registry_.Find(node.domain(), node.op_type(), opset);
    if (registration == nullptr) {
      return absl::UnimplementedError(
          absl::StrCat("unsupported op ", node.op_type(),
                       node.domain().empty() ? "" : absl::StrCat(" (domain ", node.domain(), ")"),
                       " at opset ", opset));
    }
    for (const auto& input : node.input()) {
      if (input.empty()) {
        planned.inputs.push_back(-1);
        continue;
      }
      auto it = slot_by_name_.find(input);
      if (it == slot_by_name_.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(planned.label, ": input '", input, "' is never defined"));
      }
      planned.inputs.push_back(it->second);
    }
    for (const auto& output : node.output()) {
      planned.outputs.push_back(output.empty() ? -1 : NewSlot(output));
    }
    KernelInit init(node, opset);
    TRAIND_ASSIGN_OR_RETURN(planned.kernel, registration->factory(init));
    plan_->nodes.push_back(std::move(planned));
    return absl::OkStatus();
  }

  absl::Status AddOutputs() {
    for (const auto& output : graph_.output()) {
      auto it = slot_by_name_.find(output.name());
      if (it == slot_by_name_.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("graph output '", output.name(), "' is never produced"));
      }
      TRAIND_ASSIGN_OR_RETURN(GraphValue value, DescribeValue(output, it->second));
      plan_->outputs.push_back(std::move(value));
    }
    return absl::OkStatus();
  }

  // Runs each node whose inputs are all constants once, now, and keeps its outputs as constants: the
  // Transpose of a weight, shape arithmetic on static shapes, Constant nodes. Random ops are kept, and so are
  // nodes whose outputs would be large (folding trades memory for time) or that fail (the error then
  // surfaces at run time, as without folding).
  void FoldConstants() {
    static const absl::flat_hash_set<std::string> kNondeterministic = {
        "Dropout", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Bernoulli",
        "Multinomial"};
    constexpr size_t kMaxFoldedBytes = size_t{16} << 20;
    // What one node's evaluation may allocate: a constant ConstantOfShape / Expand / Range of absurd size is refused
    // by the pool before it allocates (the node then runs at run time, under the session's budget).
    constexpr int64_t kMaxFoldingBytes = int64_t{64} << 20;
    std::vector<const Tensor*> constant_of_slot(plan_->slot_names.size(), nullptr);
    for (const auto& [slot, tensor] : plan_->constants) constant_of_slot[slot] = &tensor;
    ThreadPool& threads = ThreadPool::Default();
    std::vector<PlannedNode> kept;
    for (PlannedNode& node : plan_->nodes) {
      bool foldable = !kNondeterministic.contains(node.op_type);
      std::vector<const Tensor*> inputs;
      for (int slot : node.inputs) {
        if (slot >= 0 && constant_of_slot[slot] == nullptr) foldable = false;
        inputs.push_back(slot >= 0 ? constant_of_slot[slot] : nullptr);
      }
      std::vector<Tensor> outputs(node.outputs.size());
      if (foldable) {
        std::shared_ptr<BufferPool> buffers =
            BufferPool::Create(0, MemoryBudget::Create(kMaxFoldingBytes, "constant folding budget"));
        std::vector<Tensor*> output_pointers;
        for (size_t i = 0; i < outputs.size(); ++i) {
          output_pointers.push_back(node.outputs[i] >= 0 ? &outputs[i] : nullptr);
        }
        KernelContext context(inputs.data(), static_cast<int>(inputs.size()), output_pointers.data(),
                              static_cast<int>(output_pointers.size()), *buffers, threads);
        absl::Status status;
        try {
          status = node.kernel->Compute(context);
        } catch (const std::exception&) {
          status = absl::InternalError("exception");
        }
        foldable = status.ok();
        for (size_t i = 0; i < outputs.size() && foldable; ++i) {
          if (node.outputs[i] >= 0 && (!outputs[i].defined() || outputs[i].byte_size() > kMaxFoldedBytes)) {
            foldable = false;
          }
        }
      }
      if (!foldable) {
        kept.push_back(std::move(node));
        continue;
      }
      for (size_t i = 0; i < outputs.size(); ++i) {
        if (node.outputs[i] < 0) continue;
        plan_->constants.emplace_back(node.outputs[i], std::move(outputs[i]));
      }
      // constants may have reallocated: refresh the pointers.
      for (const auto& [slot, tensor] : plan_->constants) constant_of_slot[slot] = &tensor;
    }
    plan_->nodes = std::move(kept);
  }

  // Lets each kernel with constant inputs derive what it wants from them (Kernel::PrepareConstants).
  void PrepareConstants() {
    std::vector<const Tensor*> constant_of_slot(plan_->slot_names.size(), nullptr);
    for (const auto& [slot, tensor] : plan_->constants) constant_of_slot[slot] = &tensor;
    for (PlannedNode& node : plan_->nodes) {
      std::vector<const Tensor*> constants;
      bool any = false;
      for (int slot : node.inputs) {
        constants.push_back(slot >= 0 ? constant_of_slot[slot] : nullptr);
        any = any || constants.back() != nullptr;
      }
      if (any) prepared_bytes_ = SaturatingAdd(prepared_bytes_, node.kernel->PrepareConstants(constants));
    }
  }

  // Groups of float32 elementwise nodes become one FusedElementwiseKernel node at the place of the group's last node
  // (engine/runtime/fused_elementwise.h says what fuses and why results do not change). A group grows from a node
  // backwards: an input it reads is absorbed with its producer when that producer is fusable, has the same output
  // shape, and nothing else reads the value (not another node, not a graph output).
  void FuseElementwise() {
    const std::vector<std::optional<GraphValue>> types = StaticSlotTypes();
    const int num_nodes = static_cast<int>(plan_->nodes.size());
    const SlotUses uses = CountSlotUses();
    const std::vector<int>& readers = uses.readers;
    const std::vector<int>& producer = uses.producer;
    const std::vector<bool>& graph_output = uses.graph_output;
    auto is_float_with_shape = [&](int slot) {
      return slot >= 0 && types[slot].has_value() && types[slot]->dtype == DataType::kFloat32;
    };
    auto fusable = [&](int n) {
      const PlannedNode& node = plan_->nodes[n];
      const ElementwiseFloatFn* fn = node.kernel->elementwise_float();
      if (fn == nullptr || node.outputs.size() != 1 || !is_float_with_shape(node.outputs[0]) ||
          static_cast<int>(node.inputs.size()) != fn->arity() || fn->arity() > kMaxFusedArity) {
        return false;
      }
      const Shape& shape = types[node.outputs[0]]->dims;
      for (int slot : node.inputs) {
        if (!is_float_with_shape(slot)) return false;
        const Shape& dims = types[slot]->dims;
        const bool one_element = std::all_of(dims.begin(), dims.end(), [](int64_t d) { return d == 1; });
        if (dims != shape && !(one_element && dims.size() <= shape.size())) return false;
      }
      return true;
    };
    // members[n]: the nodes of the group whose last node is n, in schedule order; absorbed[n]: n is in a later group.
    std::vector<std::vector<int>> members(num_nodes);
    std::vector<bool> absorbed(num_nodes, false);
    for (int n = 0; n < num_nodes; ++n) {
      if (!fusable(n)) continue;
      members[n] = {n};
      const Shape& shape = types[plan_->nodes[n].outputs[0]]->dims;
      for (int slot : plan_->nodes[n].inputs) {
        const int p = producer[slot];
        if (p < 0 || members[p].empty() || absorbed[p] || readers[slot] != 1 || graph_output[slot] ||
            types[plan_->nodes[p].outputs[0]]->dims != shape) {
          continue;
        }
        members[n].insert(members[n].end(), members[p].begin(), members[p].end());
        members[p].clear();
        absorbed[p] = true;
      }
      std::sort(members[n].begin(), members[n].end());
    }
    // A group whose input is the sole use of output 0 of a node that accepts an epilogue (a BatchNormalization)
    // becomes that node's epilogue; the node moves to the group's place, which its other outputs must allow.
    // Of several such inputs the one made last, the shortest move.
    std::vector<int> epilogue_producer(num_nodes, -1);
    std::vector<bool> moved(num_nodes, false);
    for (int n = 0; n < num_nodes; ++n) {
      if (members[n].empty()) continue;
      const Shape& shape = types[plan_->nodes[n].outputs[0]]->dims;
      absl::flat_hash_set<int> made_inside;
      for (int m : members[n]) made_inside.insert(plan_->nodes[m].outputs[0]);
      for (int m : members[n]) {
        for (int slot : plan_->nodes[m].inputs) {
          const int p = producer[slot];
          if (made_inside.contains(slot) || p < 0 || p <= epilogue_producer[n] || moved[p] ||
              !members[p].empty() || absorbed[p] || plan_->nodes[p].outputs[0] != slot || readers[slot] != 1 ||
              graph_output[slot] || !is_float_with_shape(slot) || types[slot]->dims != shape ||
              !plan_->nodes[p].kernel->AcceptsEpilogue() || ReadBetween(plan_->nodes[p].outputs, 1, p, n)) {
            continue;
          }
          epilogue_producer[n] = p;
        }
      }
      if (epilogue_producer[n] >= 0) moved[epilogue_producer[n]] = true;
    }
    std::vector<PlannedNode> nodes;
    for (int n = 0; n < num_nodes; ++n) {
      if (absorbed[n] || moved[n]) continue;
      if (epilogue_producer[n] >= 0) {
        nodes.push_back(MakeEpilogueNode(epilogue_producer[n], members[n], types));
      } else if (members[n].size() < 2) {
        nodes.push_back(std::move(plan_->nodes[n]));
      } else {
        nodes.push_back(MakeFusedNode(members[n], types));
      }
    }
    plan_->nodes = std::move(nodes);
  }

  // Per slot of the current node list: how many node inputs read it, the node that makes it (-1: none), whether it
  // is a graph output.
  struct SlotUses {
    std::vector<int> readers, producer;
    std::vector<bool> graph_output;
  };
  SlotUses CountSlotUses() const {
    SlotUses uses;
    uses.readers.assign(plan_->slot_names.size(), 0);
    uses.producer.assign(plan_->slot_names.size(), -1);
    uses.graph_output.assign(plan_->slot_names.size(), false);
    for (const GraphValue& output : plan_->outputs) uses.graph_output[output.slot] = true;
    for (int n = 0; n < static_cast<int>(plan_->nodes.size()); ++n) {
      for (int slot : plan_->nodes[n].inputs) {
        if (slot >= 0) ++uses.readers[slot];
      }
      for (int slot : plan_->nodes[n].outputs) {
        if (slot >= 0) uses.producer[slot] = n;
      }
    }
    return uses;
  }

  // A 2x2 max pool (Kernel::IsChannelsLastMaxPool2x2) whose input is the sole use of output 0 of a node that can
  // pool what it writes (Kernel::AcceptsMaxPool2x2: a ChannelsLastBatchNormalization with or without its epilogue)
  // is done by that node, which stays in its place and now makes the pool's output: the full-size value is never
  // written nor read again. In practice forward plans only: a training plan keeps that value for the gradients
  // (ReluGrad, MaxPoolGrad read it too).
  void FuseMaxPools() {
    const int num_nodes = static_cast<int>(plan_->nodes.size());
    const SlotUses uses = CountSlotUses();
    const std::vector<int>& readers = uses.readers;
    const std::vector<int>& producer = uses.producer;
    const std::vector<bool>& graph_output = uses.graph_output;
    std::vector<bool> pooled_by_producer(num_nodes, false);
    for (int n = 0; n < num_nodes; ++n) {
      PlannedNode& pool = plan_->nodes[n];
      if (!pool.kernel->IsChannelsLastMaxPool2x2() || pool.inputs.size() != 1 || pool.outputs.size() != 1 ||
          pool.inputs[0] < 0 || pool.outputs[0] < 0) {
        continue;
      }
      const int slot = pool.inputs[0];
      const int p = producer[slot];
      if (p < 0 || readers[slot] != 1 || graph_output[slot] || plan_->nodes[p].outputs[0] != slot ||
          !plan_->nodes[p].kernel->AcceptsMaxPool2x2()) {
        continue;
      }
      PlannedNode& node = plan_->nodes[p];
      node.kernel->SetMaxPool2x2();
      node.outputs[0] = pool.outputs[0];
      node.label = absl::StrCat(node.label, " pooled by '", pool.label, "'");
      node.op_type = absl::StrCat(node.op_type, "+MaxPool");
      pooled_by_producer[n] = true;
    }
    std::vector<PlannedNode> nodes;
    for (int n = 0; n < num_nodes; ++n) {
      if (!pooled_by_producer[n]) nodes.push_back(std::move(plan_->nodes[n]));
    }
    plan_->nodes = std::move(nodes);
  }

  // Whether a node in (first, last] reads one of outputs[from...].
  bool ReadBetween(const std::vector<int>& outputs, size_t from, int first, int last) const {
    for (int n = first + 1; n <= last; ++n) {
      for (int slot : plan_->nodes[n].inputs) {
        for (size_t k = from; k < outputs.size(); ++k) {
          if (slot >= 0 && slot == outputs[k]) return true;
        }
      }
    }
    return false;
  }

  // The group of `members` (schedule order), its input slots and its op types.
  struct GroupParts {
    std::unique_ptr<ElementwiseGroup> group;
    std::vector<int> inputs;
    std::vector<std::string> op_types;
  };
  GroupParts MakeGroup(const std::vector<int>& members, const std::vector<std::optional<GraphValue>>& types) {
    const Shape& shape = types[plan_->nodes[members.back()].outputs[0]]->dims;
    absl::flat_hash_map<int, int> step_of_slot, input_of_slot;
    std::vector<std::unique_ptr<Kernel>> kernels;
    std::vector<ElementwiseGroup::Step> steps;
    std::vector<bool> input_is_scalar;
    GroupParts parts;
    for (int n : members) {
      PlannedNode& node = plan_->nodes[n];
      ElementwiseGroup::Step step;
      step.fn = node.kernel->elementwise_float();
      for (int slot : node.inputs) {
        if (auto it = step_of_slot.find(slot); it != step_of_slot.end()) {
          step.operands.push_back(-1 - it->second);
          continue;
        }
        auto [it, added] = input_of_slot.emplace(slot, static_cast<int>(parts.inputs.size()));
        if (added) {
          parts.inputs.push_back(slot);
          input_is_scalar.push_back(types[slot]->dims != shape);
        }
        step.operands.push_back(it->second);
      }
      step_of_slot[node.outputs[0]] = static_cast<int>(steps.size());
      steps.push_back(std::move(step));
      kernels.push_back(std::move(node.kernel));
      parts.op_types.push_back(node.op_type);
    }
    parts.group = std::make_unique<ElementwiseGroup>(std::move(kernels), std::move(steps), std::move(input_is_scalar));
    return parts;
  }

  PlannedNode MakeFusedNode(const std::vector<int>& members, const std::vector<std::optional<GraphValue>>& types) {
    const PlannedNode& last = plan_->nodes[members.back()];
    PlannedNode fused;
    fused.label = absl::StrCat(last.label, " fused with ", members.size() - 1, " elementwise nodes before it");
    fused.outputs = {last.outputs[0]};
    GroupParts parts = MakeGroup(members, types);
    fused.op_type = absl::StrCat("Fused(", absl::StrJoin(parts.op_types, "+"), ")");
    fused.inputs = std::move(parts.inputs);
    fused.kernel = std::make_unique<FusedElementwiseKernel>(std::move(*parts.group));
    return fused;
  }

  // Node `producer` with the group of `members` as its epilogue: output 0 becomes the group's output, the group's
  // inputs but the producer's value follow the producer's own.
  PlannedNode MakeEpilogueNode(int producer, const std::vector<int>& members,
                               const std::vector<std::optional<GraphValue>>& types) {
    PlannedNode node = std::move(plan_->nodes[producer]);
    const PlannedNode& last = plan_->nodes[members.back()];
    const int value_slot = node.outputs[0];
    node.label = absl::StrCat(node.label, " with its elementwise successors up to '", last.label, "'");
    node.outputs[0] = last.outputs[0];
    GroupParts parts = MakeGroup(members, types);
    node.op_type = absl::StrCat(node.op_type, "+", absl::StrJoin(parts.op_types, "+"));
    const int first_input = static_cast<int>(node.inputs.size());
    int value_input = -1;
    for (size_t i = 0; i < parts.inputs.size(); ++i) {
      if (parts.inputs[i] == value_slot) {
        value_input = static_cast<int>(i);
      } else {
        node.inputs.push_back(parts.inputs[i]);
      }
    }
    node.kernel->SetEpilogue(
        std::make_shared<const ElementwiseEpilogue>(std::move(*parts.group), value_input, first_input));
    return node;
  }

  // Dtype and dims of every slot whose type shape inference (or the graph, or a constant) states fully.
  std::vector<std::optional<GraphValue>> StaticSlotTypes() const {
    std::vector<std::optional<GraphValue>> types(plan_->slot_names.size());
    absl::flat_hash_map<std::string, const onnx::ValueInfoProto*> info_by_name;
    for (const auto* infos : {&graph_.input(), &graph_.output(), &graph_.value_info()}) {
      for (const auto& info : *infos) info_by_name.try_emplace(info.name(), &info);
    }
    for (size_t slot = 0; slot < types.size(); ++slot) {
      const std::string& name = plan_->slot_names[slot];
      // A value the channels-last pass made: the type of the NCHW value it stands for, dims channels-last.
      auto alias = size_aliases_.find(name);
      auto info = info_by_name.find(alias == size_aliases_.end() ? name : alias->second);
      if (info == info_by_name.end()) continue;
      absl::StatusOr<GraphValue> value = DescribeValue(*info->second, static_cast<int>(slot));
      if (!value.ok() || !value->has_shape ||
          std::any_of(value->dims.begin(), value->dims.end(), [](int64_t d) { return d < 0; })) {
        continue;
      }
      if (alias != size_aliases_.end() && IsChannelsLastValue(name)) value->dims = ChannelsLastShape(value->dims);
      types[slot] = *std::move(value);
    }
    for (const auto& [slot, tensor] : plan_->constants) {
      GraphValue value;
      value.slot = slot;
      value.dtype = tensor.dtype();
      value.has_shape = true;
      value.dims = tensor.shape();
      types[slot] = std::move(value);
    }
    return types;
  }

  // For each slot, find the last node that reads it; graph outputs are never released.
  void PlanReleases() {
    const int num_slots = static_cast<int>(plan_->slot_names.size());
    std::vector<int> last_use(num_slots, -1);
    std::vector<bool> keep(num_slots, false);
    for (const GraphValue& output : plan_->outputs) keep[output.slot] = true;
    for (const auto& [slot, tensor] : plan_->constants) keep[slot] = true;  // Plan owns them.
    for (int n = 0; n < static_cast<int>(plan_->nodes.size()); ++n) {
      const PlannedNode& node = plan_->nodes[n];
      for (int slot : node.inputs) {
        if (slot >= 0) last_use[slot] = n;
      }
      // An output nobody reads is dropped right after its producer.
      for (int slot : node.outputs) {
        if (slot >= 0 && last_use[slot] < n) last_use[slot] = n;
      }
    }
    for (int slot = 0; slot < num_slots; ++slot) {
      if (!keep[slot] && last_use[slot] >= 0) {
        plan_->nodes[last_use[slot]].release_after.push_back(slot);
      }
    }
  }

  // The static byte size of every slot with a known shape (graph inputs, outputs, value_info of shape inference,
  // constants); -1 where unknown. Saturates at INT64_MAX.
  std::vector<int64_t> StaticSlotBytes() const {
    std::vector<int64_t> bytes(plan_->slot_names.size(), -1);
    auto size_of = [](const onnx::TypeProto& type) -> int64_t {
      if (!type.has_tensor_type() || !type.tensor_type().has_shape()) return -1;
      absl::StatusOr<DataType> dtype = DataTypeFromOnnx(type.tensor_type().elem_type());
      if (!dtype.ok() || ElementSize(*dtype) == 0) return -1;
      int64_t count = 1;
      for (const auto& dim : type.tensor_type().shape().dim()) {
        if (!dim.has_dim_value() || dim.dim_value() < 0) return -1;
        if (!CheckedMul(count, dim.dim_value(), &count)) return std::numeric_limits<int64_t>::max();
      }
      int64_t total = 0;
      return CheckedMul(count, static_cast<int64_t>(ElementSize(*dtype)), &total) ? total
                                                                                    : std::numeric_limits<int64_t>::max();
    };
    absl::flat_hash_map<std::string, int64_t> size_by_name;
    for (const auto* infos : {&graph_.input(), &graph_.output(), &graph_.value_info()}) {
      for (const auto& info : *infos) size_by_name.try_emplace(info.name(), size_of(info.type()));
    }
    for (size_t slot = 0; slot < bytes.size(); ++slot) {
      // A value the channels-last pass made has the size of the NCHW value it stands for.
      auto alias = size_aliases_.find(plan_->slot_names[slot]);
      auto size = size_by_name.find(alias == size_aliases_.end() ? plan_->slot_names[slot] : alias->second);
      if (size != size_by_name.end()) bytes[slot] = size->second;
    }
    for (const auto& [slot, tensor] : plan_->constants) bytes[slot] = static_cast<int64_t>(tensor.byte_size());
    return bytes;
  }

  static int64_t SaturatingAdd(int64_t a, int64_t b) {
    return a > std::numeric_limits<int64_t>::max() - b ? std::numeric_limits<int64_t>::max() : a + b;
  }

  // PlanMemory (plan.h): the schedule walked with the executor's allocations and releases.
  void EstimateMemory() {
    const std::vector<int64_t> bytes = StaticSlotBytes();
    auto pooled = [&](int slot) -> int64_t {
      if (bytes[slot] < 0) return 0;
      if (bytes[slot] > (int64_t{1} << 62)) return std::numeric_limits<int64_t>::max();
      return static_cast<int64_t>(BufferPool::BucketCapacity(static_cast<size_t>(bytes[slot])));
    };
    PlanMemory& memory = plan_->memory;
    for (const GraphValue& input : plan_->inputs) {
      memory.input_bytes = SaturatingAdd(memory.input_bytes, std::max<int64_t>(bytes[input.slot], 0));
    }
    for (const auto& [slot, tensor] : plan_->constants) {
      memory.constant_bytes = SaturatingAdd(memory.constant_bytes, bytes[slot]);
    }
    memory.constant_bytes = SaturatingAdd(memory.constant_bytes, prepared_bytes_);  // kernels' copies of constants
    std::vector<bool> allocated(bytes.size(), false);
    int64_t live = 0;
    for (const PlannedNode& node : plan_->nodes) {
      for (int slot : node.outputs) {
        if (slot < 0) continue;
        if (bytes[slot] < 0) ++memory.unknown_sizes;
        allocated[slot] = true;
        live = SaturatingAdd(live, pooled(slot));
      }
      memory.peak_bytes = std::max(memory.peak_bytes, live);
      for (int slot : node.release_after) {
        if (allocated[slot] && live != std::numeric_limits<int64_t>::max()) live -= pooled(slot);
      }
    }
  }

  // A graph input can be updated in place only by its sole reader, and only if no graph output shows its old value.
  void PlanDonations() {
    const int num_slots = static_cast<int>(plan_->slot_names.size());
    std::vector<Plan::DonationTarget> reader(num_slots);
    std::vector<int> reads(num_slots, 0);
    for (int n = 0; n < static_cast<int>(plan_->nodes.size()); ++n) {
      const std::vector<int>& inputs = plan_->nodes[n].inputs;
      for (int k = 0; k < static_cast<int>(inputs.size()); ++k) {
        if (inputs[k] < 0) continue;
        ++reads[inputs[k]];
        reader[inputs[k]] = {n, k};
      }
    }
    for (const GraphValue& output : plan_->outputs) reads[output.slot] += 2;
    for (const GraphValue& input : plan_->inputs) {
      plan_->donation_targets.push_back(reads[input.slot] == 1 ? reader[input.slot] : Plan::DonationTarget());
    }
  }

  const onnx::GraphProto& graph_;
  // The graph's nodes as planned: its own, after FoldTransposes.
  std::vector<onnx::NodeProto> nodes_;
  const OpRegistry& registry_;
  const CompileOptions options_;
  absl::flat_hash_map<std::string, int> opsets_;
  absl::flat_hash_map<std::string, int> slot_by_name_;
  Plan* plan_ = nullptr;
  int64_t prepared_bytes_ = 0;  // What kernels keep of the constants (PrepareConstants).
  absl::flat_hash_map<std::string, std::string> size_aliases_;  // ChannelsLastResult::same_size_as
  std::optional<GraphValueFacts> value_facts_;  // ValueFacts(), once the first pattern pass asks
};

}  // namespace

int Plan::InputIndex(const std::string& name) const {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int Plan::OutputIndex(const std::string& name) const {
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

absl::StatusOr<std::shared_ptr<const Plan>> Compile(const onnx::ModelProto& model,
                                                    const CompileOptions& options) {
  const OpRegistry& registry = options.registry ? *options.registry : OpRegistry::Global();
  Compiler compiler(model, registry, options);
  return compiler.Build();
}

}  // namespace traind::engine
