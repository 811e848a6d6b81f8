// OpenCL devices for the GPU executor: discovery, one context per device for the whole process, programs compiled
// once per device (and cached on disk, so a daemon does not recompile at every start), and device memory
// accounting against a limit.
//
// OpenCL is the one compute API every GPU of edge devices and servers implements (Mali, Adreno, Intel, AMD,
// NVIDIA); on machines without a GPU, pocl (an OpenCL implementation on the CPU) runs the same kernels.
#ifndef TRAIND_ENGINE_GPU_DEVICE_H_
#define TRAIND_ENGINE_GPU_DEVICE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/gpu/opencl.h"

namespace traind::engine::gpu {

// One OpenCL device as ListDevices() finds it.
struct DeviceInfo {
  int index = 0;  // Position in ListDevices(): platforms in the ICD loader's order, each platform's devices in order.
  std::string platform;  // CL_PLATFORM_NAME, e.g. "Portable Computing Language", "NVIDIA CUDA"
  std::string platform_version;
  std::string name;
  std::string vendor;
  std::string version;  // CL_DEVICE_VERSION, e.g. "OpenCL 3.0 CUDA"
  std::string driver_version;
  std::string opencl_c_version;  // CL_DEVICE_OPENCL_C_VERSION, e.g. "OpenCL C 1.2 "
  std::string type;              // "gpu", "cpu", "accelerator" or "other"
  int64_t global_memory_bytes = 0;
  int64_t max_allocation_bytes = 0;
  int64_t compute_units = 0;
  int64_t max_work_group_size = 0;
};

// Every device of every OpenCL platform installed. FailedPrecondition, naming what is missing, when there is none
// (no ICD loader platform: neither a GPU driver's OpenCL nor pocl is installed).
absl::StatusOr<std::vector<DeviceInfo>> ListDevices();

// Process-wide settings; the daemon sets them once at start-up, before the first device is used.
struct RuntimeOptions {
  // Where compiled programs are kept between runs; empty: no disk cache (each process compiles once per device).
  std::string program_cache_dir;
  // Device memory the process may use on each device; 0: the device's CL_DEVICE_GLOBAL_MEM_SIZE.
  int64_t memory_limit_bytes = 0;
};
void SetRuntimeOptions(const RuntimeOptions& options);
RuntimeOptions GetRuntimeOptions();
// $XDG_CACHE_HOME/traind/opencl, else $HOME/.cache/traind/opencl, else empty.
std::string DefaultProgramCacheDir();

// Counts of the program cache, for tests and diagnostics.
struct ProgramCacheStats {
  int64_t compiled = 0;        // built from source
  int64_t loaded_binaries = 0; // built from a binary of the disk cache
  int64_t rejected_binaries = 0;  // cache files that were damaged or that the driver refused (then rebuilt)
};

// One device, its context and its compiled programs; lives as long as the process (Get() hands out the same one).
// Thread-safe.
class Device {
 public:
  // The device ListDevices()[index]: FailedPrecondition when there is no OpenCL device at all, InvalidArgument when
  // `index` is not one of them.
  static absl::StatusOr<std::shared_ptr<Device>> Get(int index);

  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const DeviceInfo& info() const { return info_; }
  cl_context context() const { return context_; }
  cl_device_id id() const { return id_; }
  // Work-group size for 1-D kernels: 64, or the device's maximum if smaller. One size for every kernel keeps the
  // number of compiled variants small (pocl compiles a kernel per work-group size).
  size_t work_group_size() const { return work_group_size_; }

  // The program built from the embedded source `file_name` (engine/gpu/sources.h), compiled once per process and
  // device: from the disk cache when it holds a binary for this source, options, device and driver, else from
  // source (the build log is in the error). Build options follow the device's OpenCL C version; never
  // -cl-fast-relaxed-math (non-finite values must stay IEEE: steps with them are skipped, not trained on).
  absl::StatusOr<cl_program> Program(absl::string_view file_name);
  ProgramCacheStats program_cache_stats() const;
  // The counts of device `index` if this process has opened it (Get), without opening it; nullopt otherwise.
  static std::optional<ProgramCacheStats> ProgramCacheStatsIfOpen(int index);
  // Forgets the programs built so far (the disk cache stays; kernels made from them keep them alive): the next
  // Program() call builds again, from the disk cache when it can. For tests of the cache.
  void ForgetPrograms();
  // The key a program's binary is cached under: SHA-256 of the format version, source, options, platform, device
  // and driver.
  std::string ProgramCacheKey(absl::string_view source, absl::string_view options) const;
  // The disk cache (RuntimeOptions::program_cache_dir) for programs built by others (CLBlast's, blas.cc): the binary
  // kept under `key`, if the cache holds an intact one (a damaged file is removed and counted as rejected); and
  // keeping one, atomically (a cache that cannot be written costs a compile at the next start, nothing else).
  std::optional<std::string> ReadCachedBinary(const std::string& key);
  void WriteCachedBinary(const std::string& key, absl::string_view binary);
  void RemoveCachedBinary(const std::string& key);
  // Counts such a program in program_cache_stats(): built from source, built from a cached binary, or a cached binary
  // the driver refused.
  void CountProgram(bool from_cache);
  void CountRejectedBinary();

  // Device memory accounting: every allocation of the GPU executor reserves its bytes first. ResourceExhausted,
  // naming the device and the amounts, beyond the limit (RuntimeOptions::memory_limit_bytes, else the device's
  // global memory) or beyond the device's largest single allocation.
  absl::Status Reserve(size_t bytes);
  void Unreserve(size_t bytes);
  int64_t bytes_reserved() const { return bytes_reserved_.load(); }
  int64_t memory_limit_bytes() const { return memory_limit_; }

 private:
  Device(DeviceInfo info, cl_device_id id, cl_context context);
  absl::StatusOr<cl_program> Build(absl::string_view file_name, absl::string_view source);
  std::string BuildOptions() const;

  DeviceInfo info_;
  cl_device_id id_;
  cl_context context_;
  size_t work_group_size_;
  int64_t memory_limit_;
  std::atomic<int64_t> bytes_reserved_{0};
  mutable std::mutex programs_mutex_;
  std::map<std::string, cl_program, std::less<>> programs_;
  // Programs that failed to build, with the error: not rebuilt at every node that wants them.
  std::map<std::string, absl::Status, std::less<>> failed_;
  ProgramCacheStats stats_;
};

}  // namespace traind::engine::gpu

#endif  // TRAIND_ENGINE_GPU_DEVICE_H_
