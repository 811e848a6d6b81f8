#include "server/blob_store.h"

#include <filesystem>

#include "gtest/gtest.h"

namespace traind {
namespace {

class BlobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::string(std::getenv("TEST_TMPDIR")) + "/" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    auto store = BlobStore::Open(dir_, 1000);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }
  int BlobDirEntries() const {
    int count = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir_ + "/blobs")) count += !entry.path().empty();
    return count;
  }
  std::string dir_;
  std::unique_ptr<BlobStore> store_;
};

TEST_F(BlobStoreTest, StoresUnderTheDigestAndReadsBack) {
  const std::string content = "hello blob";
  auto upload = store_->BeginUpload(content.size(), Sha256Hex(content));
  ASSERT_TRUE(upload.ok()) << upload.status();
  ASSERT_TRUE((*upload)->Append("hello ").ok());
  ASSERT_TRUE((*upload)->Append("blob").ok());
  auto info = (*upload)->Finish();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->blob_id, Sha256Hex(content));
  EXPECT_EQ(info->size_bytes, 10);
  EXPECT_EQ(*store_->Read(info->blob_id), content);
  EXPECT_EQ(BlobDirEntries(), 1);
}

TEST_F(BlobStoreTest, RefusesWrongSizesDigestsAndLimits) {
  EXPECT_EQ(store_->BeginUpload(1001, "").status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(store_->BeginUpload(-1, "").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->BeginUpload(1, "ABC").status().code(), absl::StatusCode::kInvalidArgument);

  auto too_long = store_->BeginUpload(3, "");
  EXPECT_EQ((*too_long)->Append("abcd").code(), absl::StatusCode::kInvalidArgument);
  auto too_short = store_->BeginUpload(3, "");
  ASSERT_TRUE((*too_short)->Append("ab").ok());
  EXPECT_EQ((*too_short)->Finish().status().code(), absl::StatusCode::kInvalidArgument);
  auto wrong_digest = store_->BeginUpload(3, Sha256Hex("xyz"));
  ASSERT_TRUE((*wrong_digest)->Append("abc").ok());
  EXPECT_EQ((*wrong_digest)->Finish().status().code(), absl::StatusCode::kDataLoss);
  too_long->reset();
  too_short->reset();
  wrong_digest->reset();
  EXPECT_EQ(BlobDirEntries(), 0);  // nothing half-written stays
}

TEST_F(BlobStoreTest, ReadRefusesPathsAndUnknownIds) {
  EXPECT_EQ(store_->Read("../../etc/passwd").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store_->Read(std::string(64, 'a')).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(BlobStoreTest, OpenRemovesLeftoversOfInterruptedUploads) {
  // What a crash in the middle of an upload leaves: a temporary file, as AtomicFileWriter names them.
  ASSERT_TRUE(WriteFileAtomically(dir_ + "/blobs/upload.tmp.4242.0", "ab").ok());
  EXPECT_EQ(BlobDirEntries(), 1);
  ASSERT_TRUE(BlobStore::Open(dir_, 1000).ok());
  EXPECT_EQ(BlobDirEntries(), 0);
}

}  // namespace
}  // namespace traind
