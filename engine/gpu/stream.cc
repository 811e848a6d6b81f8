#include "engine/gpu/stream.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/buffer_pool.h"
#include "engine/core/status_macros.h"

namespace traind::engine::gpu {
namespace {

// A Buffer's copy in a stream's device memory.
class ClDeviceCopy : public DeviceCopy {
 public:
  explicit ClDeviceCopy(DeviceMemory memory) : memory_(std::move(memory)) {}

  absl::Status Download(void* host, size_t bytes) override {
    return memory_.stream()->Download(memory_.mem(), host, bytes);
  }

  absl::StatusOr<bool> CopyInto(Buffer& destination) override {
    Stream& stream = *memory_.stream();
    const size_t bytes = destination.size_bytes();
    if (auto* theirs = dynamic_cast<ClDeviceCopy*>(destination.device_copy())) {
      if (theirs->memory_.stream() != &stream) return false;
      TRAIND_RETURN_IF_ERROR(stream.CopyOnDevice(memory_.mem(), theirs->mem(), bytes));
      destination.MarkWrittenOnDevice();
      return true;
    }
    if (destination.device_copy() != nullptr) return false;
    TRAIND_ASSIGN_OR_RETURN(DeviceMemory memory, stream.Allocate(bytes));
    TRAIND_RETURN_IF_ERROR(stream.CopyOnDevice(memory_.mem(), memory.mem(), bytes));
    std::unique_ptr<DeviceCopy> copy = std::make_unique<ClDeviceCopy>(std::move(memory));
    if (!destination.AttachDeviceCopy(copy, /*device_current=*/true)) return false;
    destination.MarkWrittenOnDevice();
    return true;
  }

  cl_mem mem() const { return memory_.mem(); }
  const Stream* stream() const { return memory_.stream(); }

 private:
  DeviceMemory memory_;
};

const ClDeviceCopy* OurCopy(const Tensor& tensor, const Stream* stream) {
  if (!tensor.defined()) return nullptr;
  const auto* copy = dynamic_cast<const ClDeviceCopy*>(tensor.buffer()->device_copy());
  return copy != nullptr && copy->stream() == stream ? copy : nullptr;
}

}  // namespace

TransferCounts operator-(const TransferCounts& a, const TransferCounts& b) {
  return {a.uploads - b.uploads, a.downloads - b.downloads, a.upload_bytes - b.upload_bytes,
          a.download_bytes - b.download_bytes, a.device_copies - b.device_copies};
}

// ---- DeviceMemory

DeviceMemory::DeviceMemory(std::shared_ptr<Stream> stream, cl_mem mem, size_t capacity)
    : stream_(std::move(stream)), mem_(mem), capacity_(capacity) {}

DeviceMemory::~DeviceMemory() { Reset(); }

DeviceMemory::DeviceMemory(DeviceMemory&& other) noexcept
    : stream_(std::move(other.stream_)), mem_(other.mem_), capacity_(other.capacity_) {
  other.mem_ = nullptr;
}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  if (this != &other) {
    Reset();
    stream_ = std::move(other.stream_);
    mem_ = other.mem_;
    capacity_ = other.capacity_;
    other.mem_ = nullptr;
  }
  return *this;
}

void DeviceMemory::Reset() {
  if (mem_ != nullptr) stream_->Release(mem_, capacity_);
  mem_ = nullptr;
  stream_.reset();
}

// ---- Stream

absl::StatusOr<std::shared_ptr<Stream>> Stream::Create(std::shared_ptr<Device> device, const StreamOptions& options) {
  if (device == nullptr) return absl::InvalidArgumentError("a stream needs a device");
  cl_int code = CL_SUCCESS;
  cl_command_queue queue = clCreateCommandQueue(device->context(), device->id(), 0, &code);
  TRAIND_CL_RETURN_IF_ERROR(code, absl::StrCat("clCreateCommandQueue on ", device->info().name));
  return std::shared_ptr<Stream>(new Stream(std::move(device), queue, options));
}

Stream::Stream(std::shared_ptr<Device> device, cl_command_queue queue, const StreamOptions& options)
    : device_(std::move(device)), queue_(queue), options_(options) {}

Stream::~Stream() {
  clFinish(queue_);
  Trim();
  clReleaseCommandQueue(queue_);
}

