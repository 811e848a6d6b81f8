// train_bench: full training steps (forward, loss, backward, optimizer) of an ONNX model on .npy data, in process.
//
//   bazel run -c opt //bench:train_bench -- --model=M.onnx --input=input=x.npy --target=target=y.npy
//       [--loss=cross_entropy | mse | "0.4*mse:out1:t1,0.6*mse:out2:t2"] [--optimizer=adamw|sgd] [--lr=1e-3 ...]
//       [--threads=2] [--warmup=10] [--steps=20] [--min_time=3] [--profile] [--dump=DIR] [--json]
//
// Each step is TrainingStep(): one run of the training graph (BuildTrainingGraph: forward + loss + gradients, the
// trainable parameters fed as graph inputs), then AdamWStep / SgdStep in place on the parameters. Every step trains
// on the same batch (as /work/shared/bench/torch_train_bench.py does). Reported: the median ms/step of the timed
// steps, p10/p90, peak RSS of the process and the peak bytes the executor's buffer pool had handed out at once.
// --dump DIR writes losses.npy (the loss before each step, warm-up included, in order), grads/<param>.npy (the
// first step's gradients) and params/<param>.npy (the parameters after the last step).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/bench_stats.h"
#include "engine/autodiff/gradient_builder.h"
#include "engine/core/status_macros.h"
#include "engine/core/thread_pool.h"
#include "engine/io/npy.h"
#include "engine/model/model_loader.h"
#include "engine/model/tensor_proto.h"
#include "engine/runtime/cpu_executor.h"
#include "engine/runtime/plan.h"
#include "engine/runtime/session.h"
#include "engine/training/optimizer.h"
#include "engine/training/training_graph.h"

extern "C" void openblas_set_num_threads(int num_threads);

