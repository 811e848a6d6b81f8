#include "engine/core/memory_budget.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <limits>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"

namespace traind::engine {

std::shared_ptr<MemoryBudget> MemoryBudget::Create(int64_t limit_bytes, std::string name) {
  return std::shared_ptr<MemoryBudget>(new MemoryBudget(std::max<int64_t>(limit_bytes, 0), std::move(name)));
}

absl::Status MemoryBudget::Refusal(int64_t bytes, const std::string& what) const {
  return RefusalLocked(bytes, used(), what);
}

absl::Status MemoryBudget::RefusalLocked(int64_t bytes, int64_t used, const std::string& what) const {
  return absl::ResourceExhaustedError(absl::StrCat(what, " would need ", FormatBytes(bytes), " more, beyond the ",
                                                   name_, " of ", FormatBytes(limit_), " (", FormatBytes(used),
                                                   " in use)"));
}

absl::Status MemoryBudget::Reserve(int64_t bytes, const std::string& what) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes < 0 || bytes > limit_ - used_) return RefusalLocked(bytes, used_, what);
  used_ += bytes;
  peak_ = std::max(peak_, used_);
  return absl::OkStatus();
}

bool MemoryBudget::TryReserve(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes < 0 || bytes > limit_ - used_) return false;
  used_ += bytes;
  peak_ = std::max(peak_, used_);
  return true;
}

void MemoryBudget::Release(int64_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  used_ -= std::min(bytes, used_);
}

absl::Status MemoryBudget::CheckFits(int64_t bytes, const std::string& what) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (bytes < 0 || bytes > limit_ - used_) return RefusalLocked(bytes, used_, what);
  return absl::OkStatus();
}

void MemoryBudget::AddReclaimer(std::function<bool()> reclaim) {
  std::lock_guard<std::mutex> lock(reclaimers_mutex_);
  reclaimers_.push_back(std::move(reclaim));
}

void MemoryBudget::Reclaim() {
  std::lock_guard<std::mutex> lock(reclaimers_mutex_);
  reclaimers_.erase(std::remove_if(reclaimers_.begin(), reclaimers_.end(),
                                   [](const std::function<bool()>& reclaim) { return !reclaim(); }),
                    reclaimers_.end());
}

int64_t MemoryBudget::used() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return used_;
}

int64_t MemoryBudget::peak() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_;
}

absl::StatusOr<MemoryReservation> MemoryReservation::Make(std::shared_ptr<MemoryBudget> budget, int64_t bytes,
                                                          const std::string& what) {
  MemoryReservation reservation;
  if (budget == nullptr) return reservation;
  if (absl::Status status = budget->Reserve(bytes, what); !status.ok()) return status;
  reservation.budget_ = std::move(budget);
  reservation.bytes_ = bytes;
  return reservation;
}

MemoryReservation& MemoryReservation::operator=(MemoryReservation&& other) noexcept {
  if (this != &other) {
    Reset();
    budget_ = std::move(other.budget_);
    bytes_ = other.bytes_;
    other.bytes_ = 0;
  }
  return *this;
}

void MemoryReservation::Reset() {
  if (budget_ != nullptr) budget_->Release(bytes_);
  budget_ = nullptr;
  bytes_ = 0;
}

namespace {

// The memory limit of this process's cgroup (v2 memory.max, v1 memory.limit_in_bytes); max() when unlimited.
int64_t CgroupLimitBytes() {
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    std::string text;
    int64_t value = 0;
    if (in >> text && absl::SimpleAtoi(text, &value) && value > 0) return value;
  }
  return std::numeric_limits<int64_t>::max();
}

}  // namespace

int64_t PhysicalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGESIZE);
  int64_t physical = pages > 0 && page_size > 0 ? static_cast<int64_t>(pages) * page_size : int64_t{4} << 30;
  return std::min(physical, CgroupLimitBytes());
}

std::string FormatBytes(int64_t bytes) {
  if (bytes == std::numeric_limits<int64_t>::max()) return "more than 8 EiB";
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 6) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, " bytes");
  return absl::StrFormat("%.1f %s (%d bytes)", value, units[unit], bytes);
}

}  // namespace traind::engine
