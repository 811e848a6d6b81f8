#include "engine/core/tensor.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include <malloc.h>
#include <sys/mman.h>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace traind::engine {

namespace {

// Buffers of at least this many bytes are mapped from the system directly, not taken from malloc's heap. malloc
// raises its own mmap threshold after the first large free (up to 32 MiB), after which large tensors live in its
// heap and arenas, where a freed one is rarely returned and the holes between them stay resident: in a training
// step of a BERT-size encoder that was 20 MB of RSS no tensor used. A mapping is returned whole at munmap.
// Under AddressSanitizer every buffer stays with malloc, so that overruns of large tensors are still caught.
#if defined(__SANITIZE_ADDRESS__)
#define TRAIND_TENSORS_FROM_MALLOC_ONLY 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TRAIND_TENSORS_FROM_MALLOC_ONLY 1
#endif
#endif
#ifdef TRAIND_TENSORS_FROM_MALLOC_ONLY
constexpr size_t kMappedAllocationBytes = ~size_t{0};
#else
constexpr size_t kMappedAllocationBytes = size_t{1} << 20;
#endif
static_assert(kTensorAlignment <= 4096, "mappings are page aligned");

size_t RoundedAllocationBytes(size_t bytes) {
  // aligned_alloc needs a size that is a multiple of the alignment.
  const size_t rounded = (bytes + kTensorAlignment - 1) / kTensorAlignment * kTensorAlignment;
  return rounded == 0 ? kTensorAlignment : rounded;
}

}  // namespace

void* AlignedAllocate(size_t bytes) {
  if (bytes > (size_t{1} << 62)) return nullptr;
  const size_t rounded = RoundedAllocationBytes(bytes);
  if (rounded >= kMappedAllocationBytes) {
    void* data = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return data == MAP_FAILED ? nullptr : data;
  }
  return std::aligned_alloc(kTensorAlignment, rounded);
}

void ConfigureProcessAllocator() {
#if defined(__GLIBC__)
  // Setting it at all turns the dynamic adjustment off.
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  // Free memory at the top of a thread's heap is handed back (madvise) only past this much. At glibc's 128 KiB
  // default, the daemon's gRPC threads gave back and faulted in again 64-460 KiB of their heaps on every
  // TrainStep carrying a 200 KB batch (~1 madvise per step in strace): the request's receive buffers are freed
  // each call. Blocks of 128 KiB and up are mappings of their own (above), so what a heap can keep is made of
  // smaller blocks, at most this much per arena.
  mallopt(M_TRIM_THRESHOLD, 4 * 1024 * 1024);
#endif
}

void AlignedFree(void* data, size_t bytes) {
  if (data == nullptr) return;
  const size_t rounded = RoundedAllocationBytes(bytes);
  if (rounded >= kMappedAllocationBytes) {
    munmap(data, rounded);
  } else {
    std::free(data);
  }
}

Buffer::Buffer(void* data, size_t size_bytes, size_t capacity_bytes, Releaser releaser)
    : data_(data),
      size_bytes_(size_bytes),
      capacity_bytes_(capacity_bytes),
      releaser_(std::move(releaser)) {}

Buffer::~Buffer() {
  delete device_copy_.load(std::memory_order_acquire);
  if (owns_host_memory_) {
    AlignedFree(data_, size_bytes_);
  } else if (releaser_) {
    releaser_(data_, capacity_bytes_);
  }
}

std::shared_ptr<Buffer> Buffer::CreateOnDevice(size_t size_bytes, std::unique_ptr<DeviceCopy> copy) {
  auto buffer = std::make_shared<Buffer>(nullptr, size_bytes, size_bytes, nullptr);
  buffer->host_current_.store(false, std::memory_order_release);
  buffer->AttachDeviceCopy(copy, /*device_current=*/true);
  return buffer;
}

bool Buffer::AttachDeviceCopy(std::unique_ptr<DeviceCopy>& copy, bool device_current) {
  std::lock_guard<std::mutex> lock(sync_mutex_);
  DeviceCopy* expected = nullptr;
  if (!device_copy_.compare_exchange_strong(expected, copy.get(), std::memory_order_acq_rel)) return false;
  copy.release();
  device_current_.store(device_current, std::memory_order_release);
  return true;
}

