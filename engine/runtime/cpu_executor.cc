#include "engine/runtime/cpu_executor.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace traind::engine {

absl::Status CheckInputMatchesDeclaration(const GraphValue& declared, const Tensor& tensor) {
  if (!tensor.defined()) {
    return absl::InvalidArgumentError(absl::StrCat("input '", declared.name, "' is empty"));
  }
  if (tensor.dtype() != declared.dtype) {
    return absl::InvalidArgumentError(absl::StrCat("input '", declared.name, "' has dtype ",
                                                   DataTypeName(tensor.dtype()), ", expected ",
                                                   DataTypeName(declared.dtype)));
  }
  if (!declared.has_shape) return absl::OkStatus();
  bool matches = declared.dims.size() == tensor.shape().size();
  for (size_t i = 0; matches && i < declared.dims.size(); ++i) {
    matches = declared.dims[i] < 0 || declared.dims[i] == tensor.shape()[i];
  }
  if (!matches) {
    return absl::InvalidArgumentError(absl::StrCat("input '", declared.name, "' has shape ",
                                                   ShapeToString(tensor.shape()), ", expected ",
                                                   ShapeToString(declared.dims),
                                                   " (-1 = any)"));
  }
  return absl::OkStatus();
}

namespace {

// SplitMix64's finaliser: a bijective mix, so distinct (seed, run, node) triples give well-spread seeds.
uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

CpuExecutor::CpuExecutor(ThreadPool* threads, std::shared_ptr<BufferPool> buffers, uint64_t random_seed)
    : threads_(threads ? *threads : ThreadPool::Default()),
      buffers_(buffers ? std::move(buffers) : BufferPool::Create()),
      random_seed_(random_seed) {}

uint64_t RunRandomSeed(uint64_t session_seed, uint64_t run_index) {
  return session_seed != 0 ? Mix(session_seed ^ Mix(run_index)) : 0;
}

absl::Status RunNodeOnCpu(const PlannedNode& node, std::vector<Tensor>& slots,
                          BufferPool& buffers, ThreadPool& threads, uint64_t run_seed,
                          absl::Span<const int> donated_positions) {
  absl::InlinedVector<const Tensor*, 8> node_inputs;
  absl::InlinedVector<Tensor*, 4> node_outputs;
  for (int slot : node.inputs) {
    // A slot can be empty only if its producer was skipped, which the plan rules out; still,
    // pass nullptr rather than an undefined tensor so kernels see "omitted".
    node_inputs.push_back(slot >= 0 && slots[slot].defined() ? &slots[slot] : nullptr);
  }
  for (int slot : node.outputs) node_outputs.push_back(slot >= 0 ? &slots[slot] : nullptr);
  KernelContext context(node_inputs.data(), static_cast<int>(node_inputs.size()), node_outputs.data(),
                        static_cast<int>(node_outputs.size()), buffers, threads);
  if (run_seed != 0) context.set_random_seed(Mix(run_seed + node.random_stream) | 1);
  context.set_donated_inputs(donated_positions);
  absl::Status status;
  try {
    status = node.kernel->Compute(context);
  } catch (const std::bad_alloc&) {
    status = absl::ResourceExhaustedError("out of memory");
  } catch (const std::exception& e) {
    status = absl::InternalError(absl::StrCat("exception: ", e.what()));
  }
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat(node.label, ": ", status.message()));
  }
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    if (node.outputs[i] >= 0 && !slots[node.outputs[i]].defined()) {
      return absl::InternalError(absl::StrCat(node.label, ": kernel did not produce output ", i));
    }
  }
  return absl::OkStatus();
}

