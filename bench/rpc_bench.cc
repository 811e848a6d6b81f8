// rpc_bench: what the RPC path costs. A training step through a real traind daemon over loopback gRPC (TrainStep:
// forward + backward + optimizer step + lazy reset, with the batch in the request) side by side with the same step
// in process (Module + Optimizer, as train_bench), in alternating rounds of one run; then the total steps/s of 1, 2
// and 4 sessions stepping at once, each driven by its own client, beside as many models stepped round robin in
// process (N models' state against the caches, without the RPC path). Also TrainStream with batches in flight (the
// next batch travels while the current step computes), the path of a client streaming a dataset. And where the
// unary overhead goes: TrainSteps the daemon refuses before computing (empty, carrying the batch, and carrying it
// after a pause as long as a step, as a unary client's connection idles while the daemon computes).
//
//   bazel run -c opt //bench:rpc_bench -- --model=M.onnx --input=input=x.npy --target=target=y.npy
//       [--loss=cross_entropy|mse] [--threads=2] [--rounds=5] [--min_time=1] [--sessions=1,2,4] [--json]
//
// The daemon is started by the bench (the traind binary of this build, on 127.0.0.1 port 0, its own state
// directory, default flags: one step at a time, every core to it) and stopped at the end.
#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/bench_stats.h"
#include "client/connection.h"
#include "engine/core/status_macros.h"
#include "engine/core/tensor_bytes.h"
#include "engine/io/file_util.h"
#include "engine/io/npy.h"
#include "engine/model/model_loader.h"
#include "engine/training/artifacts.h"
#include "engine/training/module.h"
#include "grpcpp/grpcpp.h"
#include "tests/testing/process.h"
#include "traind/v1/training_service.grpc.pb.h"

extern "C" void openblas_set_num_threads(int num_threads);

ABSL_FLAG(std::string, model, "", "Forward ONNX model file.");
ABSL_FLAG(std::vector<std::string>, input, {}, "NAME=FILE.npy per forward input (comma-separated).");
ABSL_FLAG(std::vector<std::string>, target, {}, "NAME=FILE.npy per loss target (comma-separated).");
ABSL_FLAG(std::string, loss, "cross_entropy", "cross_entropy | mse (first model output vs the target).");
ABSL_FLAG(int, threads, 2, "Intra-op threads of the in-process Module and of each daemon session.");
ABSL_FLAG(int, rounds, 5, "Alternating rounds of in-process and RPC timing.");
ABSL_FLAG(double, min_time, 1.0, "Seconds per round and per side, at least.");
ABSL_FLAG(int, stream_window, 2, "Batches in flight on the TrainStream measurement.");
ABSL_FLAG(int, warmup, 10, "Untimed steps before each side's first round.");
ABSL_FLAG(std::vector<std::string>, sessions, std::vector<std::string>({"1", "2", "4"}),
          "Concurrent session counts for the throughput part.");
ABSL_FLAG(std::string, traind, "", "The traind binary (default: this build's, from the runfiles).");
ABSL_FLAG(bool, json, false, "Print one JSON line instead of text.");

