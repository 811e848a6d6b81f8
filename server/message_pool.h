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
// Bounded: at most `max_kept` messages wait in the pool, and a message whose memory (SpaceUsedLong, capacities
// included) is over `max_kept_bytes` is freed rather than kept, so one huge batch does not stay resident.
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
        message = std::move(free_.back());
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
    // Measured before clearing: a cleared message reports the capacity it keeps as well.
    if (static_cast<size_t>(message->SpaceUsedLong()) > max_kept_bytes_) return;
    // Empty while it waits (sizes zero; the strings keep their capacity).
    message->Clear();
    absl::MutexLock lock(&mu_);
    if (free_.size() < max_kept_) free_.push_back(std::move(message));
  }

  const size_t max_kept_;
  const size_t max_kept_bytes_;
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<Message>> free_ ABSL_GUARDED_BY(mu_);
};

}  // namespace traind

#endif  // TRAIND_SERVER_MESSAGE_POOL_H_