absl::StatusOr<DeviceMemory> Stream::Allocate(size_t bytes) {
  const size_t capacity = BufferPool::BucketCapacity(bytes);
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    auto it = free_by_capacity_.find(capacity);
    if (it != free_by_capacity_.end() && !it->second.empty()) {
      cl_mem mem = it->second.back();
      it->second.pop_back();
      bytes_cached_ -= static_cast<int64_t>(capacity);
      bytes_in_use_ += static_cast<int64_t>(capacity);
      peak_bytes_in_use_ = std::max(peak_bytes_in_use_, bytes_in_use_);
      return DeviceMemory(shared_from_this(), mem, capacity);
    }
  }
  auto over_stream_limit = [&] {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    return options_.memory_limit_bytes > 0 &&
           bytes_in_use_ + bytes_cached_ + static_cast<int64_t>(capacity) > options_.memory_limit_bytes;
  };
  if (over_stream_limit()) Trim();
  if (over_stream_limit()) {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    return absl::ResourceExhaustedError(absl::StrCat("the session's device memory is exhausted: ", bytes,
                                                     " more bytes wanted, ", bytes_in_use_, " in use of ",
                                                     options_.memory_limit_bytes, " on ", device_->info().name));
  }
  absl::Status reserved = device_->Reserve(capacity);
  if (!reserved.ok()) {
    Trim();
    reserved = device_->Reserve(capacity);
    if (!reserved.ok()) return reserved;
  }
  cl_int code = CL_SUCCESS;
  cl_mem mem = clCreateBuffer(device_->context(), CL_MEM_READ_WRITE, capacity, nullptr, &code);
  if (code != CL_SUCCESS) {
    device_->Unreserve(capacity);
    return ClStatus(code, absl::StrCat("allocating ", capacity, " bytes on ", device_->info().name));
  }
  std::lock_guard<std::mutex> lock(pool_mutex_);
  bytes_in_use_ += static_cast<int64_t>(capacity);
  peak_bytes_in_use_ = std::max(peak_bytes_in_use_, bytes_in_use_);
  return DeviceMemory(shared_from_this(), mem, capacity);
}

void Stream::Release(cl_mem mem, size_t capacity) {
  std::lock_guard<std::mutex> lock(pool_mutex_);
  bytes_in_use_ -= static_cast<int64_t>(capacity);
  free_by_capacity_[capacity].push_back(mem);
  bytes_cached_ += static_cast<int64_t>(capacity);
}

void Stream::Trim() {
  std::unordered_map<size_t, std::vector<cl_mem>> freed;
  {
    std::lock_guard<std::mutex> lock(pool_mutex_);
    freed.swap(free_by_capacity_);
    bytes_cached_ = 0;
  }
  for (auto& [capacity, mems] : freed) {
    for (cl_mem mem : mems) {
      // OpenCL keeps a released buffer alive until the commands using it have run.
      clReleaseMemObject(mem);
      device_->Unreserve(capacity);
    }
  }
}

absl::StatusOr<Tensor> Stream::AllocateTensor(DataType dtype, Shape shape) {
  if (!IsStorableType(dtype)) return absl::UnimplementedError(absl::StrCat("unsupported dtype ", DataTypeName(dtype)));
  TRAIND_ASSIGN_OR_RETURN(const int64_t count, ElementCount(shape));
  const size_t bytes = static_cast<size_t>(count) * ElementSize(dtype);
  TRAIND_ASSIGN_OR_RETURN(DeviceMemory memory, Allocate(bytes));
  return Tensor(dtype, std::move(shape), Buffer::CreateOnDevice(bytes, std::make_unique<ClDeviceCopy>(std::move(memory))),
                count);
}

absl::Status Stream::Upload(const void* host, cl_mem mem, size_t bytes) {
  uploads_.fetch_add(1);
  upload_bytes_.fetch_add(static_cast<int64_t>(bytes));
  if (bytes == 0) return absl::OkStatus();
  return ClStatus(clEnqueueWriteBuffer(queue_, mem, CL_TRUE, 0, bytes, host, 0, nullptr, nullptr),
                  absl::StrCat("uploading ", bytes, " bytes to ", device_->info().name));
}