namespace traind {
namespace {

namespace v1 = ::traind::v1;
using engine::NamedTensors;
using engine::Tensor;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point from, Clock::time_point to) { return std::chrono::duration<double>(to - from).count(); }

absl::StatusOr<NamedTensors> ReadNamedNpys(const std::vector<std::string>& specs) {
  NamedTensors tensors;
  for (const std::string& spec : specs) {
    std::vector<std::string> parts = absl::StrSplit(spec, absl::MaxSplits('=', 1));
    if (parts.size() != 2) return absl::InvalidArgumentError("--input/--target want NAME=FILE.npy");
    TRAIND_ASSIGN_OR_RETURN(Tensor tensor, engine::ReadNpy(parts[1]));
    tensors.emplace_back(parts[0], std::move(tensor));
  }
  return tensors;
}

v1::Tensor ToWire(const std::string& name, const Tensor& tensor) {
  v1::Tensor wire;
  wire.set_name(name);
  wire.set_dtype(tensor.dtype() == engine::DataType::kInt64 ? v1::INT64 : v1::FLOAT32);
  for (int64_t dim : tensor.shape()) wire.add_shape(dim);
  wire.set_data(engine::TensorToBytes(tensor));
  return wire;
}

struct Workload {
  std::string model_bytes;
  onnx::ModelProto forward;
  NamedTensors batch;  // inputs then targets
  bool cross_entropy = true;
};

// The in-process side: the same artifacts as the daemon's session (GenerateArtifacts with the same options).
struct InProcess {
  engine::CheckpointState state;
  std::unique_ptr<engine::Module> module;
  std::unique_ptr<engine::Optimizer> optimizer;
};

absl::StatusOr<std::unique_ptr<InProcess>> MakeInProcess(const engine::Artifacts& artifacts, int threads) {
  auto trainer = std::make_unique<InProcess>();
  trainer->state = artifacts.checkpoint;
  engine::ModuleOptions options;
  options.num_threads = threads;
  TRAIND_ASSIGN_OR_RETURN(trainer->module, engine::Module::Create(artifacts, &trainer->state, options));
  TRAIND_ASSIGN_OR_RETURN(trainer->optimizer,
                          engine::Optimizer::Create(artifacts.optimizer_model, trainer->module.get()));
  return trainer;
}

absl::Status InProcessStep(InProcess& trainer, const NamedTensors& batch) {
  TRAIND_RETURN_IF_ERROR(trainer.module->TrainStep(batch).status());
  TRAIND_RETURN_IF_ERROR(trainer.optimizer->Step().status());
  trainer.module->LazyResetGrad();
  return absl::OkStatus();
}

absl::Status FromGrpc(const grpc::Status& status, const char* what) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

class Remote {
 public:
  static absl::StatusOr<std::unique_ptr<Remote>> Connect(const std::string& address) {
    auto remote = std::unique_ptr<Remote>(new Remote());
    ConnectionOptions options;
    options.address = address;
    TRAIND_ASSIGN_OR_RETURN(std::shared_ptr<grpc::Channel> channel, traind::Connect(options));
    remote->stub_ = v1::TrainingService::NewStub(channel);
    return remote;
  }

  absl::StatusOr<std::string> Generate(const Workload& work) {
    v1::GenerateArtifactsRequest request;
    request.mutable_model()->set_onnx_bytes(work.model_bytes);
    request.mutable_loss()->mutable_builtin()->set_type(work.cross_entropy ? v1::CROSS_ENTROPY : v1::MSE);
    request.mutable_optimizer()->mutable_adamw();
    v1::GenerateArtifactsResponse response;
    grpc::ClientContext context;
    TRAIND_RETURN_IF_ERROR(FromGrpc(stub_->GenerateArtifacts(&context, request, &response), "GenerateArtifacts"));
    return response.artifact_id();
  }

  absl::StatusOr<std::string> CreateSession(const std::string& artifact_id, int threads) {
    v1::CreateSessionRequest request;
    request.set_artifact_id(artifact_id);
    request.set_num_threads(threads);
    v1::Session session;
    grpc::ClientContext context;
    TRAIND_RETURN_IF_ERROR(FromGrpc(stub_->CreateSession(&context, request, &session), "CreateSession"));
    return session.session_id();
  }

  // The request is built once: what a client that streams batches sends per step.
  void Prepare(const std::string& session, const NamedTensors& batch) {
    request_.set_session_id(session);
    request_.clear_inputs();
    for (const auto& [name, tensor] : batch) *request_.add_inputs() = ToWire(name, tensor);
    refused_empty_.set_session_id("no-such-session");
    refused_with_batch_ = request_;
    refused_with_batch_.set_session_id("no-such-session");
  }

  absl::Status Step() {
    grpc::ClientContext context;
    v1::TrainStepResponse response;
    return FromGrpc(stub_->TrainStep(&context, request_, &response), "TrainStep");
  }

  // Where the unary overhead goes: a TrainStep the daemon refuses (NOT_FOUND: no such session) after decoding its
  // inputs, with or without the batch. Neither computes anything: without the batch it is the RPC floor, with it
  // the floor plus moving and decoding the batch. `idle_before` sleeps first, as a unary client's connection sits
  // idle while the daemon computes a step: on small VMs the wake-ups after such a pause cost more than the bytes.
  absl::Status RefusedStep(bool with_batch, absl::Duration idle_before) {
    if (idle_before > absl::ZeroDuration()) absl::SleepFor(idle_before);
    grpc::ClientContext context;
    v1::TrainStepResponse response;
    const grpc::Status status =
        stub_->TrainStep(&context, with_batch ? refused_with_batch_ : refused_empty_, &response);
    if (status.error_code() == grpc::StatusCode::NOT_FOUND) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("a TrainStep of an unknown session answered ", status.error_code(), ": ",
                                            status.error_message()));
  }

