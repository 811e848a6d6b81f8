#include "engine/io/file_util.h"

#include <dirent.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"

namespace traind::engine {
namespace {

std::string TempDir() { return std::getenv("TEST_TMPDIR"); }

int CountEntries(const std::string& directory) {
  int count = 0;
  DIR* dir = opendir(directory.c_str());
  while (const dirent* entry = readdir(dir)) count += entry->d_name[0] != '.';
  closedir(dir);
  return count;
}

TEST(Sha256Test, MatchesKnownVectors) {
  // FIPS 180-2 test vectors.
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  Sha256 incremental;
  incremental.Update("a");
  incremental.Update("bc");
  EXPECT_EQ(incremental.FinishHex(), Sha256Hex("abc"));
}

TEST(FileUtilTest, AtomicWriteReplacesContentAndLeavesNoTemporaryFiles) {
  const std::string dir = TempDir() + "/atomic";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/file.bin";
  ASSERT_TRUE(WriteFileAtomically(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomically(path, std::string("second\0binary", 13)).ok());
  auto content = ReadFileLimited(path, 1 << 20);
  ASSERT_TRUE(content.ok()) << content.status();
  EXPECT_EQ(*content, std::string("second\0binary", 13));
  EXPECT_EQ(CountEntries(dir), 1);
}

TEST(FileUtilTest, UncommittedWriterLeavesTheOldFileUntouched) {
  const std::string dir = TempDir() + "/uncommitted";
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/file.bin";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  {
    auto writer = AtomicFileWriter::Create(path);
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Append("half of the new conte").ok());
    // Destroyed without Commit(), as when the writer is interrupted.
  }
  EXPECT_EQ(*ReadFileLimited(path, 100), "old");
  EXPECT_EQ(CountEntries(dir), 1);
}

TEST(FileUtilTest, ReadRefusesOversizedMissingAndNonRegularFiles) {
  const std::string path = TempDir() + "/big.bin";
  ASSERT_TRUE(WriteFileAtomically(path, std::string(1000, 'x')).ok());
  EXPECT_EQ(ReadFileLimited(path, 999).status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ReadFileLimited(TempDir() + "/missing", 10).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadFileLimited(TempDir(), 10).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(FileUtilTest, WriteIntoMissingDirectoryFailsClearly) {
  absl::Status status = WriteFileAtomically(TempDir() + "/no/such/dir/file", "x");
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(status.message().find("no/such/dir"), std::string::npos);
}

}  // namespace
}  // namespace traind::engine
