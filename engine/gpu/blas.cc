#include "engine/gpu/blas.h"

#include <clblast.h>
#include <dlfcn.h>

#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/io/file_util.h"

namespace traind::engine::gpu {
namespace {

absl::Status BlasStatus(clblast::StatusCode code, const char* routine, int64_t m, int64_t n, int64_t k) {
  if (code == clblast::StatusCode::kSuccess) return absl::OkStatus();
  const int value = static_cast<int>(code);
  const std::string message = absl::StrCat("CLBlast ", routine, " (", m, "x", n, "x", k, ") failed with status ",
                                           value, value > -1000 ? absl::StrCat(" (", ClErrorName(value), ")") : "");
  switch (code) {
    case clblast::StatusCode::kOpenCLOutOfResources:
    case clblast::StatusCode::kOpenCLOutOfHostMemory:
    case clblast::StatusCode::kTempBufferAllocFailure:
    case clblast::StatusCode::kInvalidBufferSize:
      return absl::ResourceExhaustedError(message);
    default:
      return absl::InternalError(message);
  }
}

clblast::Transpose Op(const Matrix& matrix) {
  return matrix.transposed ? clblast::Transpose::kYes : clblast::Transpose::kNo;
}

// ---- CLBlast's programs in traind's program cache.
//
// CLBlast compiles a routine's OpenCL program at its first call per device and process and keeps the binary in an
// in-process cache (src/cache.hpp, BinaryCache: Cache<tuple<cl_platform_id, Precision, routine info, device name>,
// std::string>). Its public API (clblast.h) neither takes a pre-built program nor hands out a binary: ClearCache,
// FillCache and Retrieve/OverrideParameters are all it offers. The cache's own member functions, though, are
// template instantiations that libclblast.so exports. This bridge finds them by name at run time (dlsym; absent:
// the bridge is off and CLBlast compiles as before, never an error), gives CLBlast the binary traind's program cache
// holds before a routine's first call on a device, and keeps CLBlast's binary there after a first call that compiled
// it. The routine info is rebuilt as CLBlast's Routine::InitProgram builds it: the routine's name, then per kernel
// "_" + kernel + "_" + each tuning value in parameter-name order (the public RetrieveParameters), and the device name
// as GetDeviceName gives it (AMD's board name, "pthread-" removed). When CLBlast has run a routine and that key
// finds no binary, the key is not CLBlast's (another CLBlast version): the bridge turns itself off.
//
// Calling a member function through a plain function pointer is the Itanium C++ ABI's convention ("this" first; a
// class returned by value through a hidden pointer ahead of it, on x86-64 as on AArch64 where it has a register of
// its own), which is what every compiler traind builds with follows.
using BinaryKey = std::tuple<cl_platform_id, clblast::Precision, std::string, std::string>;
using BinaryKeyRef =
    std::tuple<const cl_platform_id&, const clblast::Precision&, const std::string&, const std::string&>;

// The mangled names of Cache<BinaryKey, std::string>::Instance, ::Get<BinaryKeyRef> and ::Store (CLBlast 1.5 to 1.7).
constexpr char kInstanceSymbol[] =
    "_ZN7clblast5CacheISt5tupleIJP15_cl_platform_idNS_9PrecisionENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
    "SA_EESA_E8InstanceEv";
constexpr char kGetSymbol[] =
    "_ZNK7clblast5CacheISt5tupleIJP15_cl_platform_idNS_9PrecisionENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE"
    "ESA_EESA_E3GetIS1_IJRKS3_RKS4_RKSA_SJ_EEEESA_RKT_Pb";
constexpr char kStoreSymbol[] =
    "_ZN7clblast5CacheISt5tupleIJP15_cl_platform_idNS_9PrecisionENSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE"
    "SA_EESA_E5StoreEOSB_OSA_";

// The kernels of CLBlast's GEMM and GEMMSTRIDEDBATCHED routines (src/routines/level3/xgemm.cpp, levelx/
// xgemmstridedbatched.cpp): one program each.
constexpr const char* kGemmKernels[] = {"Copy",  "Pad",         "Transpose",  "Padtranspose",
                                        "Xgemm", "XgemmDirect", "GemmRoutine"};

class ClBlastPrograms {
 public:
  static ClBlastPrograms& Get() {
    static auto* programs = new ClBlastPrograms();
    return *programs;
  }

  struct Call {
    bool first = false;              // the routine's first call on the device in this process
    bool loaded_from_cache = false;  // and CLBlast was given traind's cached binary for it
    std::string cache_key;           // traind's key (empty: the bridge is off)
    BinaryKey key;
  };

