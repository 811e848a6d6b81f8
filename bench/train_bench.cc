// train_bench: full training steps (forward, loss, backward, optimizer) of an ONNX model on .npy data, in process,
// through the training API the daemon serves: GenerateArtifacts, then Module + Optimizer (engine/training/module.h).
//
//   bazel run -c opt //bench:train_bench -- --model=M.onnx --input=input=x.npy --target=target=y.npy
//       [--loss=cross_entropy | mse | l1 | bce_with_logits | "0.4*mse:out1:t1,0.6*l1:out2:t2"]
//       [--optimizer=adamw|sgd] [--lr=1e-3 ...] [--threads=2] [--warmup=10] [--steps=20] [--min_time=3]
//       [--profile] [--dump=DIR] [--json]
//
// Each step is TrainingStep(): Module::TrainStep (forward + loss + backward into the gradient accumulators), then
// Optimizer::Step and Module::LazyResetGrad — exactly one step of a daemon session's TrainStep RPC. Every step trains
// on the same batch (as ../shared/bench/torch_train_bench.py does). --device gpu[:N] trains on the OpenCL GPU
// executor and reports the transfers between host and device per step. Reported: the median ms/step of the timed
// steps, p10/p90, peak RSS of the process and the peak bytes the training model's buffer pool had handed out at
// once. --dump DIR writes losses.npy (the loss before each step, warm-up included, in order), grads/<param>.npy
// (the first step's gradients) and params/<param>.npy (the trainable parameters after the last step).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/bench_stats.h"
#include "bench/node_profile.h"
#include "engine/core/status_macros.h"
#include "engine/core/tensor.h"
#include "engine/gpu/gpu_executor.h"
#include "engine/io/npy.h"
#include "engine/model/model_loader.h"
#include "engine/runtime/cpu_executor.h"
#include "engine/runtime/plan.h"
#include "engine/training/artifacts.h"
#include "engine/training/module.h"

extern "C" void openblas_set_num_threads(int num_threads);

ABSL_FLAG(std::string, model, "", "Forward ONNX model file.");
ABSL_FLAG(std::vector<std::string>, input, {}, "NAME=FILE.npy, one per forward graph input (repeatable).");
ABSL_FLAG(std::vector<std::string>, target, {}, "NAME=FILE.npy, one per loss target (repeatable).");
ABSL_FLAG(std::string, loss, "cross_entropy",
          "mse | cross_entropy | l1 | bce_with_logits (first model output vs the only target), or weighted terms "
          "WEIGHT*KIND:OUTPUT:TARGET separated by commas.");
ABSL_FLAG(std::vector<std::string>, requires_grad, {}, "Initializers to train (default: all floating-point ones).");
ABSL_FLAG(std::vector<std::string>, frozen_params, {}, "Initializers not to train.");
ABSL_FLAG(std::string, optimizer, "adamw", "adamw | sgd.");
ABSL_FLAG(double, lr, -1, "Learning rate (default: 1e-3 for adamw, 1e-2 for sgd).");
ABSL_FLAG(double, beta1, 0.9, "AdamW beta1.");
ABSL_FLAG(double, beta2, 0.999, "AdamW beta2.");
ABSL_FLAG(double, eps, 1e-8, "AdamW epsilon.");
ABSL_FLAG(double, weight_decay, -1, "Weight decay (default: 1e-2 for adamw, 0 for sgd).");
ABSL_FLAG(double, momentum, 0, "SGD momentum.");
ABSL_FLAG(double, dampening, 0, "SGD dampening.");
ABSL_FLAG(bool, nesterov, false, "SGD Nesterov momentum.");
ABSL_FLAG(double, max_grad_norm, 0, "Clip the global gradient norm to this (0: off).");
ABSL_FLAG(int, threads, 2, "Intra-op threads (the Module's pool, oneDNN/OpenMP, OpenBLAS).");
ABSL_FLAG(int, warmup, 10, "Untimed steps first.");
ABSL_FLAG(int, steps, 20, "Timed steps, at least.");
ABSL_FLAG(double, min_time, 3.0, "Seconds of timed steps, at least.");
ABSL_FLAG(bool, channels_last, true,
          "Activations channels-last between convolutions (engine/runtime/channels_last.h); --nochannels_last "
          "measures what that brings.");
