// What the fuzz targets and the hostile-model tests do with a client's bytes, as the daemon would: load and
// validate a model, compile it, run it; generate training artifacts, train a step, step the optimizer, evaluate.
// Every stage runs under a memory budget and the status of the first stage that refuses is returned; a crash, a
// hang or a sanitizer report anywhere is the bug these harnesses look for.
#ifndef TRAIND_TESTS_FUZZ_HARNESS_H_
#define TRAIND_TESTS_FUZZ_HARNESS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/core/tensor.h"
#include "engine/runtime/plan.h"

namespace traind::fuzz {

struct HarnessLimits {
  // The session memory budget of every run (the daemon's --session_memory_budget).
  int64_t memory_budget_bytes = int64_t{256} << 20;
  // What decoding one model may take.
  int64_t max_decoded_bytes = int64_t{256} << 20;
  // Inputs are made only up to this size (a model declaring a huge input is refused, as the wire would).
  int64_t max_input_bytes = int64_t{16} << 20;
  int num_threads = 1;
};

// One tensor per declared input: dynamic dims become 1; floats a fixed pattern in [-1, 1], integers 0 (valid
// indices), bools false. kResourceExhausted beyond `max_bytes` in total; kUnimplemented for dtypes it cannot
// make.
absl::StatusOr<std::vector<engine::Tensor>> MakeInputs(absl::Span<const engine::GraphValue> inputs,
                                                       int64_t max_bytes);

// LoadModelFromBytes (external data relative to `external_data_dir`, empty: none), Compile, one run.
absl::Status LoadCompileAndRun(absl::string_view model_bytes, const HarnessLimits& limits,
                               const std::string& external_data_dir = "");

// LoadModelFromBytes, then GenerateArtifacts (MSE on the first floating-point output, AdamW with clipping), a
// Module and Optimizer under the budget, two TrainSteps with Optimizer::Step, an EvalStep.
absl::Status GenerateAndTrain(absl::string_view model_bytes, const HarnessLimits& limits);

// GenerateArtifacts of a fixed small forward model (input x [2,3] -> Gemm -> Relu -> y [2,4]) with
// `loss_graph_bytes` as its ONNX loss graph (its inputs other than y are targets), then training as above.
absl::Status TrainWithLossGraph(absl::string_view loss_graph_bytes, const HarnessLimits& limits);

// The fixed forward model of TrainWithLossGraph, serialized (the seed corpus uses it).
std::string SmallForwardModel();

}  // namespace traind::fuzz

#endif  // TRAIND_TESTS_FUZZ_HARNESS_H_