  // Before a call of `routine` on `device`.
  Call Prepare(Device& device, const char* routine) {
    std::lock_guard<std::mutex> lock(mutex_);
    Call call;
    if (!Enabled()) return call;
    RoutineState& state = routines_[{device.id(), routine}];
    if (state.seen) return call;
    state.seen = true;
    call.first = true;
    std::optional<BinaryKey> key = KeyOf(device, routine);
    if (!key.has_value()) return call;
    call.key = *key;
    call.cache_key =
        device.ProgramCacheKey(absl::StrCat("clblast ", library_digest_, " ", std::get<2>(*key)), std::get<3>(*key));
    if (InClBlastCache(call.key)) {  // CLBlast has the binary already (another device of the same name)
      call.cache_key.clear();
      return call;
    }
    if (std::optional<std::string> binary = device.ReadCachedBinary(call.cache_key)) {
      BinaryKey stored = call.key;
      store_(instance_(), &stored, &*binary);
      call.loaded_from_cache = true;
    }
    return call;
  }

  // After the first call, successful: a binary CLBlast compiled goes to traind's cache.
  void Finish(Device& device, const Call& call) {
    if (!call.first || call.cache_key.empty()) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (call.loaded_from_cache) {
      device.CountProgram(/*from_cache=*/true);
      return;
    }
    bool found = false;
    const BinaryKeyRef ref(std::get<0>(call.key), std::get<1>(call.key), std::get<2>(call.key), std::get<3>(call.key));
    const std::string binary = get_(instance_(), &ref, &found);
    if (!found) {
      // CLBlast ran the routine, so its program is in its cache, under another key than ours: not the CLBlast
      // this bridge knows.
      disabled_ = true;
      return;
    }
    device.CountProgram(/*from_cache=*/false);
    device.WriteCachedBinary(call.cache_key, binary);
  }

  // The first call failed after CLBlast was given a cached binary: the driver refused it. Forget it (CLBlast's
  // caches, which ClearCache empties for every device, and traind's file); the caller calls again, which compiles.
  void Reject(Device& device, Call& call) {
    std::lock_guard<std::mutex> lock(mutex_);
    clblast::ClearCache();
    device.RemoveCachedBinary(call.cache_key);
    device.CountRejectedBinary();
    call.loaded_from_cache = false;
  }

  // The first call failed for another reason: the next call is a first call again.
  void Failed(Device& device, const char* routine, const Call& call) {
    if (!call.first) return;
    std::lock_guard<std::mutex> lock(mutex_);
    routines_[{device.id(), routine}].seen = false;
  }

  // For tests: CLBlast's in-process caches emptied and every routine's first call to come again, as in a new process.
  void Forget() {
    std::lock_guard<std::mutex> lock(mutex_);
    clblast::ClearCache();
    routines_.clear();
  }

  bool Enabled() const { return instance_ != nullptr && get_ != nullptr && store_ != nullptr && !disabled_; }

 private:
  struct RoutineState {
    bool seen = false;
  };

  ClBlastPrograms() {
    instance_ = reinterpret_cast<void* (*)()>(dlsym(RTLD_DEFAULT, kInstanceSymbol));
    get_ = reinterpret_cast<std::string (*)(const void*, const BinaryKeyRef*, bool*)>(dlsym(RTLD_DEFAULT, kGetSymbol));
    store_ = reinterpret_cast<void (*)(void*, BinaryKey*, std::string*)>(dlsym(RTLD_DEFAULT, kStoreSymbol));
    // Which CLBlast: its library's bytes (a rebuilt library may carry other kernel sources under the same names).
    Dl_info library = {};
    if (instance_ == nullptr || dladdr(reinterpret_cast<void*>(instance_), &library) == 0 ||
        library.dli_fname == nullptr) {
      instance_ = nullptr;
      return;
    }
    absl::StatusOr<std::string> digest = Sha256HexOfFile(library.dli_fname);
    if (!digest.ok()) {
      instance_ = nullptr;
      return;
    }
    library_digest_ = *std::move(digest);
  }

  static std::optional<std::string> DeviceInfoString(cl_device_id device, cl_device_info what) {
    size_t size = 0;
    if (clGetDeviceInfo(device, what, 0, nullptr, &size) != CL_SUCCESS) return std::nullopt;
    std::string value(size, '\0');
    if (clGetDeviceInfo(device, what, size, value.data(), nullptr) != CL_SUCCESS) return std::nullopt;
    value.resize(std::strlen(value.c_str()));
    return value;
  }

  // CLBlast's key of `routine`'s program on `device` (single precision).
  static std::optional<BinaryKey> KeyOf(Device& device, const char* routine) {
    std::string info = routine;
    for (const char* kernel : kGemmKernels) {
      std::unordered_map<std::string, size_t> parameters;
      if (clblast::RetrieveParameters(device.id(), kernel, clblast::Precision::kSingle, parameters) !=
          clblast::StatusCode::kSuccess) {
        return std::nullopt;
      }
      absl::StrAppend(&info, "_", kernel);
      for (const auto& [name, value] : std::map<std::string, size_t>(parameters.begin(), parameters.end())) {
        absl::StrAppend(&info, "_", value);
      }
    }
    const std::optional<std::string> extensions = DeviceInfoString(device.id(), CL_DEVICE_EXTENSIONS);
    const bool amd = extensions.has_value() && extensions->find("cl_amd_device_attribute_query") != std::string::npos;
    constexpr cl_device_info kBoardNameAmd = 0x4038;  // CL_DEVICE_BOARD_NAME_AMD
    std::optional<std::string> name = DeviceInfoString(device.id(), amd ? kBoardNameAmd : CL_DEVICE_NAME);
    cl_platform_id platform = nullptr;
    if (!name.has_value() ||
        clGetDeviceInfo(device.id(), CL_DEVICE_PLATFORM, sizeof(platform), &platform, nullptr) != CL_SUCCESS) {
      return std::nullopt;
    }
    if (const size_t at = name->find("pthread-"); at != std::string::npos) name->erase(at, std::strlen("pthread-"));
    return BinaryKey(platform, clblast::Precision::kSingle, std::move(info), std::move(*name));
  }

