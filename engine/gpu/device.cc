#include "engine/gpu/device.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "engine/core/status_macros.h"
#include "engine/gpu/sources.h"
#include "engine/io/file_util.h"

namespace traind::engine::gpu {
namespace {

// Bump when the cache file format or the build options' meaning changes: old files are then ignored.
constexpr char kCacheFormat[] = "traind-opencl-program v1";
constexpr int64_t kMaxCachedBinaryBytes = int64_t{256} << 20;

std::mutex& OptionsMutex() {
  static auto* mutex = new std::mutex();
  return *mutex;
}
RuntimeOptions& MutableOptions() {
  static auto* options = new RuntimeOptions{DefaultProgramCacheDir(), 0};
  return *options;
}

absl::StatusOr<std::string> PlatformString(cl_platform_id platform, cl_platform_info what) {
  size_t size = 0;
  TRAIND_CL_RETURN_IF_ERROR(clGetPlatformInfo(platform, what, 0, nullptr, &size), "clGetPlatformInfo");
  std::string value(size, '\0');
  TRAIND_CL_RETURN_IF_ERROR(clGetPlatformInfo(platform, what, size, value.data(), nullptr), "clGetPlatformInfo");
  return std::string(absl::StripTrailingAsciiWhitespace(value.c_str()));
}

absl::StatusOr<std::string> DeviceString(cl_device_id device, cl_device_info what) {
  size_t size = 0;
  TRAIND_CL_RETURN_IF_ERROR(clGetDeviceInfo(device, what, 0, nullptr, &size), "clGetDeviceInfo");
  std::string value(size, '\0');
  TRAIND_CL_RETURN_IF_ERROR(clGetDeviceInfo(device, what, size, value.data(), nullptr), "clGetDeviceInfo");
  return std::string(absl::StripTrailingAsciiWhitespace(value.c_str()));
}

template <typename T>
absl::StatusOr<T> DeviceValue(cl_device_id device, cl_device_info what) {
  T value{};
  TRAIND_CL_RETURN_IF_ERROR(clGetDeviceInfo(device, what, sizeof(T), &value, nullptr), "clGetDeviceInfo");
  return value;
}

struct Found {
  DeviceInfo info;
  cl_device_id id;
};

// The platforms and devices, found once per process (OpenCL has no hot-plug).
const absl::StatusOr<std::vector<Found>>& FoundDevices() {
  static const auto* found = new absl::StatusOr<std::vector<Found>>([]() -> absl::StatusOr<std::vector<Found>> {
    cl_uint num_platforms = 0;
    const cl_int code = clGetPlatformIDs(0, nullptr, &num_platforms);
    if (code == -1001 /* CL_PLATFORM_NOT_FOUND_KHR */ || (code == CL_SUCCESS && num_platforms == 0)) {
      return absl::FailedPreconditionError(
          "no OpenCL platform is installed (a GPU driver's OpenCL ICD, or pocl-opencl-icd to run on the CPU)");
    }
    TRAIND_CL_RETURN_IF_ERROR(code, "clGetPlatformIDs");
    std::vector<cl_platform_id> platforms(num_platforms);
    TRAIND_CL_RETURN_IF_ERROR(clGetPlatformIDs(num_platforms, platforms.data(), nullptr), "clGetPlatformIDs");
    std::vector<Found> devices;
    for (cl_platform_id platform : platforms) {
      cl_uint num_devices = 0;
      const cl_int listed = clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 0, nullptr, &num_devices);
      if (listed == CL_DEVICE_NOT_FOUND || num_devices == 0) continue;
      TRAIND_CL_RETURN_IF_ERROR(listed, "clGetDeviceIDs");
      std::vector<cl_device_id> ids(num_devices);
      TRAIND_CL_RETURN_IF_ERROR(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, num_devices, ids.data(), nullptr),
                                "clGetDeviceIDs");
      TRAIND_ASSIGN_OR_RETURN(const std::string platform_name, PlatformString(platform, CL_PLATFORM_NAME));
      TRAIND_ASSIGN_OR_RETURN(const std::string platform_version, PlatformString(platform, CL_PLATFORM_VERSION));
      for (cl_device_id id : ids) {
        Found device{DeviceInfo{}, id};
        DeviceInfo& info = device.info;
        info.index = static_cast<int>(devices.size());
        info.platform = platform_name;
        info.platform_version = platform_version;
        TRAIND_ASSIGN_OR_RETURN(info.name, DeviceString(id, CL_DEVICE_NAME));
        TRAIND_ASSIGN_OR_RETURN(info.vendor, DeviceString(id, CL_DEVICE_VENDOR));
        TRAIND_ASSIGN_OR_RETURN(info.version, DeviceString(id, CL_DEVICE_VERSION));
        TRAIND_ASSIGN_OR_RETURN(info.driver_version, DeviceString(id, CL_DRIVER_VERSION));
        TRAIND_ASSIGN_OR_RETURN(info.opencl_c_version, DeviceString(id, CL_DEVICE_OPENCL_C_VERSION));
        TRAIND_ASSIGN_OR_RETURN(const cl_device_type type, DeviceValue<cl_device_type>(id, CL_DEVICE_TYPE));
        info.type = (type & CL_DEVICE_TYPE_GPU)           ? "gpu"
                    : (type & CL_DEVICE_TYPE_CPU)         ? "cpu"
                    : (type & CL_DEVICE_TYPE_ACCELERATOR) ? "accelerator"
                                                          : "other";
        TRAIND_ASSIGN_OR_RETURN(const cl_ulong global, DeviceValue<cl_ulong>(id, CL_DEVICE_GLOBAL_MEM_SIZE));
        TRAIND_ASSIGN_OR_RETURN(const cl_ulong max_alloc, DeviceValue<cl_ulong>(id, CL_DEVICE_MAX_MEM_ALLOC_SIZE));
        TRAIND_ASSIGN_OR_RETURN(const cl_uint units, DeviceValue<cl_uint>(id, CL_DEVICE_MAX_COMPUTE_UNITS));
        TRAIND_ASSIGN_OR_RETURN(const size_t group, DeviceValue<size_t>(id, CL_DEVICE_MAX_WORK_GROUP_SIZE));
        info.global_memory_bytes = static_cast<int64_t>(global);
        info.max_allocation_bytes = static_cast<int64_t>(max_alloc);
        info.compute_units = units;
        info.max_work_group_size = static_cast<int64_t>(group);
        devices.push_back(std::move(device));
      }
    }
    if (devices.empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the ", num_platforms, " OpenCL platform(s) installed have no device"));
    }
    return devices;
  }());
  return *found;
}

