// eval_bench: forward-pass timing of an ONNX model on .npy inputs with traind's engine.
//
//   bazel run -c opt //bench:eval_bench -- --model=M.onnx --input=input=x.npy [--reference=logits=ref.npy]
//       [--threads=2] [--warmup=20] [--min_iters=20] [--min_time=1.5] [--repeats=3] [--json]
//       [--noprepare_constants] [--nofuse_elementwise] [--nofold_bias_adds] [--nofuse_attention]
//
// Compile once, run `warmup` times, then time single runs until both min_iters and min_time are reached;
// repeat that `repeats` times and report the median of the per-repeat medians (and p10/p90 of all runs).
// With --reference the outputs are compared first (max abs error relative to the reference's max abs).
// --device gpu[:N] runs on the OpenCL GPU executor: each run then gets fresh copies of the inputs (as a served
// request does), outputs are read back, and the transfers per run are reported.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "bench/bench_stats.h"
#include "bench/node_profile.h"
#include "engine/core/tensor.h"
#include "engine/core/thread_pool.h"
#include "engine/gpu/gpu_executor.h"
#include "engine/io/npy.h"
#include "engine/model/model_loader.h"
#include "engine/runtime/cpu_executor.h"
#include "engine/runtime/plan.h"
#include "engine/runtime/session.h"

extern "C" void openblas_set_num_threads(int num_threads);

ABSL_FLAG(std::string, model, "", "ONNX model file.");
ABSL_FLAG(std::vector<std::string>, input, {}, "NAME=FILE.npy, one per graph input (comma-separated or repeated).");
ABSL_FLAG(std::vector<std::string>, reference, {}, "OUTPUT=FILE.npy to check before timing.");
ABSL_FLAG(int, threads, 2, "Intra-op threads (engine pool, oneDNN/OpenMP, OpenBLAS).");
ABSL_FLAG(int, warmup, 20, "Untimed runs first.");
ABSL_FLAG(int, min_iters, 20, "Timed runs per repeat, at least.");
ABSL_FLAG(double, min_time, 1.5, "Seconds per repeat, at least.");
ABSL_FLAG(int, repeats, 3, "Repeats; the reported median is the median of their medians.");
ABSL_FLAG(bool, json, false, "Print one JSON line instead of text.");
ABSL_FLAG(std::string, device, "cpu", "cpu, or gpu / gpu:N: the OpenCL GPU executor on device N.");
ABSL_FLAG(bool, profile, false, "Also print the time per op type (one more timed pass, profiled).");
ABSL_FLAG(int, profile_nodes, 0, "With --profile, also print the N slowest nodes, with their inputs.");
ABSL_FLAG(bool, fold_bias_adds, true,
          "Fold a Linear layer's bias Add into its product (engine/runtime/bias_folding.h); --nofold_bias_adds "
          "measures what it brings.");
ABSL_FLAG(bool, fuse_attention, true,
          "Fuse attention's MatMul -> scale -> Softmax -> MatMul into one node (engine/runtime/attention_fusion.h); "
          "--nofuse_attention measures what it brings.");
ABSL_FLAG(bool, fuse_elementwise, true,
          "Fuse groups of elementwise nodes (engine/runtime/fused_elementwise.h); --nofuse_elementwise measures "
          "what that brings.");
ABSL_FLAG(bool, channels_last, true,
          "Activations channels-last between convolutions (engine/runtime/channels_last.h); "
          "--nochannels_last measures what that brings.");
ABSL_FLAG(bool, prepare_constants, true,
          "Let kernels prepare constant inputs at compile time (Kernel::PrepareConstants); --noprepare_constants "
          "measures what that brings.");

namespace traind::engine {
namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "eval_bench: %s\n", message.c_str());
  return 1;
}

