// train, eval, optimizer step|reset-grad, lr get|set|schedule|step: driving a session step by step.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/commands/commands.h"
#include "client/commands/common.h"
#include "client/output.h"
#include "client/tensor_files.h"

namespace traind::cli {
namespace {

using Stub = CommandContext::Stub;

// The training batches: the whole arrays, or --batch-size rows of each (all inputs agree on their first axis;
// the last batch may be smaller).
absl::StatusOr<std::vector<std::vector<v1::Tensor>>> MakeBatches(const std::vector<v1::Tensor>& inputs,
                                                                 std::optional<int64_t> batch_size) {
  if (!batch_size.has_value()) return std::vector<std::vector<v1::Tensor>>{inputs};
  int64_t examples = -1;
  for (const v1::Tensor& input : inputs) {
    if (input.shape_size() == 0) {
      return UsageError(absl::StrCat("--batch-size: input '", input.name(), "' is a scalar (no example axis)"));
    }
    if (examples >= 0 && input.shape(0) != examples) {
      return UsageError(absl::StrCat("--batch-size: input '", input.name(), "' has ", input.shape(0),
                                     " examples, the others ", examples));
    }
    examples = input.shape(0);
  }
  if (examples <= 0) return UsageError("--batch-size: the inputs hold no examples");
  std::vector<std::vector<v1::Tensor>> batches;
  for (int64_t begin = 0; begin < examples; begin += *batch_size) {
    const int64_t end = std::min(examples, begin + *batch_size);
    std::vector<v1::Tensor>& batch = batches.emplace_back();
    for (const v1::Tensor& input : inputs) batch.push_back(SliceRows(input, begin, end));
  }
  return batches;
}

void PrintStep(CommandContext& context, int64_t index, int64_t steps, const v1::TrainStepResponse& step,
               bool accumulate) {
  if (context.json()) return;
  std::ostream& out = context.out();
  out << "step " << index + 1 << "/" << steps << "  ";
  if (step.skipped()) {
    out << "skipped (" << OrDash(step.skip_reason()) << ")  loss " << FormatNumber(step.loss()) << "\n";
    return;
  }
  out << "loss " << FormatNumber(step.loss()) << "  lr " << FormatNumber(step.learning_rate()) << "  optimizer step "
      << step.optimizer_step() << (accumulate ? "  (accumulated)" : "") << "\n";
}

absl::Status RunTrain(CommandContext& context) {
  const FlagValues& flags = context.flags();
  const std::string session_id = flags.Required("session");
  const std::optional<int64_t> batch_size = flags.Int("batch-size", 1, std::numeric_limits<int32_t>::max());
  std::optional<int64_t> steps = flags.Int("steps", 1, std::numeric_limits<int32_t>::max());
  const bool accumulate = flags.Has("accumulate");
  if (!flags.Has("input")) flags.AddError("--input NAME=FILE.npy is required (once per training input)");
  if (absl::Status errors = context.FlagErrors(); !errors.ok()) return errors;
  absl::StatusOr<std::vector<v1::Tensor>> inputs = ReadNamedNpyFiles(flags, "input");
  if (!inputs.ok()) return inputs.status();
  absl::StatusOr<std::vector<std::vector<v1::Tensor>>> batches = MakeBatches(*inputs, batch_size);
  if (!batches.ok()) return batches.status();
  const int64_t step_count = steps.value_or(static_cast<int64_t>(batches->size()));
  auto request_for = [&](int64_t index) {
    v1::TrainStepRequest request;
    request.set_session_id(session_id);
    request.set_accumulate_only(accumulate);
    for (const v1::Tensor& tensor : (*batches)[static_cast<size_t>(index) % batches->size()]) {
      *request.add_inputs() = tensor;
    }
    return request;
  };

  google::protobuf::ListValue results;
  const auto start = std::chrono::steady_clock::now();
  absl::Status outcome = absl::OkStatus();
  if (!flags.Has("stream")) {
    for (int64_t index = 0; index < step_count && outcome.ok(); ++index) {
      v1::TrainStepResponse step;
      outcome = context.Call(&Stub::TrainStep, request_for(index), &step);
      if (!outcome.ok()) break;
      PrintStep(context, index, step_count, step, accumulate);
      *results.add_values() = MessageToValue(step);
    }
  } else {
    // TrainStream: a writer thread keeps requests flowing (the daemon reads the next one only after answering the
    // previous: back-pressure), this thread reads the answers.
    // One call for all steps: no deadline unless --timeout (which then bounds the whole stream).
    std::unique_ptr<grpc::ClientContext> call = context.NewCallContext(0);
    auto stream = context.stub().TrainStream(call.get());
    std::thread writer([&] {
      for (int64_t index = 0; index < step_count; ++index) {
        if (!stream->Write(request_for(index))) return;
      }
      stream->WritesDone();
    });
    v1::TrainStreamResponse response;
    int64_t received = 0;
    while (received < step_count && stream->Read(&response)) {
      if (response.sequence() != received) {
        call->TryCancel();
        outcome = CallError(absl::StatusCode::kDataLoss, absl::StrCat("TrainStream answered request ",
                                                                      response.sequence(), " in place of ", received));
        break;
      }
      PrintStep(context, received, step_count, response.step(), accumulate);
      *results.add_values() = MessageToValue(response.step());
      ++received;
    }
    writer.join();
    const absl::Status finished = CommandContext::Finished(stream->Finish(), *call);
    if (outcome.ok()) outcome = finished;
    if (outcome.ok() && received < step_count) {
      outcome = CallError(absl::StatusCode::kDataLoss,
                          absl::StrCat("TrainStream ended after ", received, " of ", step_count, " steps"));
    }
  }
  if (!outcome.ok()) return outcome;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (context.json()) {
    google::protobuf::Struct document;
    auto& fields = *document.mutable_fields();
    fields["session_id"] = StringValue(session_id);
    *fields["steps"].mutable_list_value() = std::move(results);
    fields["seconds"] = NumberValue(seconds);
    context.PrintJson(document);
  } else {
    context.out() << step_count << " steps in " << FormatNumber(seconds) << " s ("
                  << FormatNumber(static_cast<double>(step_count) / std::max(seconds, 1e-9)) << " steps/s)\n";
  }
  return absl::OkStatus();
}

absl::Status RunEval(CommandContext& context) {
  const FlagValues& flags = context.flags();
  v1::EvalRequest request;
  request.set_session_id(flags.Required("session"));
  if (!flags.Has("input")) flags.AddError("--input NAME=FILE.npy is required (once per eval input)");
  for (const std::string& name : flags.List("fetch")) request.add_fetch_outputs(name);
  std::map<std::string, std::string> save;  // output name -> file
  for (const std::string& argument : flags.Values("save")) {
    absl::StatusOr<std::pair<std::string, std::string>> named = SplitNameAndFile(argument, "save");
    if (!named.ok()) return UsageError(named.status().message());
    if (save.count(named->first) == 0 &&
        std::find(request.fetch_outputs().begin(), request.fetch_outputs().end(), named->first) ==
            request.fetch_outputs().end()) {
      request.add_fetch_outputs(named->first);
    }
    save[named->first] = named->second;
  }
  if (absl::Status errors = context.FlagErrors(); !errors.ok()) return errors;
  absl::StatusOr<std::vector<v1::Tensor>> inputs = ReadNamedNpyFiles(flags, "input");
  if (!inputs.ok()) return inputs.status();
  for (v1::Tensor& input : *inputs) *request.add_inputs() = std::move(input);
  v1::EvalResponse response;
  if (absl::Status status = context.Call(&Stub::Eval, request, &response); !status.ok()) return status;
  std::vector<std::string> lines;
  for (const v1::Tensor& output : response.outputs()) {
    std::string line = absl::StrCat(output.name(), " ", DescribeTensor(output.dtype(), output.shape()));
    if (const auto file = save.find(output.name()); file != save.end()) {
      if (absl::Status written = WriteNpyTensor(file->second, output); !written.ok()) {
        if (written.code() == absl::StatusCode::kInvalidArgument) {
          return CallError(absl::StatusCode::kDataLoss, absl::StrCat("the daemon's output: ", written.message()));
        }
        return LocalFileError(written);
      }
      absl::StrAppend(&line, " -> ", file->second);
    }
    lines.push_back(std::move(line));
  }
  if (context.json()) {
    for (v1::Tensor& output : *response.mutable_outputs()) output.clear_data();
    context.PrintJson(response);
    return absl::OkStatus();
  }
  context.out() << "loss " << FormatNumber(response.loss()) << "\n";
  for (const std::string& line : lines) context.out() << line << "\n";
  return absl::OkStatus();
}

absl::Status RunOptimizerStep(CommandContext& context) {
  v1::OptimizerStepRequest request;
  request.set_session_id(context.flags().Required("session"));
  if (absl::Status errors = context.FlagErrors(); !errors.ok()) return errors;
  return context.CallAndPrint<v1::OptimizerStepRequest, v1::OptimizerStepResponse>(
      &Stub::OptimizerStep, request, [](std::ostream& out, const v1::OptimizerStepResponse& response) {
        if (response.skipped()) {
          out << "skipped (" << OrDash(response.skip_reason()) << "); optimizer step " << response.optimizer_step()
              << "\n";
        } else {
          out << "optimizer step " << response.optimizer_step() << "; next lr "
              << FormatNumber(response.learning_rate()) << "\n";
        }
      });
}

absl::Status RunResetGrad(CommandContext& context) {
  v1::LazyResetGradRequest request;
  request.set_session_id(context.flags().Required("session"));
  if (absl::Status errors = context.FlagErrors(); !errors.ok()) return errors;
  v1::LazyResetGradResponse response;
  if (absl::Status status = context.Call(&Stub::LazyResetGrad, request, &response); !status.ok()) return status;
  context.Print(Document({{"session_id", StringValue(request.session_id())}, {"reset", BoolValue(true)}}),
                [&](std::ostream& out) {
                  out << "the next train step overwrites the gradients of session " << request.session_id() << "\n";
                });
  return absl::OkStatus();
}

void PrintLearningRate(std::ostream& out, const v1::LearningRate& rate) {
  out << "lr " << FormatNumber(rate.learning_rate()) << " at optimizer step " << rate.optimizer_step() << "\n";
}

absl::Status RunLrGet(CommandContext& context) {
  v1::GetLearningRateRequest request;
  request.set_session_id(context.flags().Required("session"));
  if (absl::Status errors = context.FlagErrors(); !errors.ok()) return errors;
  return context.CallAndPrint<v1::GetLearningRateRequest, v1::LearningRate>(&Stub::GetLearningRate, request,
                                                                             PrintLearningRate);
}

absl::Status RunLrSet(CommandContext& context) {
  v1::SetLearningRateRequest request;
  request.set_session_id(context.flags().Required("session"));
  float value = 0;
  if (!absl::SimpleAtof(context.positional()[0], &value) || !std::isfinite(value) || value < 0) {
    return UsageError(absl::StrCat("'", context.positional()[0], "' is not a non-negative learning rate"));
  }
  request.set_learning_rate(value);
  if (absl::Status errors = context.FlagErrors(); !errors.ok()) return errors;
  return context.CallAndPrint<v1::SetLearningRateRequest, v1::LearningRate>(&Stub::SetLearningRate, request,
                                                                             PrintLearningRate);
}

absl::Status RunLrSchedule(CommandContext& context) {
  const FlagValues& flags = context.flags();
  v1::SetSchedulerRequest request;
  request.set_session_id(flags.Required("session"));
  SchedulerFromFlags(flags, request.mutable_scheduler());
  if (auto initial = flags.Float("initial-lr", true)) request.set_initial_learning_rate(*initial);
  request.set_manual_step(flags.Has("manual-step"));
  if (absl::Status errors = context.FlagErrors(); !errors.ok()) return errors;
  return context.CallAndPrint<v1::SetSchedulerRequest, v1::SetSchedulerResponse>(
      &Stub::SetScheduler, request, [&](std::ostream& out, const v1::SetSchedulerResponse& response) {
        out << (flags.Has("scheduler") ? "scheduler " + flags.String("scheduler") : std::string("no scheduler"))
            << (request.manual_step() ? " (stepped by 'lr step')" : "") << "; ";
        PrintLearningRate(out, response.learning_rate());
      });
}

absl::Status RunLrStep(CommandContext& context) {
  v1::SchedulerStepRequest request;
  request.set_session_id(context.flags().Required("session"));
  if (absl::Status errors = context.FlagErrors(); !errors.ok()) return errors;
  return context.CallAndPrint<v1::SchedulerStepRequest, v1::LearningRate>(&Stub::SchedulerStep, request,
                                                                           PrintLearningRate);
}

}  // namespace

std::vector<CommandSpec> TrainCommands() {
  std::vector<CommandSpec> commands;
  commands.push_back(CommandSpec{
      "train", "", "training steps on .npy files (TrainStep; TrainStream with --stream), the loss of each",
      "Every --input NAME=FILE.npy binds a training input (model inputs and targets, see 'session show'). Without\n"
      "--batch-size every step trains on the whole arrays; with it, on consecutive batches of their first axis\n"
      "(cycling). --steps defaults to one pass over the batches.\n"
      "JSON: {\"session_id\", \"steps\": [traind.v1.TrainStepResponse, ...], \"seconds\"}.\n"
      "example: trainctl train --session s1 --input input=x.npy --input target=y.npy --batch-size 32 --steps 100\n",
      {SessionFlag(),
       {"input", "NAME=FILE.npy", "a training input and its data", true},
       {"steps", "N", "steps to take (default: one pass over the batches)"},
       {"batch-size", "B", "rows of the first axis per step (default: all)"},
       {"accumulate", "", "forward + backward only: gradients accumulate, no optimizer step"},
       {"stream", "",
        "send the steps over one TrainStream instead of a TrainStep call each (no deadline unless --timeout, "
        "which then bounds the whole stream)"}},
      0, 0, 60, RunTrain});
  commands.push_back(CommandSpec{
      "eval", "", "evaluate a batch from .npy files with the eval model (Eval)",
      "JSON: the traind.v1.EvalResponse message; output tensors without their data (use --save).\n"
      "example: trainctl eval --session s1 --input input=x.npy --input target=y.npy --save logits=logits.npy\n",
      {SessionFlag(),
       {"input", "NAME=FILE.npy", "an eval input and its data", true},
       {"fetch", "NAMES", "outputs to return beside the loss", true},
       {"save", "NAME=FILE.npy", "write this output to a .npy file (fetches it)", true}},
      0, 0, 60, RunEval});
  commands.push_back(CommandSpec{"optimizer step", "",
                                 "apply the accumulated gradients (OptimizerStep, after 'train --accumulate')",
                                 "JSON: the traind.v1.OptimizerStepResponse message.\n", {SessionFlag()}, 0, 0, 60,
                                 RunOptimizerStep});
  commands.push_back(CommandSpec{"optimizer reset-grad", "",
                                 "the next train step overwrites the gradients instead of adding (LazyResetGrad)",
                                 "JSON: {\"session_id\", \"reset\": true}.\n", {SessionFlag()}, 0, 0, 60,
                                 RunResetGrad});
  commands.push_back(CommandSpec{"lr get", "", "the session's learning rate and optimizer step (GetLearningRate)",
                                 "JSON: the traind.v1.LearningRate message.\n", {SessionFlag()}, 0, 0, 60, RunLrGet});
  commands.push_back(CommandSpec{"lr set", "VALUE", "set the learning rate (SetLearningRate)",
                                 "JSON: the traind.v1.LearningRate message.\nexample: trainctl lr set --session s1 "
                                 "0.001\n",
                                 {SessionFlag()}, 1, 1, 60, RunLrSet});
  commands.push_back(CommandSpec{
      "lr schedule", "", "set or remove the session's learning-rate scheduler (SetScheduler)",
      "Without --scheduler the scheduler is removed. JSON: the traind.v1.SetSchedulerResponse message.\n"
      "example: trainctl lr schedule --session s1 --scheduler cosine --warmup-steps 10 --total-steps 500\n",
      Flags({{SessionFlag()},
             SchedulerFlags(),
             {{"initial-lr", "F", "the learning rate the schedule scales (default: the session's)"},
              {"manual-step", "", "move along the schedule only on 'lr step', not with every optimizer step"}}}),
      0, 0, 60, RunLrSchedule});
  commands.push_back(CommandSpec{"lr step", "", "set the learning rate to the schedule's value now (SchedulerStep)",
                                 "JSON: the traind.v1.LearningRate message.\n", {SessionFlag()}, 0, 0, 60,
                                 RunLrStep});
  return commands;
}

}  // namespace traind::cli