ABSL_FLAG(int64_t, memory_budget, 0,
          "Bytes the Module may hold at once (ModuleOptions::memory_budget_bytes; the daemon's sessions have half the "
          "machine's memory); 0: unlimited.");
ABSL_FLAG(bool, profile, false, "Also print the time per op type (forward / backward) and optimizer, profiled.");
ABSL_FLAG(int, profile_nodes, 0, "With --profile, also print the N slowest nodes, with their inputs.");
ABSL_FLAG(std::string, dump, "", "Directory for losses.npy, grads/*.npy (first step), params/*.npy (final).");
ABSL_FLAG(bool, json, false, "Print one JSON line instead of text.");
ABSL_FLAG(bool, report_phases, false,
          "Print the process's memory (VmRSS, its anonymous and file-backed parts, VmHWM) and page faults after each phase: loading, "
          "GenerateArtifacts, Module and Optimizer set-up, the first step, the warm-up, the timed steps.");
ABSL_FLAG(std::string, device, "cpu",
          "cpu, or gpu / gpu:N: the OpenCL GPU executor on device N (each step then gets a fresh copy of the batch, "
          "as a served step does, and the transfers per step are reported).");

namespace traind::engine {
namespace {

// With --report_phases: one line to stderr with the /proc/self/status memory figures after `phase`.
void ReportPhase(const char* phase) {
  if (!absl::GetFlag(FLAGS_report_phases)) return;
  std::FILE* status = std::fopen("/proc/self/status", "r");
  if (status == nullptr) return;
  std::string line_out = absl::StrCat("phase ", phase, ":");
  char line[256];
  while (std::fgets(line, sizeof(line), status) != nullptr) {
    for (const char* key : {"VmHWM:", "VmRSS:", "RssAnon:", "RssFile:"}) {
      if (std::strncmp(line, key, std::strlen(key)) != 0) continue;
      long kb = 0;
      if (std::sscanf(line + std::strlen(key), "%ld", &kb) == 1) absl::StrAppend(&line_out, " ", key, kb / 1024, "MB");
    }
  }
  std::fclose(status);
  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  absl::StrAppend(&line_out, " minor page faults:", usage.ru_minflt);
  std::fprintf(stderr, "%s\n", line_out.c_str());
}

// "mse", "cross_entropy", "l1", "bce_with_logits", or "w*kind:output:target,..." into loss terms. `default_output` / `default_target` fill
// a term that names neither.
absl::StatusOr<std::vector<LossTerm>> ParseLoss(const std::string& spec, const std::string& default_output,
                                                const std::string& default_target) {
  std::vector<LossTerm> terms;
  for (absl::string_view text : absl::StrSplit(spec, ',')) {
    LossTerm term;
    term.output = default_output;
    term.target = default_target;
    std::vector<std::string> weight_and_rest = absl::StrSplit(text, absl::MaxSplits('*', 1));
    std::string rest = weight_and_rest.back();
    if (weight_and_rest.size() == 2 && !absl::SimpleAtof(weight_and_rest[0], &term.weight)) {
      return absl::InvalidArgumentError(absl::StrCat("bad loss weight in '", text, "'"));
    }
    std::vector<std::string> parts = absl::StrSplit(rest, ':');
    static const std::map<std::string, LossKind> kKinds = {{"mse", LossKind::kMeanSquaredError},
                                                          {"cross_entropy", LossKind::kCrossEntropy},
                                                          {"l1", LossKind::kL1},
                                                          {"bce_with_logits", LossKind::kBinaryCrossEntropyWithLogits}};
    auto kind = kKinds.find(parts[0]);
    if (kind == kKinds.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown loss '", parts[0], "' (mse | cross_entropy | l1 | bce_with_logits)"));
    }
    term.kind = kind->second;
    if (parts.size() > 3) return absl::InvalidArgumentError(absl::StrCat("bad loss term '", text, "'"));
    if (parts.size() > 1) term.output = parts[1];
    if (parts.size() > 2) term.target = parts[2];
    if (term.output.empty() || term.target.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("loss term '", text, "' needs an output and a target"));
    }
    terms.push_back(term);
  }
  return terms;
}

absl::StatusOr<NamedTensors> ReadNamedNpys(const std::vector<std::string>& specs, const char* flag) {
  NamedTensors tensors;
  for (const std::string& spec : specs) {
    std::vector<std::string> parts = absl::StrSplit(spec, absl::MaxSplits('=', 1));
    if (parts.size() != 2) return absl::InvalidArgumentError(absl::StrCat("--", flag, " wants NAME=FILE.npy"));
    TRAIND_ASSIGN_OR_RETURN(Tensor tensor, ReadNpy(parts[1]));
    tensors.emplace_back(parts[0], std::move(tensor));
  }
  return tensors;
}

// Everything one training step touches: the artifacts' state and the Module + Optimizer that train it.
struct Trainer {
  CheckpointState state;
  std::unique_ptr<Module> module;
  std::unique_ptr<Optimizer> optimizer;
  NamedTensors batch;
  std::vector<std::string> trainable;  // checkpoint order
  int64_t step = 0;
  double last_optimizer_seconds = 0;
};

// One training step, as a daemon session's TrainStep runs it: forward + loss + backward, the optimizer step, the
// lazy gradient reset. Returns the loss computed before the update. `after_backward` (may be null) sees the state
// with this step's gradients.
absl::StatusOr<float> TrainingStep(Trainer& trainer, const std::function<absl::Status()>& after_backward = nullptr) {
  NamedTensors batch = trainer.batch;
  if (trainer.module->gpu_stream() != nullptr) {
    // A fresh batch, as a daemon decodes one per step: its upload is part of the step.
    for (auto& [name, tensor] : batch) {
      TRAIND_ASSIGN_OR_RETURN(Tensor copy, Tensor::Allocate(tensor.dtype(), tensor.shape()));
      std::memcpy(copy.mutable_raw_data(), tensor.raw_data(), tensor.byte_size());
      tensor = std::move(copy);
    }
  }
  TRAIND_ASSIGN_OR_RETURN(NamedTensors outputs, trainer.module->TrainStep(batch));
  const float loss = outputs[0].second.data<float>()[0];
  if (after_backward) TRAIND_RETURN_IF_ERROR(after_backward());
  const auto optimizer_start = std::chrono::steady_clock::now();
  TRAIND_ASSIGN_OR_RETURN(OptimizerStepResult result, trainer.optimizer->Step());
  trainer.last_optimizer_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - optimizer_start).count();
  trainer.module->LazyResetGrad();
  if (result.skipped) return absl::InternalError(absl::StrCat("step ", trainer.step + 1, " was skipped (not finite)"));
  ++trainer.step;
  return loss;
}

