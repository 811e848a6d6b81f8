#include "server/compute_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

namespace traind {
namespace {

TEST(ComputePoolTest, RunsTasksOnItsWorkersAndReturnsTheirStatus) {
  ComputePool pool(2, 4);
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  EXPECT_TRUE(pool.Run([&] {
                    ran_on = std::this_thread::get_id();
                    return absl::OkStatus();
                  })
                  .ok());
  EXPECT_NE(ran_on, caller);
  EXPECT_EQ(pool.Run([] { return absl::DataLossError("x"); }).code(), absl::StatusCode::kDataLoss);
}

TEST(ComputePoolTest, AtMostWorkersTasksRunAtOnce) {
  ComputePool pool(2, 16);
  std::atomic<int> running{0}, most{0};
  std::vector<std::thread> callers;
  for (int i = 0; i < 8; ++i) {
    callers.emplace_back([&] {
      EXPECT_TRUE(pool.Run([&] {
                        const int now = ++running;
                        int seen = most.load();
                        while (now > seen && !most.compare_exchange_weak(seen, now)) {
                        }
                        std::this_thread::sleep_for(std::chrono::milliseconds(5));
                        --running;
                        return absl::OkStatus();
                      })
                      .ok());
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(most.load(), 2);
}

TEST(ComputePoolTest, AFullQueueRefusesAtOnceAndCancelledTasksAreSkipped) {
  ComputePool pool(1, 1);
  absl::Notification started, release;
  std::thread busy([&] {
    EXPECT_TRUE(pool.Run([&] {
                      started.Notify();
                      release.WaitForNotification();
                      return absl::OkStatus();
                    })
                    .ok());
  });
  started.WaitForNotification();
  // One may wait: this one, whose caller gives up before it starts.
  std::atomic<bool> ran{false};
  std::thread waiting([&] {
    const absl::Status status = pool.Run(
        [&] {
          ran = true;
          return absl::OkStatus();
        },
        [] { return true; });
    EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
  });
  while (pool.queued() < 1) std::this_thread::yield();
  const absl::Status refused = pool.Run([] { return absl::OkStatus(); });
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
  release.Notify();
  busy.join();
  waiting.join();
  EXPECT_FALSE(ran.load());
  EXPECT_TRUE(pool.Run([] { return absl::OkStatus(); }).ok());
}

}  // namespace
}  // namespace traind
