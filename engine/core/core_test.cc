#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

#include "engine/core/buffer_pool.h"
#include "engine/core/memory_budget.h"
#include "engine/core/dtype.h"
#include "engine/core/shape.h"
#include "engine/core/tensor.h"
#include "engine/core/thread_pool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

TEST(ShapeTest, ElementCountRejectsOverflowAndNegativeDims) {
  EXPECT_EQ(*ElementCount({2, 3, 4}), 24);
  EXPECT_EQ(*ElementCount({}), 1);
  EXPECT_EQ(*ElementCount({0, std::numeric_limits<int64_t>::max()}), 0);
  EXPECT_EQ(ElementCount({int64_t{1} << 32, int64_t{1} << 32}).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ElementCount({std::numeric_limits<int64_t>::max(), 2}).status().code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ElementCount({-1, 2}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ElementCount({10, 10}, /*limit=*/99).ok());
}

TEST(ShapeTest, BroadcastShapes) {
  Shape a = {2, 1, 4}, b = {3, 1}, c = {5};
  const Shape* ok[] = {&a, &b};
  EXPECT_EQ(*BroadcastShapes(ok), (Shape{2, 3, 4}));
  const Shape* bad[] = {&a, &c};
  EXPECT_FALSE(BroadcastShapes(bad).ok());
}

TEST(ShapeTest, NormalizeAxis) {
  EXPECT_EQ(*NormalizeAxis(-1, 3), 2);
  EXPECT_FALSE(NormalizeAxis(3, 3).ok());
  EXPECT_FALSE(NormalizeAxis(-4, 3).ok());
}

TEST(DtypeTest, Float16RoundTripsAndRounds) {
  for (float value : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f}) {
    EXPECT_EQ(Float16ToFloat(FloatToFloat16(value)), value) << value;
  }
  EXPECT_TRUE(std::isinf(Float16ToFloat(FloatToFloat16(1e6f))));
  EXPECT_TRUE(std::isnan(Float16ToFloat(FloatToFloat16(NAN))));
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f)), 1.0f);
  EXPECT_EQ(FloatToBFloat16(1.00390625f).bits, 0x3F80);  // Tie rounds to even.
}

TEST(TensorTest, AllocationIsAlignedAndReshapeShares) {
  auto tensor = Tensor::Allocate(DataType::kFloat32, {3, 5});
  ASSERT_TRUE(tensor.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(tensor->raw_data()) % kTensorAlignment, 0u);
  EXPECT_EQ(tensor->byte_size(), 60u);
  Tensor reshaped = tensor->Reshaped({15});
  EXPECT_EQ(reshaped.raw_data(), tensor->raw_data());
  EXPECT_FALSE(Tensor::Allocate(DataType::kString, {1}).ok());
}

TEST(BufferPoolTest, ReusesReleasedBuffersOfTheSameBucket) {
  auto pool = BufferPool::Create();
  void* first_data;
  {
    auto first = pool->AllocateTensor(DataType::kFloat32, {1000});
    ASSERT_TRUE(first.ok());
    first_data = first->mutable_raw_data();
  }
  EXPECT_GT(pool->cached_bytes(), 0u);
  auto second = pool->AllocateTensor(DataType::kFloat32, {990});  // Same bucket.
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(second->mutable_raw_data(), first_data);
  EXPECT_EQ(pool->reuse_count(), 1u);
  EXPECT_EQ(BufferPool::BucketCapacity(1), kTensorAlignment);
  EXPECT_GE(BufferPool::BucketCapacity(5000), 5000u);
  EXPECT_LE(BufferPool::BucketCapacity(5000), 5000u * 5 / 4);
}

TEST(BufferPoolTest, CountsBytesInUseAndTheirPeak) {
  auto pool = BufferPool::Create();
  const size_t a_bytes = BufferPool::BucketCapacity(4000), b_bytes = BufferPool::BucketCapacity(8000);
  {
    auto a = pool->AllocateTensor(DataType::kFloat32, {1000});
    auto b = pool->AllocateTensor(DataType::kFloat32, {2000});
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(pool->bytes_in_use(), a_bytes + b_bytes);
  }
  EXPECT_EQ(pool->bytes_in_use(), 0u);
  auto c = pool->AllocateTensor(DataType::kFloat32, {1000});  // Reused: in use again, peak unchanged.
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(pool->bytes_in_use(), a_bytes);
  EXPECT_EQ(pool->peak_bytes_in_use(), a_bytes + b_bytes);
  // A request of another bucket while b's buffer sits in the cache: the pool holds both.
  auto d = pool->AllocateTensor(DataType::kFloat32, {4000});
  ASSERT_TRUE(d.ok());
  const size_t d_bytes = BufferPool::BucketCapacity(16000);
  EXPECT_EQ(pool->peak_bytes_in_use(), a_bytes + d_bytes);
  EXPECT_EQ(pool->peak_bytes_held(), a_bytes + b_bytes + d_bytes);
}