int Main() {
  const int threads = absl::GetFlag(FLAGS_threads);
  openblas_set_num_threads(threads);
  ThreadPool pool(threads);

  LoadOptions load_options;
  load_options.map_external_data = true;  // weights in external data files are mapped, not copied
  absl::StatusOr<onnx::ModelProto> model = LoadModelFromFile(absl::GetFlag(FLAGS_model), load_options);
  if (!model.ok()) return Fail(std::string(model.status().message()));
  CompileOptions compile_options;
  compile_options.prepare_constants = absl::GetFlag(FLAGS_prepare_constants);
  // The GPU executor places nodes by their op type; --nofuse_elementwise measures what fusion brings.
  compile_options.fuse_elementwise = absl::GetFlag(FLAGS_fuse_elementwise) && absl::GetFlag(FLAGS_device) == "cpu";
  compile_options.fold_transposes = absl::GetFlag(FLAGS_device) == "cpu";
  compile_options.fold_bias_adds = absl::GetFlag(FLAGS_fold_bias_adds) && absl::GetFlag(FLAGS_device) == "cpu";
  compile_options.fuse_attention = absl::GetFlag(FLAGS_fuse_attention) && absl::GetFlag(FLAGS_device) == "cpu";
  compile_options.fuse_gelu = absl::GetFlag(FLAGS_fuse_elementwise) && absl::GetFlag(FLAGS_device) == "cpu";
  compile_options.channels_last = absl::GetFlag(FLAGS_channels_last) && absl::GetFlag(FLAGS_device) == "cpu";
  absl::StatusOr<std::shared_ptr<const Plan>> plan = Compile(*model, compile_options);
  if (!plan.ok()) return Fail(std::string(plan.status().message()));
  std::unique_ptr<Executor> executor;
  CpuExecutor* cpu_executor = nullptr;
  std::shared_ptr<gpu::Stream> stream;
  std::string placement;
  const std::string device = absl::GetFlag(FLAGS_device);
  if (device == "cpu") {
    auto cpu = std::make_unique<CpuExecutor>(&pool);
    cpu_executor = cpu.get();
    executor = std::move(cpu);
  } else {
    absl::string_view rest = device;
    int index = 0;
    if (!absl::ConsumePrefix(&rest, "gpu") ||
        (!rest.empty() && (!absl::ConsumePrefix(&rest, ":") || !absl::SimpleAtoi(rest, &index)))) {
      return Fail("--device must be cpu, gpu or gpu:N, got " + device);
    }
    absl::StatusOr<std::shared_ptr<gpu::Device>> opened = gpu::Device::Get(index);
    if (!opened.ok()) return Fail(std::string(opened.status().message()));
    absl::StatusOr<std::shared_ptr<gpu::Stream>> made = gpu::Stream::Create(*opened);
    if (!made.ok()) return Fail(std::string(made.status().message()));
    stream = *made;
    gpu::GpuExecutorOptions options;
    options.stream = stream;
    options.threads = &pool;
    absl::StatusOr<std::unique_ptr<gpu::GpuExecutor>> gpu_executor = gpu::GpuExecutor::Create(*plan, *model, options);
    if (!gpu_executor.ok()) return Fail(std::string(gpu_executor.status().message()));
    placement = absl::StrCat((*opened)->info().name, "; ", (*gpu_executor)->placement().Summary());
    executor = *std::move(gpu_executor);
  }
  Session session(*plan, std::move(executor));
  // One run as served: on the GPU fresh input copies each run (their upload is part of it) and every output read.
  auto run = [&](const NamedTensors& given) -> absl::StatusOr<NamedTensors> {
    if (stream == nullptr) return session.Run(given);
    NamedTensors fresh;
    for (const auto& [name, tensor] : given) {
      Tensor copy = *Tensor::Allocate(tensor.dtype(), tensor.shape());
      std::memcpy(copy.mutable_raw_data(), tensor.raw_data(), tensor.byte_size());
      fresh.emplace_back(name, std::move(copy));
    }
    absl::StatusOr<NamedTensors> outputs = session.Run(fresh);
    if (outputs.ok()) {
      for (const auto& [name, tensor] : *outputs) {
        if (absl::Status synced = tensor.buffer()->SyncToHost(); !synced.ok()) return synced;
      }
    }
    return outputs;
  };

  NamedTensors inputs;
  for (const std::string& spec : absl::GetFlag(FLAGS_input)) {
    std::vector<std::string> parts = absl::StrSplit(spec, absl::MaxSplits('=', 1));
    if (parts.size() != 2) return Fail("--input wants NAME=FILE.npy, got " + spec);
    absl::StatusOr<Tensor> tensor = ReadNpy(parts[1]);
    if (!tensor.ok()) return Fail(std::string(tensor.status().message()));
    inputs.emplace_back(parts[0], *tensor);
  }
  absl::StatusOr<NamedTensors> first = run(inputs);
  if (!first.ok()) return Fail(std::string(first.status().message()));

  double worst_relative_error = 0;
  for (const std::string& spec : absl::GetFlag(FLAGS_reference)) {
    std::vector<std::string> parts = absl::StrSplit(spec, absl::MaxSplits('=', 1));
    if (parts.size() != 2) return Fail("--reference wants OUTPUT=FILE.npy, got " + spec);
    absl::StatusOr<Tensor> expected = ReadNpy(parts[1]);
    if (!expected.ok()) return Fail(std::string(expected.status().message()));
    const Tensor* actual = nullptr;
    for (const auto& [name, tensor] : *first) {
      if (name == parts[0]) actual = &tensor;
    }
    if (actual == nullptr) return Fail("the model has no output " + parts[0]);
    if (actual->shape() != expected->shape() || actual->dtype() != DataType::kFloat32 ||
        expected->dtype() != DataType::kFloat32) {
      return Fail("output " + parts[0] + " is " + actual->DebugString() + ", reference " + expected->DebugString());
    }
    double max_error = 0, max_reference = 0;
    for (int64_t i = 0; i < actual->num_elements(); ++i) {
      max_error = std::max<double>(max_error, std::fabs(actual->data<float>()[i] - expected->data<float>()[i]));
      max_reference = std::max<double>(max_reference, std::fabs(expected->data<float>()[i]));
    }
    worst_relative_error = std::max(worst_relative_error, max_error / std::max(max_reference, 1e-30));
  }
  if (worst_relative_error > 1e-4) {
    return Fail("outputs differ from the reference: max error " + std::to_string(worst_relative_error) +
                " of the reference's max abs");
  }

  for (int i = 0; i < absl::GetFlag(FLAGS_warmup); ++i) (void)run(inputs);
  const gpu::TransferCounts transfers_before = stream != nullptr ? stream->transfers() : gpu::TransferCounts();
  std::vector<double> all_ms, repeat_medians;
  for (int repeat = 0; repeat < absl::GetFlag(FLAGS_repeats); ++repeat) {
    std::vector<double> ms;
    const auto start = std::chrono::steady_clock::now();
    while (static_cast<int>(ms.size()) < absl::GetFlag(FLAGS_min_iters) ||
           std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
               absl::GetFlag(FLAGS_min_time)) {
      const auto t0 = std::chrono::steady_clock::now();
      absl::StatusOr<NamedTensors> outputs = run(inputs);
      const auto t1 = std::chrono::steady_clock::now();
      if (!outputs.ok()) return Fail(std::string(outputs.status().message()));
      ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    }
    repeat_medians.push_back(Median(ms));
    all_ms.insert(all_ms.end(), ms.begin(), ms.end());
  }
  const double median = Median(repeat_medians);
  const gpu::TransferCounts moved = stream != nullptr ? stream->transfers() - transfers_before : gpu::TransferCounts();
  const double runs = static_cast<double>(all_ms.size());
  if (absl::GetFlag(FLAGS_profile) && cpu_executor == nullptr) {
    std::fprintf(stderr, "profile: per-op times are measured on the CPU executor only\n");
  } else if (absl::GetFlag(FLAGS_profile)) {
    CpuExecutor::Profile profile;
    cpu_executor->EnableProfiling(&profile);
    for (int i = 0; i < absl::GetFlag(FLAGS_min_iters); ++i) (void)session.Run(inputs);
    cpu_executor->EnableProfiling(nullptr);
    PrintNodeProfile(**plan, profile, "run", {}, absl::GetFlag(FLAGS_profile_nodes));
  }
  if (absl::GetFlag(FLAGS_json)) {
    std::printf("{\"model\": \"%s\", \"device\": \"%s\", \"threads\": %d, \"median_ms\": %.4f, "
                "\"p10_ms\": %.4f, \"p90_ms\": %.4f, \"runs\": %zu, \"max_rel_error\": %.3g, "
                "\"uploads_per_run\": %.2f, \"downloads_per_run\": %.2f}\n",
                absl::GetFlag(FLAGS_model).c_str(), device.c_str(), threads, median, Percentile(all_ms, 0.1),
                Percentile(all_ms, 0.9), all_ms.size(), worst_relative_error, moved.uploads / runs,
                moved.downloads / runs);
  } else {
    std::printf("model %s threads %d: median %.3f ms (p10 %.3f, p90 %.3f, %zu runs), max rel error %.3g\n",
                absl::GetFlag(FLAGS_model).c_str(), threads, median, Percentile(all_ms, 0.1),
                Percentile(all_ms, 0.9), all_ms.size(), worst_relative_error);
    if (stream != nullptr) {
      std::printf("device %s\ntransfers per run: %.2f uploads (%.0f bytes), %.2f downloads (%.0f bytes)\n",
                  placement.c_str(), moved.uploads / runs, moved.upload_bytes / runs, moved.downloads / runs,
                  moved.download_bytes / runs);
    }
  }
  return 0;
}

}  // namespace
}  // namespace traind::engine

int main(int argc, char** argv) {
  traind::engine::ConfigureProcessAllocator();  // as the daemon does
  absl::ParseCommandLine(argc, argv);
  return traind::engine::Main();
}
