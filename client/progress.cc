#include "client/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace traind::cli {
namespace {

// Carriage return + "erase to the end of the line" (ECMA-48 EL).
constexpr char kEraseLine[] = "\r\x1b[K";

}  // namespace

ProgressStyle ProgressStyleForStdout(bool json) {
  if (json) return ProgressStyle::kNone;
  return ::isatty(STDOUT_FILENO) ? ProgressStyle::kBar : ProgressStyle::kLines;
}

int TerminalWidth() {
  winsize size{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col >= 20) return size.ws_col;
  return 80;
}

std::string RenderBar(double fraction, int width) {
  if (!(fraction >= 0)) fraction = 0;  // also NaN
  fraction = std::min(fraction, 1.0);
  width = std::max(width, 1);
  const int filled = static_cast<int>(std::floor(fraction * width));
  std::string bar = "[";
  bar.append(static_cast<size_t>(filled), '=');
  if (filled < width) {
    bar.push_back('>');
    bar.append(static_cast<size_t>(width - filled - 1), ' ');
  }
  return bar + "]";
}

std::string FormatBytes(int64_t bytes) {
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit < 3) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

std::string FormatDuration(double seconds) {
  if (!(seconds >= 0)) return "?";
  const int64_t total = static_cast<int64_t>(std::llround(seconds));
  if (total < 60) return absl::StrCat(total, "s");
  if (total < 3600) return absl::StrFormat("%dm%02ds", total / 60, total % 60);
  return absl::StrFormat("%dh%02dm", total / 3600, (total % 3600) / 60);
}

StatusLine::StatusLine(std::ostream& out, ProgressStyle style, int max_redraws_per_second)
    : out_(out),
      style_(style),
      min_interval_(std::chrono::milliseconds(1000 / std::max(max_redraws_per_second, 1))) {}

StatusLine::~StatusLine() { Finish(); }

void StatusLine::Show(const std::string& text, bool force) {
  switch (style_) {
    case ProgressStyle::kNone:
      return;
    case ProgressStyle::kLines:
      if (text != shown_) out_ << text << "\n" << std::flush;
      shown_ = text;
      return;
    case ProgressStyle::kBar: {
      const auto now = std::chrono::steady_clock::now();
      shown_ = text;
      if (!force && drawn_ && now - last_draw_ < min_interval_) return;
      last_draw_ = now;
      out_ << kEraseLine << text << std::flush;
      drawn_ = true;
      return;
    }
  }
}

void StatusLine::Print(const std::string& line) {
  if (style_ == ProgressStyle::kNone) return;
  if (style_ == ProgressStyle::kBar && drawn_) {
    out_ << kEraseLine << line << "\n" << shown_ << std::flush;
    return;
  }
  out_ << line << "\n" << std::flush;
}

void StatusLine::Finish() {
  if (style_ == ProgressStyle::kBar && drawn_) out_ << kEraseLine << std::flush;
  drawn_ = false;
}

TransferProgress::TransferProgress(std::ostream& out, ProgressStyle style, std::string label, int64_t total_bytes,
                                   int64_t chunk_bytes)
    : line_(out, style),
      label_(std::move(label)),
      total_bytes_(total_bytes),
      enabled_(total_bytes > chunk_bytes),
      start_(std::chrono::steady_clock::now()) {}

void TransferProgress::Advance(int64_t done_bytes) {
  if (!enabled_ || line_.style() == ProgressStyle::kNone) return;
  const double fraction = total_bytes_ > 0 ? static_cast<double>(done_bytes) / static_cast<double>(total_bytes_) : 1;
  const int percent = static_cast<int>(std::floor(std::min(fraction, 1.0) * 100));
  const std::string amounts = absl::StrCat(FormatBytes(done_bytes), " of ", FormatBytes(total_bytes_));
  if (line_.style() == ProgressStyle::kLines) {
    const int decile = percent / 10;
    if (decile == last_decile_) return;
    last_decile_ = decile;
    line_.Show(absl::StrCat(label_, ": ", percent, "% (", amounts, ")"));
    return;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string rate;
  if (seconds > 0.2) rate = absl::StrCat(" ", FormatBytes(static_cast<int64_t>(done_bytes / seconds)), "/s");
  const std::string text = absl::StrCat(label_, " ", percent, "% ", amounts, rate);
  const int bar_width = std::max(10, TerminalWidth() - static_cast<int>(text.size()) - 4);
  line_.Show(absl::StrCat(label_, " ", RenderBar(fraction, std::min(bar_width, 40)), " ", percent, "% ", amounts,
                          rate),
             done_bytes >= total_bytes_);
}

void TransferProgress::Finish() { line_.Finish(); }

}  // namespace traind::cli