// Large buffers are mappings of their own (tensor.cc), small ones come from malloc: both aligned, writable to
// the last byte, and freed by the size they were allocated with.
TEST(TensorTest, LargeAndSmallAllocationsAreAlignedAndWholeWritable) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4096}, (size_t{1} << 20) - 1, size_t{1} << 20,
                       (size_t{3} << 20) + 7}) {
    void* data = AlignedAllocate(bytes);
    ASSERT_NE(data, nullptr) << bytes;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(data) % kTensorAlignment, 0u) << bytes;
    if (bytes > 0) {
      std::memset(data, 0x5a, bytes);
      EXPECT_EQ(static_cast<unsigned char*>(data)[bytes - 1], 0x5a);
    }
    AlignedFree(data, bytes);
  }
  EXPECT_EQ(AlignedAllocate(size_t{1} << 63), nullptr);
}

TEST(BufferPoolTest, BuffersMayOutliveThePool) {
  Tensor survivor;
  {
    auto pool = BufferPool::Create();
    survivor = *pool->AllocateTensor(DataType::kInt64, {8});
  }
  survivor.mutable_data<int64_t>()[7] = 1;  // ASan would flag a freed buffer.
  EXPECT_EQ(survivor.data<int64_t>()[7], 1);
}

// A device copy in host memory, counting what crosses: the protocol of Buffer's two copies without a device.
class FakeDeviceCopy : public DeviceCopy {
 public:
  explicit FakeDeviceCopy(std::vector<char> bytes, int* downloads) : bytes_(std::move(bytes)), downloads_(downloads) {}
  absl::Status Download(void* host, size_t bytes) override {
    ++*downloads_;
    std::memcpy(host, bytes_.data(), bytes);
    return absl::OkStatus();
  }
  absl::StatusOr<bool> CopyInto(Buffer& destination) override {
    if (destination.device_copy() != nullptr) {
      static_cast<FakeDeviceCopy*>(destination.device_copy())->bytes_ = bytes_;
    } else {
      std::unique_ptr<DeviceCopy> copy = std::make_unique<FakeDeviceCopy>(bytes_, downloads_);
      if (!destination.AttachDeviceCopy(copy, true)) return false;
    }
    destination.MarkWrittenOnDevice();
    return true;
  }
  std::vector<char> bytes_;
  int* downloads_;
};