ABSL_FLAG(std::string, model, "", "Forward ONNX model file.");
ABSL_FLAG(std::vector<std::string>, input, {}, "NAME=FILE.npy, one per forward graph input (repeatable).");
ABSL_FLAG(std::vector<std::string>, target, {}, "NAME=FILE.npy, one per loss target (repeatable).");
ABSL_FLAG(std::string, loss, "cross_entropy",
          "mse | cross_entropy (first model output vs the only target), or weighted terms "
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
ABSL_FLAG(bool, nesterov, false, "SGD Nesterov momentum.");
ABSL_FLAG(int, threads, 2, "Intra-op threads (engine pool, oneDNN/OpenMP, OpenBLAS).");
ABSL_FLAG(int, warmup, 10, "Untimed steps first.");
ABSL_FLAG(int, steps, 20, "Timed steps, at least.");
ABSL_FLAG(double, min_time, 3.0, "Seconds of timed steps, at least.");
ABSL_FLAG(bool, profile, false, "Also print the time per op type (forward / backward) and optimizer, profiled.");
ABSL_FLAG(std::string, dump, "", "Directory for losses.npy, grads/*.npy (first step), params/*.npy (final).");
ABSL_FLAG(bool, json, false, "Print one JSON line instead of text.");

namespace traind::engine {
namespace {

// "mse", "cross_entropy", or "w*kind:output:target,..." into loss terms. `default_output` / `default_target` fill
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
    if (parts[0] == "mse") {
      term.kind = LossKind::kMeanSquaredError;
    } else if (parts[0] == "cross_entropy") {
      term.kind = LossKind::kCrossEntropy;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown loss '", parts[0], "' (mse | cross_entropy)"));
    }
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

// Everything one training step touches. The step itself is TrainingStep(), kept apart so that it can move onto
// a Module / Optimizer pair later without changing the timing loop.
struct Trainer {
  std::unique_ptr<Session> session;
  CpuExecutor* executor = nullptr;         // Owned by session.
  std::vector<Tensor> inputs;              // In plan input order; parameter entries share parameters' buffers.
  std::vector<std::string> parameter_names;
  std::vector<Tensor> parameters;          // Updated in place by the optimizer.
  std::vector<int> gradient_output;        // Plan output index of each parameter's gradient.
  std::vector<std::map<std::string, Tensor>> optimizer_state;
  int loss_output = -1;
  bool adamw = true;
  AdamWOptions adamw_options;
  SgdOptions sgd_options;
  int64_t step = 0;
  // Filled by TrainingStep.
  std::vector<Tensor> last_outputs;
  double last_optimizer_seconds = 0;
};

// One training step: forward + loss + backward on the current parameters, then the optimizer update.
// Returns the loss computed before the update.
absl::StatusOr<float> TrainingStep(Trainer& trainer) {
  trainer.last_outputs.clear();  // Their buffers go back to the pool for this run.
  TRAIND_ASSIGN_OR_RETURN(trainer.last_outputs, trainer.session->Run(trainer.inputs));
  const float loss = trainer.last_outputs[trainer.loss_output].data<float>()[0];
  const auto optimizer_start = std::chrono::steady_clock::now();
  std::vector<ParameterUpdate> updates;
  updates.reserve(trainer.parameters.size());
  for (size_t p = 0; p < trainer.parameters.size(); ++p) {
    updates.push_back(
        {&trainer.parameters[p], &trainer.last_outputs[trainer.gradient_output[p]], &trainer.optimizer_state[p]});
  }
  ++trainer.step;
  TRAIND_RETURN_IF_ERROR(trainer.adamw ? AdamWStep(trainer.adamw_options, trainer.step, updates)
                                       : SgdStep(trainer.sgd_options, trainer.step, updates));
  trainer.last_optimizer_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - optimizer_start).count();
  return loss;
}

absl::StatusOr<Trainer> MakeTrainer(ThreadPool& threads) {
  TRAIND_ASSIGN_OR_RETURN(onnx::ModelProto forward, LoadModelFromFile(absl::GetFlag(FLAGS_model)));
  TRAIND_ASSIGN_OR_RETURN(NamedTensors data, ReadNamedNpys(absl::GetFlag(FLAGS_input), "input"));
  TRAIND_ASSIGN_OR_RETURN(NamedTensors targets, ReadNamedNpys(absl::GetFlag(FLAGS_target), "target"));
  if (forward.graph().output_size() == 0) return absl::InvalidArgumentError("the model has no outputs");
  TrainingGraphOptions options;
  TRAIND_ASSIGN_OR_RETURN(
      options.loss, ParseLoss(absl::GetFlag(FLAGS_loss), forward.graph().output(0).name(),
                              targets.size() == 1 ? targets[0].first : std::string("target")));
  options.trainable = absl::GetFlag(FLAGS_requires_grad);
  options.frozen = absl::GetFlag(FLAGS_frozen_params);
  TRAIND_ASSIGN_OR_RETURN(TrainingGraph training, BuildTrainingGraph(forward, options));
  // The artifact must be valid ONNX (checker + strict shape inference), as GenerateArtifacts writes it.
  TRAIND_ASSIGN_OR_RETURN(onnx::ModelProto validated, LoadModelFromBytes(training.model.SerializeAsString()));
  TRAIND_ASSIGN_OR_RETURN(std::shared_ptr<const Plan> plan, Compile(validated));
  auto executor = std::make_unique<CpuExecutor>(&threads);
  Trainer trainer;
  trainer.executor = executor.get();
  trainer.session = std::make_unique<Session>(plan, std::move(executor));

  std::map<std::string, Tensor> by_name(data.begin(), data.end());
  for (const auto& [name, tensor] : targets) by_name[name] = tensor;
  for (const auto& initializer : forward.graph().initializer()) {
    if (std::find(training.trainable.begin(), training.trainable.end(), initializer.name()) ==
        training.trainable.end()) {
      continue;
    }
    TRAIND_ASSIGN_OR_RETURN(Tensor decoded, TensorFromProto(initializer));
    // A private copy: the optimizer writes parameters in place.
    TRAIND_ASSIGN_OR_RETURN(Tensor parameter, Tensor::Allocate(decoded.dtype(), decoded.shape()));
    std::copy_n(static_cast<const char*>(decoded.raw_data()), decoded.byte_size(),
                static_cast<char*>(parameter.mutable_raw_data()));
    by_name[initializer.name()] = parameter;
  }
  for (const std::string& name : training.trainable) {
    trainer.parameter_names.push_back(name);
    trainer.parameters.push_back(by_name.at(name));
    const int output = plan->OutputIndex(GradientName(name));
    if (output < 0) return absl::InternalError(absl::StrCat("no gradient output for ", name));
    trainer.gradient_output.push_back(output);
  }
  trainer.optimizer_state.resize(trainer.parameters.size());
  for (const GraphValue& input : plan->inputs) {
    auto it = by_name.find(input.name);
    if (it == by_name.end()) {
      return absl::InvalidArgumentError(absl::StrCat("no data for graph input '", input.name,
                                                     "' (give it with --input or --target)"));
    }
    trainer.inputs.push_back(it->second);
  }
  trainer.loss_output = plan->OutputIndex(training.loss);

  const std::string optimizer = absl::GetFlag(FLAGS_optimizer);
  const double lr = absl::GetFlag(FLAGS_lr), weight_decay = absl::GetFlag(FLAGS_weight_decay);
  if (optimizer == "adamw") {
    trainer.adamw_options.lr = lr >= 0 ? static_cast<float>(lr) : 1e-3f;
    trainer.adamw_options.beta1 = static_cast<float>(absl::GetFlag(FLAGS_beta1));
    trainer.adamw_options.beta2 = static_cast<float>(absl::GetFlag(FLAGS_beta2));
    trainer.adamw_options.eps = static_cast<float>(absl::GetFlag(FLAGS_eps));
    trainer.adamw_options.weight_decay = weight_decay >= 0 ? static_cast<float>(weight_decay) : 1e-2f;
  } else if (optimizer == "sgd") {
    trainer.adamw = false;
    trainer.sgd_options.lr = lr >= 0 ? static_cast<float>(lr) : 1e-2f;
    trainer.sgd_options.momentum = static_cast<float>(absl::GetFlag(FLAGS_momentum));
    trainer.sgd_options.nesterov = absl::GetFlag(FLAGS_nesterov);
    trainer.sgd_options.weight_decay = weight_decay >= 0 ? static_cast<float>(weight_decay) : 0.0f;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--optimizer must be adamw or sgd, got ", optimizer));
  }
  return trainer;
}

// '/' cannot appear in a file name.
std::string FileNameOf(std::string parameter) {
  std::replace(parameter.begin(), parameter.end(), '/', '_');
  return parameter + ".npy";
}

absl::Status DumpTensors(const std::string& dir, const std::vector<std::string>& names,
                         const std::vector<Tensor>& tensors) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", error.message()));
  for (size_t i = 0; i < names.size(); ++i) {
    TRAIND_RETURN_IF_ERROR(WriteNpy(dir + "/" + FileNameOf(names[i]), tensors[i]));
  }
  return absl::OkStatus();
}

void PrintProfile(Trainer& trainer, int steps) {
  CpuExecutor::Profile profile;
  trainer.executor->EnableProfiling(&profile);
  double optimizer_seconds = 0;
  for (int i = 0; i < steps; ++i) {
    if (!TrainingStep(trainer).ok()) break;
    optimizer_seconds += trainer.last_optimizer_seconds;
  }
  trainer.executor->EnableProfiling(nullptr);
  if (profile.runs == 0) return;
  const Plan& plan = trainer.session->plan();
  // Backward nodes carry "_Grad/" in their names (GradientRuleContext::Emit); the loss nodes "loss/".
  std::map<std::string, std::pair<double, int>> by_op;  // seconds, node count
  double total = 0;
  for (size_t i = 0; i < profile.seconds_per_node.size(); ++i) {
    const std::string& label = plan.nodes[i].label;
    const char* phase = label.find("_Grad/") != std::string::npos ? " (bwd)"
                        : label.find("'loss") != std::string::npos ? " (loss)"
                                                                    : "";
    auto& entry = by_op[plan.nodes[i].op_type + phase];
    entry.first += profile.seconds_per_node[i];
    entry.second += 1;
    total += profile.seconds_per_node[i];
  }
  by_op["optimizer step"] = {optimizer_seconds * profile.runs / steps, 1};
  total += optimizer_seconds * profile.runs / steps;
  std::vector<std::pair<double, std::string>> sorted;
  for (const auto& [op, entry] : by_op) sorted.emplace_back(entry.first, op);
  std::sort(sorted.rbegin(), sorted.rend());
  std::fprintf(stderr, "profile (%lld steps): per step %.3f ms in kernels + optimizer\n",
               static_cast<long long>(profile.runs), 1e3 * total / profile.runs);
  for (const auto& [seconds, op] : sorted) {
    std::fprintf(stderr, "  %-32s %3d nodes %9.3f ms %5.1f%%\n", op.c_str(), by_op[op].second,
                 1e3 * seconds / profile.runs, 100 * seconds / total);
  }
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "train_bench: %s\n", status.ToString().c_str());
  return 1;
}

