// A Stream is what one session uses of a device: an in-order command queue, a pool of device memory and the
// counters of the one path bytes take between host and device.
//
// Tensors on the device are ordinary Tensors whose Buffer has a DeviceCopy (engine/core/tensor.h) made here: a
// buffer made by a GPU kernel exists only on the device until host code reads it, and a host tensor the GPU
// executor uploads keeps its device copy for the next run, so parameters, gradients and optimizer state stay on the
// device across steps. Everything a session runs goes through its one in-order queue, so device work, uploads and
// downloads of the session happen in program order without events.
#ifndef TRAIND_ENGINE_GPU_STREAM_H_
#define TRAIND_ENGINE_GPU_STREAM_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/tensor.h"
#include "engine/gpu/device.h"
#include "engine/gpu/opencl.h"

namespace traind::engine::gpu {

// What crossed between host and device through a stream, and device-to-device copies.
struct TransferCounts {
  int64_t uploads = 0;
  int64_t downloads = 0;
  int64_t upload_bytes = 0;
  int64_t download_bytes = 0;
  int64_t device_copies = 0;  // device-to-device (e.g. an optimizer's new parameter values into the parameter)
  int64_t transfers() const { return uploads + downloads; }
};
TransferCounts operator-(const TransferCounts& a, const TransferCounts& b);

struct StreamOptions {
  // Device memory this stream may hold at once (its pool's live and cached buffers); 0: only the device's limit.
  int64_t memory_limit_bytes = 0;
};

class Stream;

// A block of device memory from a Stream's pool; returns to the pool when destroyed. Move-only.
class DeviceMemory {
 public:
  DeviceMemory() = default;
  DeviceMemory(std::shared_ptr<Stream> stream, cl_mem mem, size_t capacity);
  ~DeviceMemory();
  DeviceMemory(DeviceMemory&& other) noexcept;
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  cl_mem mem() const { return mem_; }
  size_t capacity() const { return capacity_; }
  Stream* stream() const { return stream_.get(); }

 private:
  void Reset();
  std::shared_ptr<Stream> stream_;
  cl_mem mem_ = nullptr;
  size_t capacity_ = 0;
};

class Stream : public std::enable_shared_from_this<Stream> {
 public:
  static absl::StatusOr<std::shared_ptr<Stream>> Create(std::shared_ptr<Device> device,
                                                        const StreamOptions& options = {});
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  Device& device() const { return *device_; }
  cl_command_queue queue() const { return queue_; }

  // Device memory, at least `bytes` (a size bucket of BufferPool's); ResourceExhausted beyond the stream's or the
  // device's limit, after the pool has given its cached blocks back.
  absl::StatusOr<DeviceMemory> Allocate(size_t bytes);
  // An uninitialised tensor that exists only on the device.
  absl::StatusOr<Tensor> AllocateTensor(DataType dtype, Shape shape);

  // The one path between host and device: every call is counted. Both block until the bytes have arrived (the
  // host memory may change or go right after), and both are ordered after everything enqueued before.
  absl::Status Upload(const void* host, cl_mem mem, size_t bytes);
  absl::Status Download(cl_mem mem, void* host, size_t bytes);
  absl::Status CopyOnDevice(cl_mem from, cl_mem to, size_t bytes);
  // Sets `count` floats of `mem` to `value` on the device (no transfer).
  absl::Status Fill(cl_mem mem, float value, int64_t count);

  // Makes `tensor` current on this stream's device and returns its memory: nothing to do when it is already
  // current here; an upload into its device copy when that is stale; else an upload into new device memory that
  // becomes the buffer's device copy (so a parameter fed again next step is not uploaded again). A tensor whose
  // buffer has another stream's copy is brought to the host and uploaded into a new device-only buffer, which
  // replaces `tensor`.
  absl::StatusOr<cl_mem> MakeDeviceCurrent(Tensor& tensor);
  // Makes the host bytes current (a download if only the device copy is).
  absl::Status MakeHostCurrent(const Tensor& tensor);
  // The device memory of a tensor current on this stream's device (MakeDeviceCurrent, AllocateTensor); null for
  // any other tensor.
  cl_mem MemOf(const Tensor& tensor) const;
  // Whether `tensor`'s buffer has a copy on this stream.
  bool HoldsCopyOf(const Tensor& tensor) const;

  // Waits for everything enqueued; reports errors of kernels that ran asynchronously.
  absl::Status Finish();

  TransferCounts transfers() const;
  // Device memory handed out and not yet returned (live tensors, scratch), and cached in the pool.
  int64_t bytes_in_use() const;
  int64_t bytes_cached() const;
  int64_t peak_bytes_in_use() const;

 private:
  friend class DeviceMemory;
  Stream(std::shared_ptr<Device> device, cl_command_queue queue, const StreamOptions& options);
  void Release(cl_mem mem, size_t capacity);
  // Frees every cached block (before giving up on an allocation).
  void Trim();

  std::shared_ptr<Device> device_;
  cl_command_queue queue_;
  StreamOptions options_;
  mutable std::mutex pool_mutex_;
  std::unordered_map<size_t, std::vector<cl_mem>> free_by_capacity_;
  int64_t bytes_in_use_ = 0;
  int64_t bytes_cached_ = 0;
  int64_t peak_bytes_in_use_ = 0;
  std::atomic<int64_t> uploads_{0}, downloads_{0}, upload_bytes_{0}, download_bytes_{0}, device_copies_{0};
};

}  // namespace traind::engine::gpu

#endif  // TRAIND_ENGINE_GPU_STREAM_H_
