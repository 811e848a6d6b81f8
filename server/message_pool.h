// MessagePool: request messages reused from one call to the next.
//
// A unary handler of the sync API gets a request message that gRPC creates and parses for each call, so a
// TrainStep carrying a 200 KB batch allocates its `bytes` field afresh every time — above the daemon's 128 KiB
// mmap threshold (engine/core/tensor.cc) that is a new mapping, ~50 page faults and an munmap with its TLB
// shootdown per step. A handler that reads its own request (a streamed-unary method) parses into a message from
// this pool instead: protobuf's parse clears a message and keeps the capacity of its strings and repeated fields,
// so a client that sends batches of one shape costs no allocation after its first call (as a TrainStream, whose
// one message object gRPC parses into again and again).
//
// Bounded: at most `max_kept` messages wait in the pool, holding at most `max_kept_bytes` together (SpaceUsedLong,
// capacities included); a message that does not fit is freed rather than kept, so huge batches do not stay resident.
#ifndef TRAIND_SERVER_MESSAGE_POOL_H_
#define TRAIND_SERVER_MESSAGE_POOL_H_

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace traind {

template <typename Message>
class MessagePool {
 public:
  MessagePool(size_t max_kept, size_t max_kept_bytes) : max_kept_(max_kept), max_kept_bytes_(max_kept_bytes) {}
  MessagePool(const MessagePool&) = delete;
  MessagePool& operator=(const MessagePool&) = delete;

  // Hands the message back to its pool when it goes out of scope. The pool must outlive every handle.
  struct Returner {
    MessagePool* pool = nullptr;
    void operator()(Message* message) const { pool->Return(message); }
  };
  using Handle = std::unique_ptr<Message, Returner>;

  // A message from the pool (its content cleared, its capacity kept) or a new one.
  Handle Acquire() {
    std::unique_ptr<Message> message;
    {
      absl::MutexLock lock(&mu_);
      if (!free_.empty()) {
        message = std::move(free_.back().message);
        kept_bytes_ -= free_.back().bytes;
        free_.pop_back();
      }
    }
    if (message == nullptr) message = std::make_unique<Message>();
    return Handle(message.release(), Returner{this});
  }

  size_t kept() const {
    absl::MutexLock lock(&mu_);
    return free_.size();
  }

 private:
  void Return(Message* raw) {
    std::unique_ptr<Message> message(raw);
    // Empty while it waits (sizes zero; the strings keep their capacity, which SpaceUsedLong still counts).
    message->Clear();
    const size_t bytes = static_cast<size_t>(message->SpaceUsedLong());
    absl::MutexLock lock(&mu_);
    if (free_.size() < max_kept_ && bytes <= max_kept_bytes_ - kept_bytes_) {
      free_.push_back({std::move(message), bytes});
      kept_bytes_ += bytes;
    }
  }

  struct Kept {
    std::unique_ptr<Message> message;
    size_t bytes;
  };
  const size_t max_kept_;
  const size_t max_kept_bytes_;
  mutable absl::Mutex mu_;
  std::vector<Kept> free_ ABSL_GUARDED_BY(mu_);
  size_t kept_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // <= max_kept_bytes_
};

}  // namespace traind

#endif  // TRAIND_SERVER_MESSAGE_POOL_H_