  // TrainStream with `window` batches in flight, what a client streaming a dataset does: the next batch travels
  // while the daemon computes the current step. Steps until `min_time` has passed (and at least 5); returns the
  // milliseconds between consecutive answers (the steady-state cost of a step).
  absl::StatusOr<std::vector<double>> StreamSteps(double min_time, int window) {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReaderWriter<v1::TrainStepRequest, v1::TrainStreamResponse>> stream =
        stub_->TrainStream(&context);
    int64_t sent = 0, received = 0;
    while (sent < window && stream->Write(request_)) ++sent;
    std::vector<double> ms;
    const Clock::time_point start = Clock::now();
    Clock::time_point last = start;
    bool writing = true;
    v1::TrainStreamResponse response;
    while (received < sent && stream->Read(&response)) {
      ++received;
      const Clock::time_point now = Clock::now();
      if (received > 1) ms.push_back(1e3 * std::chrono::duration<double>(now - last).count());
      last = now;
      writing = writing && (ms.size() < 5 || std::chrono::duration<double>(now - start).count() < min_time);
      if (writing && stream->Write(request_)) ++sent;
    }
    stream->WritesDone();
    TRAIND_RETURN_IF_ERROR(FromGrpc(stream->Finish(), "TrainStream"));
    if (received != sent) return absl::InternalError("TrainStream ended before answering every batch");
    return ms;
  }

 private:
  Remote() = default;
  std::unique_ptr<v1::TrainingService::Stub> stub_;
  v1::TrainStepRequest request_;
  v1::TrainStepRequest refused_empty_, refused_with_batch_;
};

// Where the CPU of the RPC path goes, measured rather than timed: the daemon's threads other than its compute
// threads (gRPC's, named by the pool; see ComputePool::kComputeThreadName) and the whole client process. The
// daemon's figures come from /proc in clock ticks (10 ms), so they are summed over whole rounds.
struct CpuSeconds {
  double daemon_total = 0;
  double daemon_compute = 0;
  double client = 0;
};