std::vector<char> BytesOf(std::vector<float> values) {
  std::vector<char> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

TEST(DeviceCopyTest, HostReadsOfADeviceMadeBufferDownloadOnce) {
  int downloads = 0;
  auto buffer = Buffer::CreateOnDevice(12, std::make_unique<FakeDeviceCopy>(BytesOf({1, 2, 3}), &downloads));
  Tensor tensor(DataType::kFloat32, {3}, buffer, 3);
  EXPECT_FALSE(buffer->host_current());
  EXPECT_TRUE(buffer->device_current());
  EXPECT_EQ(tensor.shape(), Shape({3}));  // Shapes need no bytes.
  EXPECT_EQ(downloads, 0);
  EXPECT_EQ(tensor.data<float>()[2], 3.0f);
  EXPECT_EQ(tensor.data<float>()[0], 1.0f);
  EXPECT_EQ(downloads, 1);
  EXPECT_TRUE(buffer->host_current());
  EXPECT_TRUE(buffer->device_current());
  tensor.mutable_data<float>()[0] = 7;  // A host write makes the device copy stale.
  EXPECT_FALSE(buffer->device_current());
  EXPECT_EQ(tensor.data<float>()[0], 7.0f);
  EXPECT_EQ(downloads, 1);
}

TEST(DeviceCopyTest, AWriteOnTheDeviceMakesTheHostStale) {
  int downloads = 0;
  Tensor tensor = *Tensor::FromVector<float>({2}, {1, 2});
  std::unique_ptr<DeviceCopy> copy = std::make_unique<FakeDeviceCopy>(BytesOf({1, 2}), &downloads);
  ASSERT_TRUE(tensor.buffer()->AttachDeviceCopy(copy, /*device_current=*/true));
  EXPECT_EQ(copy, nullptr);
  std::unique_ptr<DeviceCopy> second = std::make_unique<FakeDeviceCopy>(BytesOf({0, 0}), &downloads);
  EXPECT_FALSE(tensor.buffer()->AttachDeviceCopy(second, true));  // One copy per buffer.
  EXPECT_NE(second, nullptr);
  static_cast<FakeDeviceCopy*>(tensor.buffer()->device_copy())->bytes_ = BytesOf({5, 6});
  tensor.buffer()->MarkWrittenOnDevice();
  EXPECT_EQ(tensor.data<float>()[1], 6.0f);
  EXPECT_EQ(downloads, 1);
}

TEST(DeviceCopyTest, CopyTensorDataStaysOnTheDeviceWhenTheSourceIsThere) {
  int downloads = 0;
  Tensor from(DataType::kFloat32, {2},
              Buffer::CreateOnDevice(8, std::make_unique<FakeDeviceCopy>(BytesOf({3, 4}), &downloads)), 2);
  Tensor to = *Tensor::FromVector<float>({2}, {0, 0});
  ASSERT_TRUE(CopyTensorData(from, to).ok());
  EXPECT_EQ(downloads, 0);
  EXPECT_FALSE(to.buffer()->host_current());
  EXPECT_EQ(to.data<float>()[1], 4.0f);  // Downloaded from to's own new device copy.
  EXPECT_EQ(downloads, 1);
  // A host source copies on the host; the destination's device copy goes stale.
  Tensor host = *Tensor::FromVector<float>({2}, {8, 9});
  ASSERT_TRUE(CopyTensorData(host, to).ok());
  EXPECT_FALSE(to.buffer()->device_current());
  EXPECT_EQ(to.data<float>()[0], 8.0f);
}

TEST(MemoryBudgetTest, RefusesBeyondTheLimitAndNamesIt) {
  auto budget = MemoryBudget::Create(1000, "test budget");
  EXPECT_TRUE(budget->Reserve(600, "first").ok());
  absl::Status refused = budget->Reserve(500, "second");
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(refused.message()), ::testing::HasSubstr("test budget of 1000 bytes"));
  EXPECT_THAT(std::string(refused.message()), ::testing::HasSubstr("second"));
  EXPECT_EQ(budget->used(), 600);
  EXPECT_EQ(budget->CheckFits(400, "plan").code(), absl::StatusCode::kOk);
  EXPECT_EQ(budget->CheckFits(401, "plan").code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(budget->Reserve(-1, "negative").code(), absl::StatusCode::kResourceExhausted);
  {
    auto reservation = MemoryReservation::Make(budget, 400, "held");
    ASSERT_TRUE(reservation.ok());
    EXPECT_EQ(budget->used(), 1000);
  }
  EXPECT_EQ(budget->used(), 600);
  budget->Release(600);
  EXPECT_EQ(budget->used(), 0);
  EXPECT_EQ(budget->peak(), 1000);
}

// A budgeted pool refuses before allocating, counts its cached buffers, and gives them back (its own and those of
// the budget's other pools) before refusing.
TEST(BufferPoolTest, BudgetRefusesBeforeAllocatingAndReclaimsIdleBuffers) {
  auto budget = MemoryBudget::Create(1 << 20);
  auto pool = BufferPool::Create(size_t{1} << 30, budget);
  auto other = BufferPool::Create(size_t{1} << 30, budget);
  auto huge = pool->AllocateTensor(DataType::kFloat32, {int64_t{1} << 20, int64_t{1} << 20});
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(huge.status().message()), ::testing::HasSubstr("session memory budget"));
  EXPECT_THAT(std::string(huge.status().message()), ::testing::HasSubstr("[1048576,1048576]"));
  EXPECT_EQ(budget->used(), 0);
  {
    auto held = other->AllocateTensor(DataType::kFloat32, {150000});  // 600 KB, cached by `other` when dropped
    ASSERT_TRUE(held.ok());
    EXPECT_GT(budget->used(), 600000);
  }
  EXPECT_GT(budget->used(), 600000);  // cached, still counted
  auto fits = pool->AllocateTensor(DataType::kFloat32, {200000});  // 800 KB: only after `other` gives its cache back
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_EQ(other->cached_bytes(), 0u);
  auto beyond = pool->AllocateTensor(DataType::kFloat32, {100000});
  EXPECT_EQ(beyond.status().code(), absl::StatusCode::kResourceExhausted);
  fits = absl::StatusOr<Tensor>(Tensor());
  pool.reset();  // freed buffers leave the budget when nothing caches them
  other.reset();
  EXPECT_EQ(budget->used(), 0);
}

TEST(ThreadPoolTest, ParallelForCoversEveryIndexOnce) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(100000);
  pool.ParallelFor(100000, 1000, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) hits[i]++;
    // Nested calls run inline instead of deadlocking.
    pool.ParallelFor(10, 1, [](int64_t, int64_t) {});
  });
  for (const auto& hit : hits) ASSERT_EQ(hit.load(), 1);
}

}  // namespace
}  // namespace traind::engine