// "OpenCL C 1.2 pocl" -> 102; 0 if unreadable.
int OpenClCVersion(const std::string& text) {
  absl::string_view rest = text;
  if (!absl::ConsumePrefix(&rest, "OpenCL C ")) return 0;
  const std::vector<absl::string_view> parts = absl::StrSplit(rest.substr(0, rest.find(' ')), '.');
  int major = 0, minor = 0;
  if (parts.size() < 2 || !absl::SimpleAtoi(parts[0], &major) || !absl::SimpleAtoi(parts[1], &minor)) return 0;
  return major * 100 + minor;
}

}  // namespace

absl::StatusOr<std::vector<DeviceInfo>> ListDevices() {
  const auto& found = FoundDevices();
  if (!found.ok()) return found.status();
  std::vector<DeviceInfo> infos;
  for (const Found& device : *found) infos.push_back(device.info);
  return infos;
}

void SetRuntimeOptions(const RuntimeOptions& options) {
  std::lock_guard<std::mutex> lock(OptionsMutex());
  MutableOptions() = options;
}

RuntimeOptions GetRuntimeOptions() {
  std::lock_guard<std::mutex> lock(OptionsMutex());
  return MutableOptions();
}

std::string DefaultProgramCacheDir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return absl::StrCat(xdg, "/traind/opencl");
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] == '/') return absl::StrCat(home, "/.cache/traind/opencl");
  return "";
}