absl::StatusOr<std::unique_ptr<Trainer>> MakeTrainer(int threads) {
  // Weights in external data files stay there (mapped): models of any size, one copy in memory.
  LoadOptions load_options;
  load_options.map_external_data = true;
  TRAIND_ASSIGN_OR_RETURN(onnx::ModelProto forward, LoadModelFromFile(absl::GetFlag(FLAGS_model), load_options));
  ReportPhase("loaded");
  TRAIND_ASSIGN_OR_RETURN(NamedTensors data, ReadNamedNpys(absl::GetFlag(FLAGS_input), "input"));
  TRAIND_ASSIGN_OR_RETURN(NamedTensors targets, ReadNamedNpys(absl::GetFlag(FLAGS_target), "target"));
  if (forward.graph().output_size() == 0) return absl::InvalidArgumentError("the model has no outputs");
  ArtifactOptions options;
  TRAIND_ASSIGN_OR_RETURN(
      options.loss, ParseLoss(absl::GetFlag(FLAGS_loss), forward.graph().output(0).name(),
                              targets.size() == 1 ? targets[0].first : std::string("target")));
  options.requires_grad = absl::GetFlag(FLAGS_requires_grad);
  options.frozen_params = absl::GetFlag(FLAGS_frozen_params);
  const std::string optimizer = absl::GetFlag(FLAGS_optimizer);
  const double lr = absl::GetFlag(FLAGS_lr), weight_decay = absl::GetFlag(FLAGS_weight_decay);
  OptimizerSpec& spec = options.optimizer;
  if (optimizer == "adamw") {
    spec.kind = OptimizerKind::kAdamW;
    options.initial_learning_rate = lr >= 0 ? static_cast<float>(lr) : 1e-3f;
    spec.beta1 = static_cast<float>(absl::GetFlag(FLAGS_beta1));
    spec.beta2 = static_cast<float>(absl::GetFlag(FLAGS_beta2));
    spec.eps = static_cast<float>(absl::GetFlag(FLAGS_eps));
    spec.weight_decay = weight_decay >= 0 ? static_cast<float>(weight_decay) : 1e-2f;
  } else if (optimizer == "sgd") {
    spec.kind = OptimizerKind::kSgd;
    options.initial_learning_rate = lr >= 0 ? static_cast<float>(lr) : 1e-2f;
    spec.momentum = static_cast<float>(absl::GetFlag(FLAGS_momentum));
    spec.dampening = static_cast<float>(absl::GetFlag(FLAGS_dampening));
    spec.nesterov = absl::GetFlag(FLAGS_nesterov);
    spec.weight_decay = weight_decay >= 0 ? static_cast<float>(weight_decay) : 0.0f;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--optimizer must be adamw or sgd, got ", optimizer));
  }
  spec.max_grad_norm = static_cast<float>(absl::GetFlag(FLAGS_max_grad_norm));
  TRAIND_ASSIGN_OR_RETURN(Artifacts artifacts, GenerateArtifacts(forward, options));
  ReportPhase("artifacts");

  auto trainer = std::make_unique<Trainer>();
  trainer->state = artifacts.checkpoint;
  trainer->trainable = artifacts.trainable;
  ModuleOptions module_options;
  module_options.num_threads = threads;
  module_options.channels_last = absl::GetFlag(FLAGS_channels_last);
  module_options.memory_budget_bytes = absl::GetFlag(FLAGS_memory_budget);
  ReportPhase("checkpoint state");
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device != "cpu") {
    absl::string_view rest = device;
    int index = 0;
    if (!absl::ConsumePrefix(&rest, "gpu") || (!rest.empty() && (!absl::ConsumePrefix(&rest, ":") ||
                                                                 !absl::SimpleAtoi(rest, &index)))) {
      return absl::InvalidArgumentError(absl::StrCat("--device must be cpu, gpu or gpu:N, got ", device));
    }
    module_options.executor = ExecutorKind::kGpu;
    module_options.gpu_device_index = index;
  }
  TRAIND_ASSIGN_OR_RETURN(trainer->module, Module::Create(artifacts, &trainer->state, module_options));
  ReportPhase("module");
  TRAIND_ASSIGN_OR_RETURN(trainer->optimizer, Optimizer::Create(artifacts.optimizer_model, trainer->module.get()));
  ReportPhase("optimizer");
  std::map<std::string, Tensor> by_name(data.begin(), data.end());
  for (const auto& [name, tensor] : targets) by_name[name] = tensor;
  for (const std::string& name : trainer->module->TrainingInputNames()) {
    auto it = by_name.find(name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("no data for graph input '", name, "' (give it with --input or --target)"));
    }
    trainer->batch.emplace_back(name, it->second);
  }
  return trainer;
}

