#include "engine/core/tensor_bytes.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using ::testing::HasSubstr;

std::string Bytes(const std::vector<float>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float));
}

TEST(TensorBytesTest, RoundTripsEveryStorableType) {
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -0.5f};
  auto tensor = TensorFromBytes(DataType::kFloat32, {2, 3}, Bytes(values), 1 << 20, "x");
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_EQ(tensor->shape(), (Shape{2, 3}));
  EXPECT_EQ(std::memcmp(tensor->data<float>(), values.data(), sizeof(float) * values.size()), 0);
  EXPECT_EQ(TensorToBytes(*tensor), Bytes(values));

  auto scalar = TensorFromBytes(DataType::kInt64, {}, std::string(8, '\1'), 1 << 20, "s");
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_EQ(scalar->num_elements(), 1);
  auto empty = TensorFromBytes(DataType::kFloat64, {0, 5}, "", 1 << 20, "e");
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->num_elements(), 0);
  auto flags = TensorFromBytes(DataType::kBool, {3}, std::string("\0\1\1", 3), 1 << 20, "b");
  ASSERT_TRUE(flags.ok()) << flags.status();
}

TEST(TensorBytesTest, RefusesHostileHeadersBeforeAllocating) {
  struct Case {
    DataType dtype;
    std::vector<int64_t> dims;
    std::string bytes;
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {DataType::kUndefined, {1}, "", absl::StatusCode::kInvalidArgument, "which a tensor cannot hold"},
      {DataType::kString, {1}, "", absl::StatusCode::kInvalidArgument, "which a tensor cannot hold"},
      {DataType::kFloat32, {2, -1}, "", absl::StatusCode::kInvalidArgument, "negative dimension -1 at axis 1"},
      {DataType::kFloat32, {int64_t{1} << 40, int64_t{1} << 40}, "", absl::StatusCode::kInvalidArgument, "overflows"},
      {DataType::kFloat32, {int64_t{1} << 30}, "", absl::StatusCode::kResourceExhausted, "more than 1048576 bytes"},
      {DataType::kFloat32, {3}, std::string(8, '\0'), absl::StatusCode::kInvalidArgument, "12 bytes expected, 8 given"},
      {DataType::kBool, {2}, std::string("\0\2", 2), absl::StatusCode::kInvalidArgument, "byte 1 is 2"},
  };
  for (const Case& bad : cases) {
    SCOPED_TRACE(bad.message);
    auto tensor = TensorFromBytes(bad.dtype, bad.dims, bad.bytes, 1 << 20, "input 'x'");
    ASSERT_FALSE(tensor.ok());
    EXPECT_EQ(tensor.status().code(), bad.code) << tensor.status();
    EXPECT_THAT(std::string(tensor.status().message()), HasSubstr(bad.message));
    EXPECT_THAT(std::string(tensor.status().message()), HasSubstr("input 'x'"));
  }
}

TEST(TensorBytesTest, DecodesIntoAPoolAndReusesItsBuffer) {
  std::shared_ptr<BufferPool> pool = BufferPool::Create();
  std::vector<float> values(50000);  // 200 KB: above malloc's mmap threshold, as a client's batch often is
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  const void* first_data = nullptr;
  {
    auto first = TensorFromBytes(DataType::kFloat32, {500, 100}, Bytes(values), 1 << 20, "x", pool.get());
    ASSERT_TRUE(first.ok()) << first.status();
    EXPECT_EQ(TensorToBytes(*first), Bytes(values));
    EXPECT_GT(pool->bytes_in_use(), 0u);
    first_data = first->raw_data();
  }
  EXPECT_EQ(pool->bytes_in_use(), 0u);  // back in the pool once the tensor is gone
  values[7] = -1.0f;
  auto second = TensorFromBytes(DataType::kFloat32, {500, 100}, Bytes(values), 1 << 20, "x", pool.get());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(pool->reuse_count(), 1u);
  EXPECT_EQ(second->raw_data(), first_data);
  EXPECT_EQ(TensorToBytes(*second), Bytes(values));

  // A refused decode takes nothing from the pool.
  auto refused = TensorFromBytes(DataType::kFloat32, {500, 100}, std::string(8, '\0'), 1 << 20, "x", pool.get());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pool->bytes_in_use(), BufferPool::BucketCapacity(second->byte_size()));
}

}  // namespace
}  // namespace traind::engine