namespace {

// (node, input position) pairs of the donations this run honours, sorted: a donated input goes to its sole reader,
// unless another input of the run shares its buffer (the reader would then change a value someone else reads).
absl::StatusOr<std::vector<std::pair<int, int>>> HonouredDonations(const Plan& plan, absl::Span<const Tensor> inputs,
                                                                   absl::Span<const int> donated) {
  std::vector<std::pair<int, int>> honoured;
  if (donated.empty()) return honoured;
  absl::flat_hash_map<const Buffer*, int> sharers;
  for (const Tensor& input : inputs) ++sharers[input.buffer().get()];
  for (const auto& [slot, constant] : plan.constants) ++sharers[constant.buffer().get()];
  for (const int index : donated) {
    if (index < 0 || static_cast<size_t>(index) >= plan.inputs.size()) {
      return absl::InvalidArgumentError(absl::StrCat("donated input ", index, " is not an input of the plan"));
    }
    const Plan::DonationTarget& target = plan.donation_targets[index];
    if (target.node >= 0 && sharers[inputs[index].buffer().get()] == 1) {
      honoured.emplace_back(target.node, target.position);
    }
  }
  std::sort(honoured.begin(), honoured.end());
  honoured.erase(std::unique(honoured.begin(), honoured.end()), honoured.end());
  return honoured;
}

}  // namespace

absl::StatusOr<std::vector<Tensor>> CpuExecutor::Run(const Plan& plan,
                                                     absl::Span<const Tensor> inputs) const {
  return RunWithOptions(plan, inputs, RunOptions());
}

absl::StatusOr<std::vector<Tensor>> CpuExecutor::RunWithOptions(const Plan& plan, absl::Span<const Tensor> inputs,
                                                                const RunOptions& options) const {
  if (inputs.size() != plan.inputs.size()) {
    return absl::InvalidArgumentError(absl::StrCat("expected ", plan.inputs.size(),
                                                   " inputs, got ", inputs.size()));
  }
  // oneDNN, called by kernels on this thread, then uses the same thread count as ParallelFor.
  threads_.MakeCurrent();
  const uint64_t run_seed = RunRandomSeed(random_seed_, runs_.fetch_add(1));
  std::vector<Tensor> slots(plan.num_slots);
  for (const auto& [slot, tensor] : plan.constants) slots[slot] = tensor;
  for (size_t i = 0; i < inputs.size(); ++i) {
    absl::Status status = CheckInputMatchesDeclaration(plan.inputs[i], inputs[i]);
    if (!status.ok()) return status;
    slots[plan.inputs[i].slot] = inputs[i];
  }

  using Donations = std::vector<std::pair<int, int>>;
  TRAIND_ASSIGN_OR_RETURN(const Donations donations, HonouredDonations(plan, inputs, options.donated_inputs));
  std::vector<int> donated_positions;
  for (const auto& [node, position] : donations) donated_positions.push_back(position);
  size_t next_donation = 0;

  if (profile_ != nullptr) {
    profile_->seconds_per_node.resize(plan.nodes.size());
    ++profile_->runs;
  }
  for (size_t node_index = 0; node_index < plan.nodes.size(); ++node_index) {
    const PlannedNode& node = plan.nodes[node_index];
    const auto node_start =
        profile_ != nullptr ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
    absl::Span<const int> donated_here;
    if (next_donation < donations.size() && donations[next_donation].first == static_cast<int>(node_index)) {
      size_t end = next_donation;
      while (end < donations.size() && donations[end].first == static_cast<int>(node_index)) ++end;
      donated_here = absl::MakeConstSpan(donated_positions).subspan(next_donation, end - next_donation);
      next_donation = end;
    }
    absl::Status status = RunNodeOnCpu(node, slots, *buffers_, threads_, run_seed, donated_here);
    if (profile_ != nullptr) {
      profile_->seconds_per_node[node_index] +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - node_start).count();
    }
    if (!status.ok()) return status;
    for (int slot : node.release_after) slots[slot] = Tensor();
  }

  std::vector<Tensor> outputs;
  outputs.reserve(plan.outputs.size());
  for (const GraphValue& output : plan.outputs) outputs.push_back(slots[output.slot]);
  return outputs;
}

}  // namespace traind::engine