// Null on the GPU executor.
CpuExecutor* TrainingExecutor(const Trainer& trainer) {
  return dynamic_cast<CpuExecutor*>(&trainer.module->training_session().executor());
}

// '/' cannot appear in a file name.
std::string FileNameOf(std::string parameter) {
  std::replace(parameter.begin(), parameter.end(), '/', '_');
  return parameter + ".npy";
}

absl::Status DumpTensors(const std::string& dir, const std::vector<std::pair<std::string, const Tensor*>>& tensors) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", error.message()));
  for (const auto& [name, tensor] : tensors) TRAIND_RETURN_IF_ERROR(WriteNpy(dir + "/" + FileNameOf(name), *tensor));
  return absl::OkStatus();
}

// The trainable parameters' data (or gradients), in checkpoint order.
std::vector<std::pair<std::string, const Tensor*>> TrainableTensors(const Trainer& trainer, bool gradients) {
  std::vector<std::pair<std::string, const Tensor*>> tensors;
  for (const Parameter& parameter : trainer.state.parameters) {
    if (parameter.requires_grad) tensors.emplace_back(parameter.name, gradients ? &parameter.grad : &parameter.data);
  }
  return tensors;
}

void PrintProfile(Trainer& trainer, int steps) {
  CpuExecutor::Profile profile;
  if (TrainingExecutor(trainer) == nullptr) {
    std::fprintf(stderr, "profile: per-op times are measured on the CPU executor only\n");
    return;
  }
  CpuExecutor& executor = *TrainingExecutor(trainer);
  executor.EnableProfiling(&profile);
  double optimizer_seconds = 0;
  for (int i = 0; i < steps; ++i) {
    if (!TrainingStep(trainer).ok()) break;
    optimizer_seconds += trainer.last_optimizer_seconds;
  }
  executor.EnableProfiling(nullptr);
  if (profile.runs == 0) return;
  const Plan& plan = trainer.module->training_session().plan();
  // Backward nodes carry "_Grad/" in their names (GradientRuleContext::Emit); the loss nodes "loss/".
  PrintNodeProfile(plan, profile, "step", {{"optimizer step", optimizer_seconds / steps}},
                   absl::GetFlag(FLAGS_profile_nodes), [](const PlannedNode& node) -> std::string {
                     return node.label.find("_Grad/") != std::string::npos  ? " (bwd)"
                            : node.label.find("'loss") != std::string::npos ? " (loss)"
                                                                             : "";
                   });
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "train_bench: %s\n", status.ToString().c_str());
  return 1;
}

