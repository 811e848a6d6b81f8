#include "engine/io/npz.h"

#include <cstring>
#include <string>

#include "engine/io/file_util.h"
#include "engine/io/npy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using ::testing::HasSubstr;

std::string TestData(const std::string& name) {
  return std::string(std::getenv("TEST_SRCDIR")) + "/" + std::getenv("TEST_WORKSPACE") + "/engine/io/testdata/" + name;
}

std::string Read(const std::string& name) { return *ReadFileLimited(TestData(name), 1 << 20); }

bool Same(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.byte_size()) == 0;
}

TEST(NpzTest, ReadsWhatNumpyWritesStoredAndCompressed) {
  for (const char* archive : {"stored.npz", "compressed.npz"}) {
    SCOPED_TRACE(archive);
    auto arrays = ParseNpz(Read(archive));
    ASSERT_TRUE(arrays.ok()) << arrays.status();
    ASSERT_EQ(arrays->size(), 4u);
    for (const char* name : {"input", "target", "mask", "scalar"}) {
      auto expected = ReadNpy(TestData(std::string("expected_") + name + ".npy"));
      ASSERT_TRUE(expected.ok()) << expected.status();
      ASSERT_TRUE(arrays->count(name)) << name;
      EXPECT_TRUE(Same(arrays->at(name), *expected)) << name;
    }
  }
}

TEST(NpzTest, DamagedAndHostileArchivesAreRefused) {
  const std::string stored = Read("stored.npz"), compressed = Read("compressed.npz");
  // Every truncation and every single-byte corruption is refused or read correctly; none crashes.
  for (const std::string* archive : {&stored, &compressed}) {
    for (size_t size = 0; size < archive->size(); ++size) {
      EXPECT_FALSE(ParseNpz(archive->substr(0, size)).ok()) << size;
    }
    for (size_t at = 0; at < archive->size(); ++at) {
      std::string flipped = *archive;
      flipped[at] ^= 0x5a;
      (void)ParseNpz(flipped);  // must return, whatever it returns
    }
  }
  std::string data_flip = stored;
  data_flip[stored.find("NUMPY") + 140] ^= 1;  // inside the first array's data: only the CRC can tell
  auto damaged = ParseNpz(data_flip);
  ASSERT_FALSE(damaged.ok());
  EXPECT_THAT(std::string(damaged.status().message()), HasSubstr("CRC-32"));
  EXPECT_THAT(std::string(ParseNpz(std::string(100, 'x')).status().message()), HasSubstr("not a zip archive"));
  NpzLimits few;
  few.max_entries = 3;
  EXPECT_EQ(ParseNpz(stored, few).status().code(), absl::StatusCode::kResourceExhausted);
  NpzLimits small;
  small.max_total_bytes = 100;
  EXPECT_EQ(ParseNpz(compressed, small).status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace traind::engine
