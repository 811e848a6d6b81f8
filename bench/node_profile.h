// What the benchmarks' --profile prints: a CpuExecutor profile summed per op type (with an optional phase suffix
// per node, e.g. " (bwd)"), plus extra timed entries (the optimizer step), then the N slowest nodes with their inputs.
#ifndef TRAIND_BENCH_NODE_PROFILE_H_
#define TRAIND_BENCH_NODE_PROFILE_H_

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_join.h"
#include "engine/runtime/cpu_executor.h"
#include "engine/runtime/plan.h"

namespace traind::engine {

struct ProfileExtra {
  std::string name;
  double seconds_per_run;
};

// `unit` names a run ("run", "step"); `phase_of(node)` is appended to its op type in the per-op table.
inline void PrintNodeProfile(const Plan& plan, const CpuExecutor::Profile& profile, const char* unit,
                             const std::vector<ProfileExtra>& extras, int slowest_nodes,
                             const std::function<std::string(const PlannedNode&)>& phase_of = nullptr) {
  if (profile.runs == 0) return;
  const double runs = static_cast<double>(profile.runs);
  std::map<std::string, std::pair<double, int>> by_op;  // seconds over all runs, node count
  double total = 0;
  for (size_t i = 0; i < profile.seconds_per_node.size(); ++i) {
    auto& entry = by_op[plan.nodes[i].op_type + (phase_of ? phase_of(plan.nodes[i]) : std::string())];
    entry.first += profile.seconds_per_node[i];
    entry.second += 1;
    total += profile.seconds_per_node[i];
  }
  for (const ProfileExtra& extra : extras) {
    by_op[extra.name] = {extra.seconds_per_run * runs, 1};
    total += extra.seconds_per_run * runs;
  }
  std::vector<std::pair<double, std::string>> sorted;
  for (const auto& [op, entry] : by_op) sorted.emplace_back(entry.first, op);
  std::sort(sorted.rbegin(), sorted.rend());
  std::fprintf(stderr, "profile (%lld %ss): per %s %.3f ms in kernels%s\n", static_cast<long long>(profile.runs), unit,
               unit, 1e3 * total / runs, extras.empty() ? "" : " + extras");
  for (const auto& [seconds, op] : sorted) {
    std::fprintf(stderr, "  %-32s %3d nodes %9.3f ms %5.1f%%\n", op.c_str(), by_op[op].second, 1e3 * seconds / runs,
                 100 * seconds / total);
  }
  if (slowest_nodes <= 0) return;
  std::vector<std::pair<double, size_t>> nodes;
  for (size_t i = 0; i < profile.seconds_per_node.size(); ++i) nodes.emplace_back(profile.seconds_per_node[i], i);
  std::sort(nodes.rbegin(), nodes.rend());
  std::fprintf(stderr, "the %d slowest nodes:\n", slowest_nodes);
  for (size_t k = 0; k < nodes.size() && k < static_cast<size_t>(slowest_nodes); ++k) {
    const PlannedNode& node = plan.nodes[nodes[k].second];
    std::vector<std::string> inputs;
    for (int slot : node.inputs) inputs.push_back(slot < 0 ? "" : plan.slot_names[slot]);
    std::fprintf(stderr, "  %8.3f ms  %s <- %s\n", 1e3 * nodes[k].first / runs, node.label.c_str(),
                 absl::StrJoin(inputs, ", ").c_str());
  }
}

}  // namespace traind::engine

#endif  // TRAIND_BENCH_NODE_PROFILE_H_