int Main() {
  const int threads = absl::GetFlag(FLAGS_threads);
  openblas_set_num_threads(threads);
  absl::StatusOr<std::unique_ptr<Trainer>> made = MakeTrainer(threads);
  if (!made.ok()) return Fail(made.status());
  Trainer& trainer = **made;
  ReportPhase("set-up done (artifacts released)");
  const std::string dump = absl::GetFlag(FLAGS_dump);

  std::vector<float> losses;
  auto step = [&]() -> absl::Status {
    const bool first = trainer.step == 0;
    TRAIND_ASSIGN_OR_RETURN(float loss, TrainingStep(trainer, [&]() -> absl::Status {
      if (dump.empty() || !first) return absl::OkStatus();
      return DumpTensors(dump + "/grads", TrainableTensors(trainer, /*gradients=*/true));
    }));
    if (!std::isfinite(loss)) return absl::InternalError(absl::StrCat("loss is ", loss, " at step ", trainer.step));
    losses.push_back(loss);
    if (first) ReportPhase("first step");
    return absl::OkStatus();
  };
  for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) {
    if (absl::Status status = step(); !status.ok()) return Fail(status);
  }
  ReportPhase("warm-up");
  std::vector<double> ms;
  gpu::Stream* stream = trainer.module->gpu_stream();
  const gpu::TransferCounts transfers_before = stream != nullptr ? stream->transfers() : gpu::TransferCounts();
  const auto start = std::chrono::steady_clock::now();
  while (static_cast<int>(ms.size()) < absl::GetFlag(FLAGS_steps) ||
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
             absl::GetFlag(FLAGS_min_time)) {
    const auto t0 = std::chrono::steady_clock::now();
    absl::Status status = step();
    const auto t1 = std::chrono::steady_clock::now();
    if (!status.ok()) return Fail(status);
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  if (ms.empty()) return Fail(absl::InvalidArgumentError("no timed steps (--steps 0 and --min_time 0)"));
  ReportPhase("timed steps");
  // Transfers per timed step (GPU): what a served step moves between host and device.
  const gpu::TransferCounts moved =
      stream != nullptr ? stream->transfers() - transfers_before : gpu::TransferCounts();
  const double steps = static_cast<double>(ms.size());
  if (!dump.empty()) {
    absl::StatusOr<Tensor> loss_tensor =
        Tensor::FromVector<float>({static_cast<int64_t>(losses.size())}, losses);
    if (!loss_tensor.ok()) return Fail(loss_tensor.status());
    std::filesystem::create_directories(dump);
    if (absl::Status s = WriteNpy(dump + "/losses.npy", *loss_tensor); !s.ok()) return Fail(s);
    if (absl::Status s = DumpTensors(dump + "/params", TrainableTensors(trainer, /*gradients=*/false)); !s.ok()) {
      return Fail(s);
    }
  }
  if (absl::GetFlag(FLAGS_profile)) PrintProfile(trainer, std::max(absl::GetFlag(FLAGS_steps), 10));

  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  const double peak_rss_mb = usage.ru_maxrss / 1024.0;
  const double peak_pool_mb =
      (stream != nullptr ? static_cast<double>(stream->peak_bytes_in_use())
                         : static_cast<double>(TrainingExecutor(trainer)->buffers().peak_bytes_in_use())) /
      (1024.0 * 1024.0);
  // What the pool held at most, its free cached buffers included (the CPU executor's pool; on a GPU, the same).
  const double pool_held_mb =
      (stream != nullptr ? static_cast<double>(stream->peak_bytes_in_use())
                         : static_cast<double>(TrainingExecutor(trainer)->buffers().peak_bytes_held())) /
      (1024.0 * 1024.0);
  std::string placement = "cpu";
  if (stream != nullptr) {
    const auto& training = dynamic_cast<const gpu::GpuExecutor&>(trainer.module->training_session().executor());
    placement = absl::StrCat(stream->device().info().name, "; training model: ", training.placement().Summary());
  }
  const double median = Median(ms);
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("{\"model\": \"%s\", \"device\": \"%s\", \"threads\": %d, \"median_ms\": %.4f, "
                "\"p10_ms\": %.4f, \"p90_ms\": %.4f, \"steps\": %zu, \"peak_rss_mb\": %.1f, \"peak_pool_mb\": %.1f, "
                "\"pool_held_mb\": %.1f, \"first_loss\": %.7g, \"last_loss\": %.7g, \"uploads_per_step\": %.2f, "
                "\"upload_bytes_per_step\": %.0f, \"downloads_per_step\": %.2f, \"download_bytes_per_step\": %.0f}\n",
                absl::GetFlag(FLAGS_model).c_str(), absl::GetFlag(FLAGS_device).c_str(), threads, median,
                Percentile(ms, 0.1), Percentile(ms, 0.9), ms.size(), peak_rss_mb, peak_pool_mb, pool_held_mb,
                losses.front(), losses.back(), moved.uploads / steps, moved.upload_bytes / steps, moved.downloads / steps,
                moved.download_bytes / steps);
  } else {
    std::printf("model %s threads %d: median %.3f ms/step (p10 %.3f, p90 %.3f, %zu steps), peak RSS %.1f MB, "
                "peak pool %.1f MB (held %.1f MB), loss %.6g -> %.6g\n",
                absl::GetFlag(FLAGS_model).c_str(), threads, median, Percentile(ms, 0.1), Percentile(ms, 0.9),
                ms.size(), peak_rss_mb, peak_pool_mb, pool_held_mb, losses.front(), losses.back());
    if (stream != nullptr) {
      std::printf("device %s\ntransfers per step: %.2f uploads (%.0f bytes), %.2f downloads (%.0f bytes), "
                  "%.2f device-to-device copies\n",
                  placement.c_str(), moved.uploads / steps, moved.upload_bytes / steps, moved.downloads / steps,
                  moved.download_bytes / steps, moved.device_copies / steps);
    }
  }
  return 0;
}

}  // namespace
}  // namespace traind::engine