namespace {

// The devices opened so far, by index (never closed: a device lives as long as the process).
struct OpenDevices {
  std::mutex mutex;
  std::map<int, std::shared_ptr<Device>> devices;
};
OpenDevices& Opened() {
  static auto* opened = new OpenDevices();
  return *opened;
}

}  // namespace

std::optional<ProgramCacheStats> Device::ProgramCacheStatsIfOpen(int index) {
  std::shared_ptr<Device> device;
  {
    std::lock_guard<std::mutex> lock(Opened().mutex);
    auto it = Opened().devices.find(index);
    if (it == Opened().devices.end()) return std::nullopt;
    device = it->second;
  }
  return device->program_cache_stats();
}

absl::StatusOr<std::shared_ptr<Device>> Device::Get(int index) {
  std::mutex* mutex = &Opened().mutex;
  std::map<int, std::shared_ptr<Device>>* devices = &Opened().devices;
  const auto& found = FoundDevices();
  if (!found.ok()) return found.status();
  if (index < 0 || index >= static_cast<int>(found->size())) {
    return absl::InvalidArgumentError(absl::StrCat("there is no OpenCL device ", index, ": this machine has ",
                                                   found->size(), " (0 to ", found->size() - 1, ")"));
  }
  std::lock_guard<std::mutex> lock(*mutex);
  std::shared_ptr<Device>& device = (*devices)[index];
  if (device == nullptr) {
    const Found& chosen = (*found)[index];
    cl_int code = CL_SUCCESS;
    cl_context context = clCreateContext(nullptr, 1, &chosen.id, nullptr, nullptr, &code);
    TRAIND_CL_RETURN_IF_ERROR(code, absl::StrCat("clCreateContext for ", chosen.info.name));
    device.reset(new Device(chosen.info, chosen.id, context));
  }
  return device;
}

Device::Device(DeviceInfo info, cl_device_id id, cl_context context)
    : info_(std::move(info)),
      id_(id),
      context_(context),
      work_group_size_(64) {
  // A power of two (the reductions halve it), at most what the device allows.
  while (work_group_size_ > 1 && static_cast<int64_t>(work_group_size_) > info_.max_work_group_size) {
    work_group_size_ /= 2;
  }
  const int64_t configured = GetRuntimeOptions().memory_limit_bytes;
  memory_limit_ = configured > 0 ? std::min(configured, info_.global_memory_bytes) : info_.global_memory_bytes;
}

Device::~Device() {
  for (auto& [name, program] : programs_) clReleaseProgram(program);
  clReleaseContext(context_);
}

std::string Device::BuildOptions() const {
  std::string options;
  if (OpenClCVersion(info_.opencl_c_version) >= 102) options = "-cl-std=CL1.2";
  // Division and sqrt as on the CPU where the device can (OpenCL's default allows 2.5 ulp).
  absl::StatusOr<cl_device_fp_config> config = DeviceValue<cl_device_fp_config>(id_, CL_DEVICE_SINGLE_FP_CONFIG);
  if (config.ok() && (*config & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT)) {
    absl::StrAppend(&options, options.empty() ? "" : " ", "-cl-fp32-correctly-rounded-divide-sqrt");
  }
  return options;
}

std::string Device::ProgramCacheKey(absl::string_view source, absl::string_view options) const {
  Sha256 digest;
  for (absl::string_view part : {absl::string_view(kCacheFormat), source, options,
                                 absl::string_view(info_.platform), absl::string_view(info_.platform_version),
                                 absl::string_view(info_.name), absl::string_view(info_.vendor),
                                 absl::string_view(info_.version), absl::string_view(info_.driver_version)}) {
    // Length-prefixed, so that no two different tuples hash the same bytes.
    digest.Update(absl::StrCat(part.size(), ":"));
    digest.Update(part);
  }
  return digest.FinishHex();
}