void Buffer::MarkDeviceCurrent() {
  std::lock_guard<std::mutex> lock(sync_mutex_);
  device_current_.store(true, std::memory_order_release);
}

void Buffer::MarkWrittenOnDevice() {
  std::lock_guard<std::mutex> lock(sync_mutex_);
  device_current_.store(true, std::memory_order_release);
  host_current_.store(false, std::memory_order_release);
}

absl::Status Buffer::SyncToHost() const {
  if (host_current_.load(std::memory_order_acquire)) return absl::OkStatus();
  std::lock_guard<std::mutex> lock(sync_mutex_);
  if (host_current_.load(std::memory_order_relaxed)) return absl::OkStatus();
  if (data_ == nullptr) {
    data_ = AlignedAllocate(size_bytes_);
    owns_host_memory_ = data_ != nullptr;
    if (data_ == nullptr) {
      return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", size_bytes_, " bytes of host memory"));
    }
  }
  absl::Status status = device_copy_.load(std::memory_order_acquire)->Download(data_, size_bytes_);
  if (!status.ok()) return status;
  host_current_.store(true, std::memory_order_release);
  return absl::OkStatus();
}

void* Buffer::CurrentHostData() const {
  if (host_current_.load(std::memory_order_acquire)) return data_;
  absl::Status status = SyncToHost();
  if (!status.ok()) {
    std::fprintf(stderr, "traind: fatal: cannot read a tensor back from its device: %s\n",
                 std::string(status.message()).c_str());
    std::abort();
  }
  return data_;
}

void* Buffer::HostDataForWriting() {
  void* data = CurrentHostData();
  if (device_current_.load(std::memory_order_acquire)) {
    std::lock_guard<std::mutex> lock(sync_mutex_);
    device_current_.store(false, std::memory_order_release);
  }
  return data;
}

absl::StatusOr<std::shared_ptr<Buffer>> Buffer::Allocate(size_t size_bytes) {
  void* data = AlignedAllocate(size_bytes);
  if (data == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", size_bytes, " bytes"));
  }
  return std::make_shared<Buffer>(data, size_bytes, size_bytes,
                                  [size_bytes](void* ptr, size_t) { AlignedFree(ptr, size_bytes); });
}

Tensor::Tensor(DataType dtype, Shape shape, std::shared_ptr<Buffer> buffer, int64_t num_elements)
    : dtype_(dtype), shape_(std::move(shape)), num_elements_(num_elements),
      buffer_(std::move(buffer)) {}

absl::StatusOr<Tensor> Tensor::Allocate(DataType dtype, Shape shape) {
  if (!IsStorableType(dtype)) {
    return absl::UnimplementedError(absl::StrCat("unsupported dtype ", DataTypeName(dtype)));
  }
  auto count = ElementCount(shape);
  if (!count.ok()) return count.status();
  const size_t bytes = static_cast<size_t>(*count) * ElementSize(dtype);
  auto buffer = Buffer::Allocate(bytes);
  if (!buffer.ok()) return buffer.status();
  std::memset((*buffer)->data(), 0, bytes);
  return Tensor(dtype, std::move(shape), *std::move(buffer), *count);
}

Tensor Tensor::Reshaped(Shape shape) const {
  return Tensor(dtype_, std::move(shape), buffer_, num_elements_);
}

absl::Status CopyTensorData(const Tensor& from, Tensor& to) {
  if (from.buffer() == to.buffer()) return absl::OkStatus();
  const Buffer& source = *from.buffer();
  if (DeviceCopy* copy = source.device_copy(); copy != nullptr && source.device_current()) {
    absl::StatusOr<bool> copied = copy->CopyInto(*to.buffer());
    if (!copied.ok()) return copied.status();
    if (*copied) return absl::OkStatus();
  }
  TRAIND_RETURN_IF_ERROR(source.SyncToHost());
  std::memcpy(to.mutable_raw_data(), from.raw_data(), to.byte_size());
  return absl::OkStatus();
}

std::string Tensor::DebugString() const {
  return absl::StrCat(DataTypeName(dtype_), ShapeToString(shape_));
}

}  // namespace traind::engine
