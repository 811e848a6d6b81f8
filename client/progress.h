// Progress of long operations (job watch, uploads, downloads): a bar redrawn in place when stdout is a terminal,
// plain lines otherwise (logs, pipes, CI), nothing with --json (stdout then carries one JSON document).
#ifndef TRAIND_CLIENT_PROGRESS_H_
#define TRAIND_CLIENT_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <ostream>
#include <string>

namespace traind::cli {

enum class ProgressStyle { kBar, kLines, kNone };

// kNone with --json; kBar when stdout is a terminal; kLines otherwise.
ProgressStyle ProgressStyleForStdout(bool json);
// Columns of the terminal on stdout (80 when unknown).
int TerminalWidth();

// "[=========>          ]" with `width` cells inside the brackets; fraction is clamped to [0, 1].
std::string RenderBar(double fraction, int width);
// 1536 -> "1.5 KiB"; below 1 KiB in bytes ("512 B").
std::string FormatBytes(int64_t bytes);
// 75 -> "1m15s", 3725 -> "1h02m", 9 -> "9s"; negative -> "?".
std::string FormatDuration(double seconds);

// One line of status that changes over time. Bar style: the line is redrawn in place (carriage return + erase),
// at most `max_redraws_per_second`, and permanent lines are printed above it. Lines style: every Show() that
// differs from the previous one is a line. None: silent.
class StatusLine {
 public:
  StatusLine(std::ostream& out, ProgressStyle style, int max_redraws_per_second = 10);
  ~StatusLine();
  StatusLine(const StatusLine&) = delete;
  StatusLine& operator=(const StatusLine&) = delete;

  // `force` redraws even within the throttle interval (the last state before Finish()).
  void Show(const std::string& text, bool force = false);
  // A line that stays (an evaluation result, a warning), printed above the status line.
  void Print(const std::string& line);
  // Bar style: erases the status line, so what follows starts on a clean line. Idempotent.
  void Finish();

  ProgressStyle style() const { return style_; }

 private:
  std::ostream& out_;
  ProgressStyle style_;
  std::chrono::steady_clock::duration min_interval_;
  std::chrono::steady_clock::time_point last_draw_{};
  std::string shown_;   // what the status line shows now (bar style) or showed last (lines style)
  bool drawn_ = false;  // bar style: a status line is on the screen
};

// Progress of a transfer of known size: "upload model.onnx [=====>    ] 45% 12.0 MiB of 27.0 MiB 8.1 MiB/s".
// Lines style prints a line at every 10 % crossed. Transfers that fit in one chunk show nothing (there is no
// progress to see).
class TransferProgress {
 public:
  TransferProgress(std::ostream& out, ProgressStyle style, std::string label, int64_t total_bytes,
                   int64_t chunk_bytes);
  void Advance(int64_t done_bytes);
  void Finish();

 private:
  StatusLine line_;
  std::string label_;
  int64_t total_bytes_;
  bool enabled_;
  int last_decile_ = -1;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace traind::cli

#endif  // TRAIND_CLIENT_PROGRESS_H_