// utime + stime of /proc/.../stat, in seconds; -1 when unreadable.
double ProcStatCpuSeconds(const std::string& stat_path) {
  std::ifstream file(stat_path);
  std::string text((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const size_t name_end = text.rfind(')');  // the command name may hold spaces and parentheses
  if (name_end == std::string::npos) return -1;
  std::vector<std::string> fields = absl::StrSplit(text.substr(name_end + 2), ' ');
  int64_t utime = 0, stime = 0;  // fields 14 and 15 of proc(5); fields[0] is field 3
  if (fields.size() < 13 || !absl::SimpleAtoi(fields[11], &utime) || !absl::SimpleAtoi(fields[12], &stime)) return -1;
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

CpuSeconds SampleCpu(pid_t daemon) {
  CpuSeconds sample;
  const std::string proc = absl::StrCat("/proc/", daemon);
  sample.daemon_total = ProcStatCpuSeconds(proc + "/stat");  // includes threads that have ended
  if (DIR* tasks = opendir((proc + "/task").c_str())) {
    while (const dirent* entry = readdir(tasks)) {
      if (entry->d_name[0] == '.') continue;
      const std::string task = absl::StrCat(proc, "/task/", entry->d_name);
      std::ifstream comm(task + "/comm");
      std::string name;
      std::getline(comm, name);
      if (name != "traind-compute") continue;
      const double seconds = ProcStatCpuSeconds(task + "/stat");
      if (seconds > 0) sample.daemon_compute += seconds;
    }
    closedir(tasks);
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  sample.client = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                  1e-6 * static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec);
  return sample;
}

// Accumulates the CPU of the RPC path over timed rounds.
struct RpcCpu {
  double daemon_rpc = 0, client = 0;
  int64_t steps = 0;
  void Add(const CpuSeconds& before, const CpuSeconds& after, int64_t round_steps) {
    daemon_rpc += (after.daemon_total - after.daemon_compute) - (before.daemon_total - before.daemon_compute);
    client += after.client - before.client;
    steps += round_steps;
  }
  double DaemonMicrosPerStep() const { return steps > 0 ? 1e6 * daemon_rpc / steps : 0; }
  double ClientMicrosPerStep() const { return steps > 0 ? 1e6 * client / steps : 0; }
};

// Steps until `min_time` has passed (and at least 5 steps); returns each step's milliseconds, less `excluded` (a
// pause the step takes before its call).
template <typename StepFn>
absl::StatusOr<std::vector<double>> TimeSteps(StepFn step, double min_time,
                                              absl::Duration excluded = absl::ZeroDuration()) {
  std::vector<double> ms;
  const Clock::time_point start = Clock::now();
  while (ms.size() < 5 || Seconds(start, Clock::now()) < min_time) {
    const Clock::time_point t0 = Clock::now();
    TRAIND_RETURN_IF_ERROR(step());
    ms.push_back(1e3 * Seconds(t0, Clock::now()) - absl::ToDoubleMilliseconds(excluded));
  }
  return ms;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "rpc_bench: %s\n", status.ToString().c_str());
  return 1;
}

int Main() {
  const int threads = absl::GetFlag(FLAGS_threads);
  openblas_set_num_threads(threads);
  Workload work;
  absl::StatusOr<std::string> bytes = engine::ReadFileLimited(absl::GetFlag(FLAGS_model), int64_t{1} << 30);
  if (!bytes.ok()) return Fail(bytes.status());
  work.model_bytes = *bytes;
  absl::StatusOr<onnx::ModelProto> forward = engine::LoadModelFromBytes(work.model_bytes);
  if (!forward.ok()) return Fail(forward.status());
  work.forward = *forward;
  absl::StatusOr<NamedTensors> inputs = ReadNamedNpys(absl::GetFlag(FLAGS_input));
  absl::StatusOr<NamedTensors> targets = ReadNamedNpys(absl::GetFlag(FLAGS_target));
  if (!inputs.ok()) return Fail(inputs.status());
  if (!targets.ok()) return Fail(targets.status());
  if (targets->size() != 1 || forward->graph().output_size() == 0) {
    return Fail(absl::InvalidArgumentError("one --target and a model with an output are needed"));
  }
  work.batch = *inputs;
  work.batch.emplace_back("target", (*targets)[0].second);
  work.cross_entropy = absl::GetFlag(FLAGS_loss) != "mse";

  // In process: the artifacts the daemon makes for the same request (torch.optim.AdamW's defaults).
  engine::ArtifactOptions options;
  engine::LossTerm term(work.cross_entropy ? engine::LossKind::kCrossEntropy : engine::LossKind::kMeanSquaredError,
                        forward->graph().output(0).name(), "target");
  options.loss = {term};
  absl::StatusOr<engine::Artifacts> artifacts = engine::GenerateArtifacts(*forward, options);
  if (!artifacts.ok()) return Fail(artifacts.status());
  absl::StatusOr<std::unique_ptr<InProcess>> local = MakeInProcess(*artifacts, threads);
  if (!local.ok()) return Fail(local.status());

  std::vector<std::string> flags = {"--metrics_listen="};
  absl::StatusOr<std::unique_ptr<testing::DaemonProcess>> daemon =
      testing::DaemonProcess::Start(flags, absl::GetFlag(FLAGS_traind));
  if (!daemon.ok()) return Fail(daemon.status());
  const std::string address = (*daemon)->grpc_address();
  absl::StatusOr<std::unique_ptr<Remote>> remote = Remote::Connect(address);
  if (!remote.ok()) return Fail(remote.status());
  absl::StatusOr<std::string> artifact_id = (*remote)->Generate(work);
  if (!artifact_id.ok()) return Fail(artifact_id.status());
  absl::StatusOr<std::string> session = (*remote)->CreateSession(*artifact_id, threads);
  if (!session.ok()) return Fail(session.status());
  (*remote)->Prepare(*session, work.batch);

  // Side by side: alternating rounds, so that both sides see the same machine conditions.
  auto local_step = [&] { return InProcessStep(**local, work.batch); };
  auto remote_step = [&] { return (*remote)->Step(); };
  for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) {
    if (absl::Status s = local_step(); !s.ok()) return Fail(s);
    if (absl::Status s = remote_step(); !s.ok()) return Fail(s);
  }
  std::vector<double> local_ms, remote_ms, stream_ms, floor_ms, floor_batch_ms, floor_idle_ms;
  const pid_t daemon_pid = (*daemon)->pid();
  RpcCpu unary_cpu, stream_cpu;
  for (int round = 0; round < absl::GetFlag(FLAGS_rounds); ++round) {
    absl::StatusOr<std::vector<double>> a = TimeSteps(local_step, absl::GetFlag(FLAGS_min_time));
    if (!a.ok()) return Fail(a.status());
    const CpuSeconds before_unary = SampleCpu(daemon_pid);
    absl::StatusOr<std::vector<double>> b = TimeSteps(remote_step, absl::GetFlag(FLAGS_min_time));
    if (!b.ok()) return Fail(b.status());
    const CpuSeconds after_unary = SampleCpu(daemon_pid);
    unary_cpu.Add(before_unary, after_unary, static_cast<int64_t>(b->size()));
    absl::StatusOr<std::vector<double>> c =
        (*remote)->StreamSteps(absl::GetFlag(FLAGS_min_time), std::max(1, absl::GetFlag(FLAGS_stream_window)));
    if (!c.ok()) return Fail(c.status());
    // The stream's first answer is not among the intervals: one more step than timed.
    stream_cpu.Add(after_unary, SampleCpu(daemon_pid), static_cast<int64_t>(c->size()) + 1);
    absl::StatusOr<std::vector<double>> d =
        TimeSteps([&] { return (*remote)->RefusedStep(false, absl::ZeroDuration()); }, 0.25);
    if (!d.ok()) return Fail(d.status());
    absl::StatusOr<std::vector<double>> e =
        TimeSteps([&] { return (*remote)->RefusedStep(true, absl::ZeroDuration()); }, 0.25);
    if (!e.ok()) return Fail(e.status());
    // After a pause as long as an in-process step (the time a unary client's connection sits idle per step).
    const absl::Duration step_pause = absl::Microseconds(1e3 * engine::Median(*a));
    absl::StatusOr<std::vector<double>> f = TimeSteps(
        [&] { return (*remote)->RefusedStep(true, step_pause); }, 0.25, /*excluded=*/step_pause);
    if (!f.ok()) return Fail(f.status());
    floor_ms.insert(floor_ms.end(), d->begin(), d->end());
    floor_batch_ms.insert(floor_batch_ms.end(), e->begin(), e->end());
    floor_idle_ms.insert(floor_idle_ms.end(), f->begin(), f->end());
    local_ms.insert(local_ms.end(), a->begin(), a->end());
    remote_ms.insert(remote_ms.end(), b->begin(), b->end());
    stream_ms.insert(stream_ms.end(), c->begin(), c->end());
  }
  const double local_median = engine::Median(local_ms), remote_median = engine::Median(remote_ms);
  const double stream_median = engine::Median(stream_ms);
  const double floor_median = engine::Median(floor_ms), floor_batch_median = engine::Median(floor_batch_ms);
  const double floor_idle_median = engine::Median(floor_idle_ms);

  // Throughput of N sessions at once, each with its own client (channel) and thread.
  std::map<int, double> steps_per_second, in_process_steps_per_second;
  for (const std::string& count_text : absl::GetFlag(FLAGS_sessions)) {
    int count = 0;
    if (!absl::SimpleAtoi(count_text, &count) || count < 1) {
      return Fail(absl::InvalidArgumentError("--sessions wants positive counts"));
    }
    std::vector<std::unique_ptr<Remote>> clients;
    for (int c = 0; c < count; ++c) {
      absl::StatusOr<std::unique_ptr<Remote>> client = Remote::Connect(address);
      if (!client.ok()) return Fail(client.status());
      absl::StatusOr<std::string> id = (*client)->CreateSession(*artifact_id, threads);
      if (!id.ok()) return Fail(id.status());
      (*client)->Prepare(*id, work.batch);
      for (int i = 0; i < 3; ++i) {
        if (absl::Status s = (*client)->Step(); !s.ok()) return Fail(s);
      }
      clients.push_back(*std::move(client));
    }
    std::atomic<int64_t> steps{0};
    std::atomic<bool> stop{false}, failed{false};
    std::vector<std::thread> workers;
    const double duration = std::max(2.0, 2 * absl::GetFlag(FLAGS_min_time));
    const Clock::time_point start = Clock::now();
    for (auto& client : clients) {
      workers.emplace_back([&, client = client.get()] {
        while (!stop.load()) {
          if (!client->Step().ok()) {
            failed = true;
            return;
          }
          ++steps;
        }
      });
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(duration));
    stop = true;
    for (std::thread& worker : workers) worker.join();
    if (failed) return Fail(absl::InternalError("a concurrent TrainStep failed"));
    steps_per_second[count] = static_cast<double>(steps.load()) / Seconds(start, Clock::now());

    // The same N models stepped round robin in process: what N sessions' state costs the caches alone (each keeps
    // its parameters, gradients and optimizer moments; past the last-level cache a step reloads them).
    std::vector<std::unique_ptr<InProcess>> models;
    for (int c = 0; c < count; ++c) {
      absl::StatusOr<std::unique_ptr<InProcess>> model = MakeInProcess(*artifacts, threads);
      if (!model.ok()) return Fail(model.status());
      models.push_back(*std::move(model));
    }
    int64_t next = 0;
    for (int i = 0; i < 2 * count; ++i) {
      if (absl::Status s = InProcessStep(*models[i % count], work.batch); !s.ok()) return Fail(s);
    }
    absl::StatusOr<std::vector<double>> round_robin =
        TimeSteps([&] { return InProcessStep(*models[next++ % count], work.batch); }, duration / 2);
    if (!round_robin.ok()) return Fail(round_robin.status());
    in_process_steps_per_second[count] = 1e3 / engine::Median(*round_robin);
  }

  const std::string model = absl::GetFlag(FLAGS_model);
  if (absl::GetFlag(FLAGS_json)) {
    std::string throughput, round_robin;
    for (const auto& [count, rate] : steps_per_second) {
      absl::StrAppend(&throughput, throughput.empty() ? "" : ", ", "\"", count, "\": ", rate);
      absl::StrAppend(&round_robin, round_robin.empty() ? "" : ", ", "\"", count, "\": ",
                      in_process_steps_per_second[count]);
    }
    std::printf("{\"model\": \"%s\", \"threads\": %d, \"in_process_ms\": %.4f, \"rpc_ms\": %.4f, \"ratio\": %.4f, "
                "\"overhead_us\": %.1f, \"stream_ms\": %.4f, \"stream_ratio\": %.4f, \"refused_call_us\": %.1f, "
                "\"refused_call_with_batch_us\": %.1f, \"refused_call_after_idle_us\": %.1f, \"unary_cpu_us\": "
                "{\"daemon_rpc\": %.1f, \"client\": %.1f}, \"stream_cpu_us\": {\"daemon_rpc\": %.1f, \"client\": %.1f}, "
                "\"steps_per_second\": {%s}, \"in_process_round_robin_steps_per_second\": {%s}}\n",
                model.c_str(), threads, local_median, remote_median, remote_median / local_median,
                1e3 * (remote_median - local_median), stream_median, stream_median / local_median,
                1e3 * floor_median, 1e3 * floor_batch_median, 1e3 * floor_idle_median,
                unary_cpu.DaemonMicrosPerStep(), unary_cpu.ClientMicrosPerStep(), stream_cpu.DaemonMicrosPerStep(),
                stream_cpu.ClientMicrosPerStep(), throughput.c_str(), round_robin.c_str());
  } else {
    std::printf("model %s threads %d: in-process %.3f ms/step, over gRPC %.3f ms/step: %.3fx (+%.1f us/step)\n",
                model.c_str(), threads, local_median, remote_median, remote_median / local_median,
                1e3 * (remote_median - local_median));
    std::printf("  over a TrainStream (%d batches in flight) %.3f ms/step: %.3fx (+%.1f us/step)\n",
                std::max(1, absl::GetFlag(FLAGS_stream_window)), stream_median, stream_median / local_median,
                1e3 * (stream_median - local_median));
    std::printf("  a refused TrainStep (no compute): %.1f us empty, %.1f us carrying the batch, %.1f us carrying it "
                "after a step's time idle\n", 1e3 * floor_median, 1e3 * floor_batch_median, 1e3 * floor_idle_median);
    std::printf("  CPU of the RPC path per step: unary %.0f us in the daemon's RPC threads + %.0f us in the client; "
                "TrainStream %.0f + %.0f us\n", unary_cpu.DaemonMicrosPerStep(), unary_cpu.ClientMicrosPerStep(),
                stream_cpu.DaemonMicrosPerStep(), stream_cpu.ClientMicrosPerStep());
    const double one = steps_per_second.count(1) ? steps_per_second[1] : 0;
    for (const auto& [count, rate] : steps_per_second) {
      std::printf("  %d session(s) at once: %.1f steps/s in total%s; %d model(s) stepped round robin in process: "
                  "%.1f steps/s\n", count, rate,
                  one > 0 ? absl::StrCat(" (", absl::SixDigits(rate / one), "x one session)").c_str() : "", count,
                  in_process_steps_per_second[count]);
    }
  }
  return 0;
}

}  // namespace
}  // namespace traind

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return traind::Main();
}