int Main() {
  const int threads = absl::GetFlag(FLAGS_threads);
  openblas_set_num_threads(threads);
  ThreadPool pool(threads);
  absl::StatusOr<Trainer> made = MakeTrainer(pool);
  if (!made.ok()) return Fail(made.status());
  Trainer& trainer = *made;
  const std::string dump = absl::GetFlag(FLAGS_dump);

  std::vector<float> losses;
  auto step = [&]() -> absl::Status {
    TRAIND_ASSIGN_OR_RETURN(float loss, TrainingStep(trainer));
    if (!std::isfinite(loss)) return absl::InternalError(absl::StrCat("loss is ", loss, " at step ", trainer.step));
    if (!dump.empty() && trainer.step == 1) {
      std::vector<Tensor> gradients;
      for (int output : trainer.gradient_output) gradients.push_back(trainer.last_outputs[output]);
      TRAIND_RETURN_IF_ERROR(DumpTensors(dump + "/grads", trainer.parameter_names, gradients));
    }
    losses.push_back(loss);
    return absl::OkStatus();
  };
  for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) {
    if (absl::Status status = step(); !status.ok()) return Fail(status);
  }
  std::vector<double> ms;
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
  if (!dump.empty()) {
    absl::StatusOr<Tensor> loss_tensor =
        Tensor::FromVector<float>({static_cast<int64_t>(losses.size())}, losses);
    if (!loss_tensor.ok()) return Fail(loss_tensor.status());
    std::filesystem::create_directories(dump);
    if (absl::Status s = WriteNpy(dump + "/losses.npy", *loss_tensor); !s.ok()) return Fail(s);
    if (absl::Status s = DumpTensors(dump + "/params", trainer.parameter_names, trainer.parameters); !s.ok()) {
      return Fail(s);
    }
  }
  if (absl::GetFlag(FLAGS_profile)) PrintProfile(trainer, std::max(absl::GetFlag(FLAGS_steps), 10));

  rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  const double peak_rss_mb = usage.ru_maxrss / 1024.0;
  const double peak_pool_mb = trainer.executor->buffers().peak_bytes_in_use() / (1024.0 * 1024.0);
  const double median = Median(ms);
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("{\"model\": \"%s\", \"threads\": %d, \"median_ms\": %.4f, \"p10_ms\": %.4f, \"p90_ms\": %.4f, "
                "\"steps\": %zu, \"peak_rss_mb\": %.1f, \"peak_pool_mb\": %.1f, \"first_loss\": %.7g, "
                "\"last_loss\": %.7g}\n",
                absl::GetFlag(FLAGS_model).c_str(), threads, median, Percentile(ms, 0.1), Percentile(ms, 0.9),
                ms.size(), peak_rss_mb, peak_pool_mb, losses.front(), losses.back());
  } else {
    std::printf("model %s threads %d: median %.3f ms/step (p10 %.3f, p90 %.3f, %zu steps), peak RSS %.1f MB, "
                "peak pool %.1f MB, loss %.6g -> %.6g\n",
                absl::GetFlag(FLAGS_model).c_str(), threads, median, Percentile(ms, 0.1), Percentile(ms, 0.9),
                ms.size(), peak_rss_mb, peak_pool_mb, losses.front(), losses.back());
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
  std::vector<std::string> args = JoinRepeatedListFlags(argc, argv);
  std::vector<char*> pointers;
  for (std::string& arg : args) pointers.push_back(arg.data());
  absl::ParseCommandLine(static_cast<int>(pointers.size()), pointers.data());
  return traind::engine::Main();
}