ProgramCacheStats Device::program_cache_stats() const {
  std::lock_guard<std::mutex> lock(programs_mutex_);
  return stats_;
}

void Device::ForgetPrograms() {
  std::lock_guard<std::mutex> lock(programs_mutex_);
  for (auto& [name, program] : programs_) clReleaseProgram(program);
  programs_.clear();
  failed_.clear();
}

absl::StatusOr<cl_program> Device::Program(absl::string_view file_name) {
  std::lock_guard<std::mutex> lock(programs_mutex_);
  if (auto it = programs_.find(file_name); it != programs_.end()) return it->second;
  if (auto it = failed_.find(file_name); it != failed_.end()) return it->second;
  const absl::string_view body = ClSource(file_name);
  if (body.empty()) return absl::InternalError(absl::StrCat("no embedded OpenCL source ", file_name));
  const std::string source = absl::StrCat(ClSource("prelude.cl"), "\n#line 1\n", body);
  absl::StatusOr<cl_program> program = Build(file_name, source);
  if (!program.ok()) {
    failed_.emplace(std::string(file_name), program.status());
    return program.status();
  }
  programs_.emplace(std::string(file_name), *program);
  return *program;
}

namespace {

std::string CachePath(const std::string& key) {
  const std::string cache_dir = GetRuntimeOptions().program_cache_dir;
  return cache_dir.empty() ? "" : absl::StrCat(cache_dir, "/", key, ".bin");
}

// A cached binary: "<format>\n<sha256 of the binary>\n<binary>". nullopt when absent; a damaged file is removed.
std::optional<std::string> ReadBinaryFile(const std::string& path, bool* damaged) {
  *damaged = false;
  absl::StatusOr<std::string> file = ReadFileLimited(path, kMaxCachedBinaryBytes);
  if (!file.ok()) return std::nullopt;
  const std::string header = absl::StrCat(kCacheFormat, "\n");
  const size_t digest_end = file->find('\n', header.size());
  if (absl::StartsWith(*file, header) && digest_end != std::string::npos) {
    const absl::string_view binary = absl::string_view(*file).substr(digest_end + 1);
    if (Sha256Hex(binary) == absl::string_view(*file).substr(header.size(), digest_end - header.size())) {
      return std::string(binary);
    }
  }
  *damaged = true;
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
  return std::nullopt;
}

void WriteBinaryFile(const std::string& path, absl::string_view binary) {
  if (path.empty() || binary.empty() || static_cast<int64_t>(binary.size()) > kMaxCachedBinaryBytes) return;
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), error);
  WriteFileAtomically(path, absl::StrCat(kCacheFormat, "\n", Sha256Hex(binary), "\n", binary)).IgnoreError();
}

}  // namespace

std::optional<std::string> Device::ReadCachedBinary(const std::string& key) {
  const std::string path = CachePath(key);
  if (path.empty()) return std::nullopt;
  bool damaged = false;
  std::optional<std::string> binary = ReadBinaryFile(path, &damaged);
  if (damaged) CountRejectedBinary();
  return binary;
}

void Device::WriteCachedBinary(const std::string& key, absl::string_view binary) {
  WriteBinaryFile(CachePath(key), binary);
}

void Device::RemoveCachedBinary(const std::string& key) {
  const std::string path = CachePath(key);
  if (path.empty()) return;
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
}

void Device::CountProgram(bool from_cache) {
  std::lock_guard<std::mutex> lock(programs_mutex_);
  ++(from_cache ? stats_.loaded_binaries : stats_.compiled);
}

void Device::CountRejectedBinary() {
  std::lock_guard<std::mutex> lock(programs_mutex_);
  ++stats_.rejected_binaries;
}

