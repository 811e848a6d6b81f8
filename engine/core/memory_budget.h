// A byte budget shared by everything one training session allocates through the engine: the buffer pools of its
// executors (training, eval, optimizer) and the long-lived tensors it holds (parameters, gradients, optimizer
// state). Requests beyond the limit are refused before anything is allocated, with kResourceExhausted naming the
// limit, so a hostile model (a ConstantOfShape of 2^40 elements, an Expand to a huge shape, a plan whose peak does
// not fit) fails its call instead of growing the process until the kernel kills it. Thread-safe.
#ifndef TRAIND_ENGINE_CORE_MEMORY_BUDGET_H_
#define TRAIND_ENGINE_CORE_MEMORY_BUDGET_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace traind::engine {

class MemoryBudget {
 public:
  // `limit_bytes` > 0; `name` is how refusals call it ("session memory budget").
  static std::shared_ptr<MemoryBudget> Create(int64_t limit_bytes, std::string name = "session memory budget");

  // Counts `bytes` as used, or kResourceExhausted ("... would need N bytes, more than the <name> of L bytes (U in
  // use)"), with `what` saying what asked for them. Nothing is counted on failure.
  absl::Status Reserve(int64_t bytes, const std::string& what);
  // Reserve without a message (hot paths): false when it does not fit; Refusal() then says why.
  bool TryReserve(int64_t bytes);
  absl::Status Refusal(int64_t bytes, const std::string& what) const;
  void Release(int64_t bytes);
  // kResourceExhausted unless `bytes` more would fit now (counts nothing): for plans checked before they run.
  absl::Status CheckFits(int64_t bytes, const std::string& what) const;

  // Caches that hold budgeted memory they could give back (buffer pools' free buffers) register here; Reclaim()
  // asks every one to give it back, before a request is refused. A reclaimer returns false once it is gone (its
  // pool destroyed) and is then dropped.
  void AddReclaimer(std::function<bool()> reclaim);
  void Reclaim();

  int64_t limit() const { return limit_; }
  const std::string& name() const { return name_; }
  int64_t used() const;
  int64_t peak() const;

 private:
  MemoryBudget(int64_t limit_bytes, std::string name) : limit_(limit_bytes), name_(std::move(name)) {}
  absl::Status RefusalLocked(int64_t bytes, int64_t used, const std::string& what) const;

  const int64_t limit_;
  const std::string name_;
  mutable std::mutex mutex_;
  int64_t used_ = 0;
  int64_t peak_ = 0;
  std::mutex reclaimers_mutex_;  // taken before any pool's mutex, never while mutex_ is held
  std::vector<std::function<bool()>> reclaimers_;
};

// Holds `bytes` of a budget for its lifetime (the long-lived tensors of a session). Movable.
class MemoryReservation {
 public:
  MemoryReservation() = default;
  static absl::StatusOr<MemoryReservation> Make(std::shared_ptr<MemoryBudget> budget, int64_t bytes,
                                                const std::string& what);
  ~MemoryReservation() { Reset(); }
  MemoryReservation(MemoryReservation&& other) noexcept { *this = std::move(other); }
  MemoryReservation& operator=(MemoryReservation&& other) noexcept;
  MemoryReservation(const MemoryReservation&) = delete;
  MemoryReservation& operator=(const MemoryReservation&) = delete;
  int64_t bytes() const { return bytes_; }
  void Reset();

 private:
  std::shared_ptr<MemoryBudget> budget_;
  int64_t bytes_ = 0;
};

// Total and available memory of this machine (the cgroup's limit when it is lower), for budget defaults.
int64_t PhysicalMemoryBytes();

// "1.5 GiB"-style text for messages.
std::string FormatBytes(int64_t bytes);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_CORE_MEMORY_BUDGET_H_
