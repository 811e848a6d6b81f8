#include "client/progress.h"

#include <sstream>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ProgressTest, BarFillsInProportionAndClamps) {
  EXPECT_EQ(RenderBar(0, 10), "[>         ]");
  EXPECT_EQ(RenderBar(0.5, 10), "[=====>    ]");
  EXPECT_EQ(RenderBar(1, 10), "[==========]");
  EXPECT_EQ(RenderBar(7, 4), "[====]");
  EXPECT_EQ(RenderBar(-1, 4), "[>   ]");
  EXPECT_EQ(RenderBar(std::nan(""), 4), "[>   ]");
}

TEST(ProgressTest, BytesAndDurationsForPeople) {
  EXPECT_EQ(FormatBytes(0), "0 B");
  EXPECT_EQ(FormatBytes(1023), "1023 B");
  EXPECT_EQ(FormatBytes(1536), "1.5 KiB");
  EXPECT_EQ(FormatBytes(int64_t{100} << 20), "100.0 MiB");
  EXPECT_EQ(FormatBytes(int64_t{3} << 30), "3.0 GiB");
  EXPECT_EQ(FormatDuration(9), "9s");
  EXPECT_EQ(FormatDuration(75), "1m15s");
  EXPECT_EQ(FormatDuration(3725), "1h02m");
  EXPECT_EQ(FormatDuration(-1), "?");
}

TEST(ProgressTest, LinesStylePrintsEachChangeOnItsOwnLineWithoutCarriageReturns) {
  std::ostringstream out;
  {
    StatusLine line(out, ProgressStyle::kLines);
    line.Show("epoch 1");
    line.Show("epoch 1");  // unchanged: not repeated
    line.Print("eval: loss 0.5");
    line.Show("epoch 2");
  }
  EXPECT_EQ(out.str(), "epoch 1\neval: loss 0.5\nepoch 2\n");
}

TEST(ProgressTest, BarStyleRedrawsInPlaceAndKeepsPrintedLinesAbove) {
  std::ostringstream out;
  StatusLine line(out, ProgressStyle::kBar, /*max_redraws_per_second=*/1000000);
  line.Show("step 1");
  line.Print("eval 1");
  line.Show("step 2", /*force=*/true);
  line.Finish();
  EXPECT_EQ(out.str(), "\r\x1b[Kstep 1\r\x1b[Keval 1\nstep 1\r\x1b[Kstep 2\r\x1b[K");
}

TEST(ProgressTest, BarStyleThrottlesRedraws) {
  std::ostringstream out;
  StatusLine line(out, ProgressStyle::kBar, /*max_redraws_per_second=*/1);
  for (int i = 0; i < 100; ++i) line.Show("step " + std::to_string(i));
  line.Show("last", /*force=*/true);
  EXPECT_THAT(out.str(), Not(HasSubstr("step 50")));
  EXPECT_THAT(out.str(), HasSubstr("step 0"));
  EXPECT_THAT(out.str(), HasSubstr("last"));
}

TEST(ProgressTest, NoneStyleIsSilent) {
  std::ostringstream out;
  StatusLine line(out, ProgressStyle::kNone);
  line.Show("x");
  line.Print("y");
  line.Finish();
  TransferProgress transfer(out, ProgressStyle::kNone, "upload f", 100, 1);
  transfer.Advance(50);
  EXPECT_EQ(out.str(), "");
}

TEST(ProgressTest, TransferLinesAtEveryTenPercent) {
  std::ostringstream out;
  TransferProgress transfer(out, ProgressStyle::kLines, "upload model.onnx", 1000, 10);
  for (int done = 10; done <= 1000; done += 10) transfer.Advance(done);
  transfer.Finish();
  const std::vector<std::string> lines = absl::StrSplit(out.str(), '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 11u);  // 0 %, 10 %, ..., 100 %
  EXPECT_EQ(lines[0], "upload model.onnx: 1% (10 B of 1000 B)");
  EXPECT_EQ(lines[10], "upload model.onnx: 100% (1000 B of 1000 B)");
  EXPECT_THAT(out.str(), Not(HasSubstr("\r")));
}

TEST(ProgressTest, TransferThatFitsOneChunkShowsNothing) {
  std::ostringstream out;
  TransferProgress transfer(out, ProgressStyle::kBar, "upload small", 100, 1 << 20);
  transfer.Advance(100);
  transfer.Finish();
  EXPECT_EQ(out.str(), "");
}

}  // namespace
}  // namespace traind::cli
