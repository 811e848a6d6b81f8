// engine_reference: trains artifact files in process with engine/training's Module + Optimizer, as ONNX Runtime's
// training loop does (module(batch); optimizer.step(); [scheduler.step();] module.lazy_reset_grad()), so that the
// Python client's tests can compare what the daemon computed over gRPC with what the engine computes on the same
// files and batches.
//
//   engine_reference --artifacts=DIR [--prefix=P] --batches=DIR --out=DIR [--threads=N] [--seed=S]
//                    [--scheduler=WARMUP,TOTAL,INITIAL_LR] [--eval=DIR]
//
// --batches holds one directory per step, in name order, each with input_<k>.npy for the k-th training input
// (Module::TrainingInputNames() order); --eval one such directory for the eval model. Writes to --out:
// losses.npy (float32 [steps]), learning_rates.npy (the rate each step used), eval_loss.npy and eval_output_<k>.npy
// (the eval model's outputs after the loss), and checkpoint (the final state with optimizer state).
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/core/status_macros.h"
#include "engine/io/npy.h"
#include "engine/training/checkpoint.h"
#include "engine/training/lr_scheduler.h"
#include "engine/training/module.h"

ABSL_FLAG(std::string, artifacts, "", "Directory with the artifact files.");
ABSL_FLAG(std::string, prefix, "", "File-name prefix of the artifacts.");
ABSL_FLAG(std::string, batches, "", "Directory of per-step batch directories.");
ABSL_FLAG(std::string, eval, "", "Directory of the eval batch (optional).");
ABSL_FLAG(std::string, out, "", "Output directory.");
ABSL_FLAG(int, threads, 2, "Intra-op threads (as the daemon's sessions use).");
ABSL_FLAG(uint64_t, seed, 0, "Dropout seed (0: random).");
ABSL_FLAG(std::string, scheduler, "", "WARMUP,TOTAL,INITIAL_LR: ONNX Runtime's LinearLRScheduler.");

namespace traind::engine {
namespace {

absl::StatusOr<Tensor> FloatScalars(const std::vector<float>& values) {
  TRAIND_ASSIGN_OR_RETURN(Tensor tensor, Tensor::Allocate(DataType::kFloat32, {static_cast<int64_t>(values.size())}));
  std::copy(values.begin(), values.end(), tensor.mutable_data<float>());
  return tensor;
}

absl::StatusOr<NamedTensors> ReadBatch(const std::string& directory, const std::vector<std::string>& names) {
  NamedTensors batch;
  for (size_t k = 0; k < names.size(); ++k) {
    TRAIND_ASSIGN_OR_RETURN(Tensor tensor, ReadNpy(absl::StrCat(directory, "/input_", k, ".npy")));
    batch.emplace_back(names[k], std::move(tensor));
  }
  return batch;
}

absl::Status Run() {
  const std::string dir = absl::GetFlag(FLAGS_artifacts) + "/" + absl::GetFlag(FLAGS_prefix);
  const std::string out = absl::GetFlag(FLAGS_out);
  TRAIND_ASSIGN_OR_RETURN(CheckpointState state, LoadCheckpoint(dir + "checkpoint"));
  ModuleOptions options;
  options.num_threads = absl::GetFlag(FLAGS_threads);
  options.random_seed = absl::GetFlag(FLAGS_seed);
  TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<Module> module,
                          Module::CreateFromFiles(dir + "training_model.onnx", dir + "eval_model.onnx", &state, options));
  TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                          Optimizer::CreateFromFile(dir + "optimizer_model.onnx", module.get()));
  if (const std::string spec = absl::GetFlag(FLAGS_scheduler); !spec.empty()) {
    const std::vector<std::string> parts = absl::StrSplit(spec, ',');
    int64_t warmup = 0, total = 0;
    float initial = 0;
    if (parts.size() != 3 || !absl::SimpleAtoi(parts[0], &warmup) || !absl::SimpleAtoi(parts[1], &total) ||
        !absl::SimpleAtof(parts[2], &initial)) {
      return absl::InvalidArgumentError("--scheduler is WARMUP,TOTAL,INITIAL_LR");
    }
    // ONNX Runtime's LinearLRScheduler(...): SetInitialLearningRate, then the schedule's rate at the current step;
    // its step() after each optimizer step is the engine's scheduler running in Optimizer::Step.
    TRAIND_RETURN_IF_ERROR(optimizer->SetInitialLearningRate(initial));
    TRAIND_ASSIGN_OR_RETURN(LearningRateScheduler scheduler, LearningRateScheduler::LinearWarmupDecay(warmup, total));
    TRAIND_RETURN_IF_ERROR(optimizer->SetScheduler(scheduler));
  }

  std::vector<std::string> steps;
  for (const auto& entry : std::filesystem::directory_iterator(absl::GetFlag(FLAGS_batches))) {
    if (entry.is_directory()) steps.push_back(entry.path().string());
  }
  std::sort(steps.begin(), steps.end());
  std::vector<float> losses, rates;
  for (const std::string& step : steps) {
    TRAIND_ASSIGN_OR_RETURN(NamedTensors batch, ReadBatch(step, module->TrainingInputNames()));
    rates.push_back(optimizer->GetLearningRate());
    module->SetTrainingMode(true);
    TRAIND_ASSIGN_OR_RETURN(NamedTensors outputs, module->Run(batch));
    losses.push_back(outputs.front().second.data<float>()[0]);
    TRAIND_ASSIGN_OR_RETURN(OptimizerStepResult result, optimizer->Step());
    if (result.skipped) return absl::InternalError(absl::StrCat("step ", step, " was skipped"));
    module->LazyResetGrad();
  }
  TRAIND_ASSIGN_OR_RETURN(Tensor loss_values, FloatScalars(losses));
  TRAIND_RETURN_IF_ERROR(WriteNpy(out + "/losses.npy", loss_values));
  TRAIND_ASSIGN_OR_RETURN(Tensor rate_values, FloatScalars(rates));
  TRAIND_RETURN_IF_ERROR(WriteNpy(out + "/learning_rates.npy", rate_values));

  if (const std::string eval = absl::GetFlag(FLAGS_eval); !eval.empty()) {
    TRAIND_ASSIGN_OR_RETURN(NamedTensors batch, ReadBatch(eval, module->EvalInputNames()));
    module->SetTrainingMode(false);
    TRAIND_ASSIGN_OR_RETURN(NamedTensors outputs, module->Run(batch));
    for (size_t k = 0; k < outputs.size(); ++k) {
      const std::string name = k == 0 ? "eval_loss.npy" : absl::StrCat("eval_output_", k - 1, ".npy");
      TRAIND_RETURN_IF_ERROR(WriteNpy(out + "/" + name, outputs[k].second));
    }
  }
  return SaveCheckpoint(out + "/checkpoint", state);
}

}  // namespace
}  // namespace traind::engine

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const absl::Status status = traind::engine::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "engine_reference: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
