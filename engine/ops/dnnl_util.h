// Shared plumbing for kernels that run oneDNN (v2 API) primitives: one CPU engine for the process,
// one stream per thread, plain-layout memory descriptors for ONNX tensors, a small thread-safe
// per-shape cache of primitives, and execution with a caller-provided scratchpad.
//
// Concurrency: Kernel::Compute is const and may run concurrently. oneDNN primitives are immutable
// and may execute concurrently, but only if no two executions share a scratchpad; every primitive
// built here therefore uses scratchpad_mode::user and each execution gets its own pooled buffer.
#ifndef TRAIND_ENGINE_OPS_DNNL_UTIL_H_
#define TRAIND_ENGINE_OPS_DNNL_UTIL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/ops/spatial_attributes.h"
#include "engine/runtime/kernel.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace traind::engine {

// The process-wide oneDNN CPU engine (created on first use).
const dnnl::engine& DnnlCpuEngine();

// This thread's stream on DnnlCpuEngine(); streams are not shared between threads.
dnnl::stream& DnnlThreadStream();

// Plain row-major ("abcd...") descriptor for an ONNX tensor of the given dims; rank 1..6.
dnnl::memory::desc PlainDesc(absl::Span<const int64_t> dims, dnnl::memory::data_type type);

// Descriptor of an activation given in ONNX's [N, C, spatial...] dims: plain, or channels-last in memory
// ([N, spatial..., C]: oneDNN's nwc / nhwc / ndhwc) when `channels_last`; rank 3..5.
dnnl::memory::desc ActivationDesc(absl::Span<const int64_t> dims, dnnl::memory::data_type type, bool channels_last);

// oneDNN's view of an ONNX convolution, shared by the forward Conv and ConvGrad so both pick the same layouts.
struct DnnlConvGeometry {
  // ONNX weights [M, C/g, k...] are exactly oneDNN's grouped [g, M/g, C/g, k...] in memory.
  dnnl::memory::dims weight_dims;
  dnnl::memory::dims dilations;  // oneDNN counts the gaps: ONNX dilation 1 is oneDNN 0.
  // Activations stay plain (no reorders) where the blocked layout does not pay for its reorders: a 1x1
  // convolution is one memory-bound GEMM (plain measured 1.2-3x faster on ResNet 1x1 shapes), and a single input
  // channel leaves nothing to block (plain 3.4x faster for a 1->32 channel 3x3 on 28x28). Otherwise oneDNN picks
  // (format_tag::any): its blocked implementation was 1.5-3x faster on 3x3 shapes with 3-256 channels, reorders
  // included.
  bool plain_activations = false;
};
DnnlConvGeometry MakeDnnlConvGeometry(absl::Span<const int64_t> weight_shape, int64_t group,
                                      const WindowGeometry& window, int64_t input_channels);

// Attributes every primitive here is created with (user-managed scratchpad, see file comment).
dnnl::primitive_attr UserScratchpadAttr();

// Runs `fn`, turning a dnnl::error into kUnimplemented (creation: oneDNN has no implementation for
// this configuration) or kInternal (execution). `what` names the operation for the message.
absl::Status CatchDnnlError(absl::string_view what, absl::StatusCode code, const std::function<void()>& fn);

// Executes `primitive` on this thread's stream and waits. `scratchpad` (from the primitive
// descriptor) is allocated from the run's buffer pool when non-empty.
absl::Status ExecuteDnnl(const dnnl::primitive& primitive, const dnnl::memory::desc& scratchpad,
                         std::unordered_map<int, dnnl::memory> args, KernelContext& context);

// Wraps a tensor's (or scratch buffer's) memory without copying. oneDNN takes a non-const handle
// for inputs as well; it never writes a primitive's source arguments.
dnnl::memory WrapMemory(const dnnl::memory::desc& desc, const void* data);

// A conversion between a plain ONNX layout and the (possibly blocked) layout a primitive chose.
struct DnnlLayoutChange {
  dnnl::memory::desc from;
  dnnl::memory::desc to;
  dnnl::reorder primitive;
  dnnl::memory::desc scratchpad;
};

// nullopt when `from` and `to` already agree. Throws dnnl::error (call inside CatchDnnlError).
std::optional<DnnlLayoutChange> MakeLayoutChange(const dnnl::memory::desc& from, const dnnl::memory::desc& to);

// Converts `from_data` (laid out as change.from) into `to_data` (change.to).
absl::Status RunLayoutChange(const DnnlLayoutChange& change, const void* from_data, void* to_data,
                             KernelContext& context);

// A small cache of per-shape state (primitives and their descriptors) for one kernel instance.
// Thread-safe; entries are immutable once built and handed out as shared_ptr, so an eviction never
// invalidates one in use. Bounded: models with ever-changing shapes just rebuild.
template <typename Entry>
class DnnlPrimitiveCache {
 public:
  using Key = std::vector<int64_t>;

  absl::StatusOr<std::shared_ptr<const Entry>> GetOrCreate(
      const Key& key, const std::function<absl::StatusOr<std::shared_ptr<const Entry>>()>& build) const {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = entries_.find(key);
      if (it != entries_.end()) return it->second;
    }
    // Built outside the lock: creating a primitive can take milliseconds. Two threads may build
    // the same entry; the first insert wins and both results are equivalent.
    absl::StatusOr<std::shared_ptr<const Entry>> entry = build();
    if (!entry.ok()) return entry.status();
    std::lock_guard<std::mutex> lock(mutex_);
    if (entries_.size() >= kMaxEntries) entries_.clear();
    return entries_.emplace(key, *std::move(entry)).first->second;
  }

 private:
  static constexpr size_t kMaxEntries = 32;
  mutable std::mutex mutex_;
  mutable absl::flat_hash_map<Key, std::shared_ptr<const Entry>> entries_;
};

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_OPS_DNNL_UTIL_H_