absl::Status Stream::Download(cl_mem mem, void* host, size_t bytes) {
  downloads_.fetch_add(1);
  download_bytes_.fetch_add(static_cast<int64_t>(bytes));
  if (bytes == 0) return absl::OkStatus();
  return ClStatus(clEnqueueReadBuffer(queue_, mem, CL_TRUE, 0, bytes, host, 0, nullptr, nullptr),
                  absl::StrCat("downloading ", bytes, " bytes from ", device_->info().name));
}

absl::Status Stream::CopyOnDevice(cl_mem from, cl_mem to, size_t bytes) {
  device_copies_.fetch_add(1);
  if (bytes == 0 || from == to) return absl::OkStatus();
  return ClStatus(clEnqueueCopyBuffer(queue_, from, to, 0, 0, bytes, 0, nullptr, nullptr),
                  absl::StrCat("copying ", bytes, " bytes on ", device_->info().name));
}

absl::Status Stream::Fill(cl_mem mem, float value, int64_t count) {
  if (count <= 0) return absl::OkStatus();
  return ClStatus(clEnqueueFillBuffer(queue_, mem, &value, sizeof(value), 0, static_cast<size_t>(count) * sizeof(float),
                                      0, nullptr, nullptr),
                  absl::StrCat("filling ", count, " floats on ", device_->info().name));
}

bool Stream::HoldsCopyOf(const Tensor& tensor) const { return OurCopy(tensor, this) != nullptr; }

cl_mem Stream::MemOf(const Tensor& tensor) const {
  const ClDeviceCopy* copy = OurCopy(tensor, this);
  return copy != nullptr ? copy->mem() : nullptr;
}

absl::StatusOr<cl_mem> Stream::MakeDeviceCurrent(Tensor& tensor) {
  if (!tensor.defined()) return absl::InvalidArgumentError("an empty tensor cannot go to the device");
  Buffer& buffer = *tensor.buffer();
  const size_t bytes = buffer.size_bytes();  // The device copy mirrors the whole buffer (aliases may view less).
  for (int attempt = 0; attempt < 2; ++attempt) {
    if (const ClDeviceCopy* copy = OurCopy(tensor, this)) {
      if (!buffer.device_current()) {
        // At least one copy is current: here, the host's.
        TRAIND_RETURN_IF_ERROR(Upload(buffer.data(), copy->mem(), bytes));
        buffer.MarkDeviceCurrent();
      }
      return copy->mem();
    }
    if (buffer.device_copy() != nullptr) break;  // another stream's or device's copy
    TRAIND_ASSIGN_OR_RETURN(DeviceMemory memory, Allocate(bytes));
    TRAIND_RETURN_IF_ERROR(Upload(buffer.data(), memory.mem(), bytes));
    std::unique_ptr<DeviceCopy> copy = std::make_unique<ClDeviceCopy>(std::move(memory));
    if (buffer.AttachDeviceCopy(copy, /*device_current=*/true)) return MemOf(tensor);
    // Another thread attached a copy first: use that one.
  }
  TRAIND_RETURN_IF_ERROR(buffer.SyncToHost());
  TRAIND_ASSIGN_OR_RETURN(Tensor own, AllocateTensor(tensor.dtype(), tensor.shape()));
  TRAIND_RETURN_IF_ERROR(Upload(buffer.data(), MemOf(own), tensor.byte_size()));
  tensor = std::move(own);
  return MemOf(tensor);
}

absl::Status Stream::MakeHostCurrent(const Tensor& tensor) {
  return tensor.defined() ? tensor.buffer()->SyncToHost() : absl::OkStatus();
}

absl::Status Stream::Finish() { return ClStatus(clFinish(queue_), absl::StrCat("running on ", device_->info().name)); }

TransferCounts Stream::transfers() const {
  return {uploads_.load(), downloads_.load(), upload_bytes_.load(), download_bytes_.load(), device_copies_.load()};
}

int64_t Stream::bytes_in_use() const {
  std::lock_guard<std::mutex> lock(pool_mutex_);
  return bytes_in_use_;
}

int64_t Stream::bytes_cached() const {
  std::lock_guard<std::mutex> lock(pool_mutex_);
  return bytes_cached_;
}

int64_t Stream::peak_bytes_in_use() const {
  std::lock_guard<std::mutex> lock(pool_mutex_);
  return peak_bytes_in_use_;
}

}  // namespace traind::engine::gpu