  bool InClBlastCache(const BinaryKey& key) const {
    bool found = false;
    const BinaryKeyRef ref(std::get<0>(key), std::get<1>(key), std::get<2>(key), std::get<3>(key));
    get_(instance_(), &ref, &found);
    return found;
  }

  std::mutex mutex_;
  void* (*instance_)() = nullptr;
  std::string (*get_)(const void*, const BinaryKeyRef*, bool*) = nullptr;
  void (*store_)(void*, BinaryKey*, std::string*) = nullptr;
  std::string library_digest_;
  bool disabled_ = false;
  std::map<std::pair<cl_device_id, std::string>, RoutineState> routines_;
};

// Runs `call` (a CLBlast routine on `stream`'s device) with the routine's program from traind's cache when it is
// the first call; a cached binary the driver refuses is dropped and the call made again, compiling.
template <typename Fn>
clblast::StatusCode WithCachedProgram(Stream& stream, const char* routine, const Fn& call) {
  ClBlastPrograms& programs = ClBlastPrograms::Get();
  ClBlastPrograms::Call prepared = programs.Prepare(stream.device(), routine);
  clblast::StatusCode code = call();
  if (code != clblast::StatusCode::kSuccess && prepared.loaded_from_cache) {
    programs.Reject(stream.device(), prepared);
    code = call();
  }
  if (code == clblast::StatusCode::kSuccess) {
    programs.Finish(stream.device(), prepared);
  } else {
    programs.Failed(stream.device(), routine, prepared);
  }
  return code;
}

}  // namespace

bool ClBlastProgramsCached() { return ClBlastPrograms::Get().Enabled(); }

void ForgetClBlastPrograms() { ClBlastPrograms::Get().Forget(); }

absl::Status Gemm(Stream& stream, int64_t m, int64_t n, int64_t k, float alpha, const Matrix& a, const Matrix& b,
                  float beta, const Matrix& c) {
  if (m == 0 || n == 0) return absl::OkStatus();
  cl_command_queue queue = stream.queue();
  // CLBlast would allocate its temporary buffer itself; taking it from the pool keeps it in the accounting.
  size_t temp_bytes = 0;
  const clblast::StatusCode sized = clblast::GemmTempBufferSize<float>(
      clblast::Layout::kRowMajor, Op(a), Op(b), m, n, k, a.offset, a.ld, b.offset, b.ld, c.offset, c.ld, &queue,
      temp_bytes);
  TRAIND_RETURN_IF_ERROR(BlasStatus(sized, "GemmTempBufferSize", m, n, k));
  DeviceMemory temp;
  if (temp_bytes > 0) {
    TRAIND_ASSIGN_OR_RETURN(temp, stream.Allocate(temp_bytes * sizeof(float)));
  }
  const clblast::StatusCode code = WithCachedProgram(stream, "GEMM", [&] {
    return clblast::Gemm<float>(clblast::Layout::kRowMajor, Op(a), Op(b), m, n, k, alpha, a.mem, a.offset, a.ld, b.mem,
                                b.offset, b.ld, beta, c.mem, c.offset, c.ld, &queue, nullptr, temp.mem());
  });
  return BlasStatus(code, "Gemm", m, n, k);
}

absl::Status GemmStridedBatched(Stream& stream, int64_t m, int64_t n, int64_t k, float alpha, const Matrix& a,
                                const Matrix& b, float beta, const Matrix& c, int64_t batch) {
  if (m == 0 || n == 0 || batch == 0) return absl::OkStatus();
  if (batch == 1) return Gemm(stream, m, n, k, alpha, a, b, beta, c);
  cl_command_queue queue = stream.queue();
  const clblast::StatusCode code = WithCachedProgram(stream, "GEMMSTRIDEDBATCHED", [&] {
    return clblast::GemmStridedBatched<float>(clblast::Layout::kRowMajor, Op(a), Op(b), m, n, k, alpha, a.mem, a.offset,
                                              a.ld, a.stride, b.mem, b.offset, b.ld, b.stride, beta, c.mem, c.offset,
                                              c.ld, c.stride, batch, &queue, nullptr);
  });
  return BlasStatus(code, "GemmStridedBatched", m, n, k);
}

}  // namespace traind::engine::gpu