// absl keeps only the last occurrence of a flag; these list flags may also be repeated (--input=a=x.npy
// --input=b=y.npy), so their occurrences are joined into one comma-separated flag before parsing.
std::vector<std::string> JoinRepeatedListFlags(int argc, char** argv) {
  static const char* const kListFlags[] = {"input", "target", "requires_grad", "frozen_params"};
  std::vector<std::string> args = {argv[0]};
  std::map<std::string, std::string> joined;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    bool list = false;
    for (const char* flag : kListFlags) {
      for (const std::string& prefix : {std::string("--") + flag, std::string("-") + flag}) {
        std::string value;
        if (arg.rfind(prefix + "=", 0) == 0) {
          value = arg.substr(prefix.size() + 1);
        } else if (arg == prefix && i + 1 < argc) {
          value = argv[++i];
        } else {
          continue;
        }
        std::string& all = joined[flag];
        all += (all.empty() ? "" : ",") + value;
        list = true;
        break;
      }
      if (list) break;
    }
    if (!list) args.push_back(arg);
  }
  for (const auto& [flag, values] : joined) args.push_back("--" + flag + "=" + values);
  return args;
}

int main(int argc, char** argv) {
  traind::engine::ConfigureProcessAllocator();  // as the daemon does
  std::vector<std::string> args = JoinRepeatedListFlags(argc, argv);
  std::vector<char*> pointers;
  for (std::string& arg : args) pointers.push_back(arg.data());
  absl::ParseCommandLine(static_cast<int>(pointers.size()), pointers.data());
  return traind::engine::Main();
}