absl::StatusOr<cl_program> Device::Build(absl::string_view file_name, absl::string_view source) {
  const std::string options = BuildOptions();
  const std::string cache_path = CachePath(ProgramCacheKey(source, options));
  cl_int code = CL_SUCCESS;

  // Anything wrong with a cached binary -> build from source.
  if (!cache_path.empty()) {
    bool damaged = false;
    const std::optional<std::string> binary = ReadBinaryFile(cache_path, &damaged);
    if (binary.has_value()) {
      const size_t size = binary->size();
      const auto* bytes = reinterpret_cast<const unsigned char*>(binary->data());
      cl_int binary_status = CL_SUCCESS;
      cl_program program = clCreateProgramWithBinary(context_, 1, &id_, &size, &bytes, &binary_status, &code);
      if (code == CL_SUCCESS && binary_status == CL_SUCCESS &&
          clBuildProgram(program, 1, &id_, options.c_str(), nullptr, nullptr) == CL_SUCCESS) {
        ++stats_.loaded_binaries;
        return program;
      }
      if (program != nullptr) clReleaseProgram(program);
      damaged = true;
      std::error_code ignored;
      std::filesystem::remove(cache_path, ignored);
    }
    if (damaged) ++stats_.rejected_binaries;
  }

  const char* text = source.data();
  const size_t length = source.size();
  cl_program program = clCreateProgramWithSource(context_, 1, &text, &length, &code);
  TRAIND_CL_RETURN_IF_ERROR(code, absl::StrCat("clCreateProgramWithSource(", file_name, ")"));
  code = clBuildProgram(program, 1, &id_, options.c_str(), nullptr, nullptr);
  if (code != CL_SUCCESS) {
    size_t log_size = 0;
    clGetProgramBuildInfo(program, id_, CL_PROGRAM_BUILD_LOG, 0, nullptr, &log_size);
    std::string log(log_size, '\0');
    clGetProgramBuildInfo(program, id_, CL_PROGRAM_BUILD_LOG, log_size, log.data(), nullptr);
    clReleaseProgram(program);
    return absl::InternalError(absl::StrCat("building ", file_name, " for ", info_.name, " with '", options,
                                            "' failed: ", ClErrorName(code), "\n", log.c_str()));
  }
  ++stats_.compiled;

  if (!cache_path.empty()) {
    size_t binary_size = 0;
    if (clGetProgramInfo(program, CL_PROGRAM_BINARY_SIZES, sizeof(binary_size), &binary_size, nullptr) ==
            CL_SUCCESS &&
        binary_size > 0 && static_cast<int64_t>(binary_size) <= kMaxCachedBinaryBytes) {
      std::string binary(binary_size, '\0');
      unsigned char* pointer = reinterpret_cast<unsigned char*>(binary.data());
      if (clGetProgramInfo(program, CL_PROGRAM_BINARIES, sizeof(pointer), &pointer, nullptr) == CL_SUCCESS) {
        WriteBinaryFile(cache_path, binary);
      }
    }
  }
  return program;
}

absl::Status Device::Reserve(size_t bytes) {
  if (static_cast<int64_t>(bytes) > info_.max_allocation_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("a tensor of ", bytes, " bytes exceeds the largest allocation ",
                                                     info_.name, " allows (", info_.max_allocation_bytes, " bytes)"));
  }
  int64_t reserved = bytes_reserved_.load();
  do {
    if (reserved + static_cast<int64_t>(bytes) > memory_limit_) {
      return absl::ResourceExhaustedError(absl::StrCat("device memory of ", info_.name, " exhausted: ", bytes,
                                                       " more bytes wanted, ", reserved, " in use of ", memory_limit_));
    }
  } while (!bytes_reserved_.compare_exchange_weak(reserved, reserved + static_cast<int64_t>(bytes)));
  return absl::OkStatus();
}

void Device::Unreserve(size_t bytes) { bytes_reserved_.fetch_sub(static_cast<int64_t>(bytes)); }

}  // namespace traind::engine::gpu
