#include "engine/training/lr_scheduler.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using ::testing::HasSubstr;

// One line of testdata/lr_reference.txt (written by make_lr_reference.py from torch.optim.lr_scheduler).
struct ReferenceCase {
  std::string line;  // For failure messages.
  SchedulerState state;
  double initial_lr = 0;
  std::vector<double> learning_rates;  // After 0, 1, 2, ... steps.
};

std::vector<ReferenceCase> ReadReference() {
  const std::string path = std::string(std::getenv("TEST_SRCDIR")) + "/" + std::getenv("TEST_WORKSPACE") +
                           "/engine/training/testdata/lr_reference.txt";
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << "cannot open " << path;
  std::vector<ReferenceCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    ReferenceCase reference;
    reference.line = line;
    std::vector<std::string> halves = absl::StrSplit(line, " | ");
    EXPECT_EQ(halves.size(), 2u) << line;
    if (halves.size() != 2) continue;
    std::vector<std::string> fields = absl::StrSplit(halves[0], ' ');
    reference.state.kind = fields[0];
    for (size_t i = 1; i < fields.size(); ++i) {
      std::pair<absl::string_view, absl::string_view> setting = absl::StrSplit(fields[i], absl::MaxSplits('=', 1));
      if (setting.first == "initial_lr") {
        EXPECT_TRUE(absl::SimpleAtod(setting.second, &reference.initial_lr)) << line;
      } else if (absl::ConsumeSuffix(&setting.first, ":i")) {
        int64_t value = 0;
        EXPECT_TRUE(absl::SimpleAtoi(setting.second, &value)) << line;
        reference.state.values[std::string(setting.first)] = value;
      } else if (absl::ConsumeSuffix(&setting.first, ":f")) {
        double value = 0;
        EXPECT_TRUE(absl::SimpleAtod(setting.second, &value)) << line;
        reference.state.values[std::string(setting.first)] = static_cast<float>(value);  // Exact: written from float32.
      } else {
        ADD_FAILURE() << "bad field '" << fields[i] << "' in " << line;
      }
    }
    for (absl::string_view text : absl::StrSplit(halves[1], ' ')) {
      double value = 0;
      EXPECT_TRUE(absl::SimpleAtod(text, &value)) << line;
      reference.learning_rates.push_back(value);
    }
    cases.push_back(std::move(reference));
  }
  return cases;
}

TEST(LearningRateSchedulerTest, MatchesTorchLrSchedulers) {
  const std::vector<ReferenceCase> cases = ReadReference();
  ASSERT_EQ(cases.size(), 10u);  // Every case of make_lr_reference.py, so none is silently dropped.
  std::set<std::string> kinds;
  for (const ReferenceCase& reference : cases) {
    SCOPED_TRACE(reference.line);
    kinds.insert(reference.state.kind);
    auto scheduler = LearningRateScheduler::FromState(reference.state);
    ASSERT_TRUE(scheduler.ok()) << scheduler.status();
    ASSERT_GT(reference.learning_rates.size(), 10u);
    for (size_t n = 0; n < reference.learning_rates.size(); ++n) {
      const double expected = reference.learning_rates[n];
      auto multiplier = scheduler->Multiplier(static_cast<int64_t>(n));
      ASSERT_TRUE(multiplier.ok()) << multiplier.status();
      // Both sides compute in double; only the last bits of cos / pow may differ.
      EXPECT_NEAR(reference.initial_lr * *multiplier, expected, 1e-12 * std::abs(expected) + 1e-18) << "step " << n;
      auto lr = scheduler->LearningRate(static_cast<int64_t>(n), static_cast<float>(reference.initial_lr));
      ASSERT_TRUE(lr.ok()) << lr.status();
      EXPECT_EQ(*lr, static_cast<float>(expected)) << "step " << n;
    }
  }
  EXPECT_EQ(kinds, (std::set<std::string>{kLinearWarmupDecaySchedule, kConstantWithWarmupSchedule,
                                          kCosineWithWarmupSchedule, kStepSchedule}));
}

TEST(LearningRateSchedulerTest, StateRoundTripsThroughACheckpoint) {
  std::vector<LearningRateScheduler> schedulers = {
      *LearningRateScheduler::LinearWarmupDecay(5, 100), *LearningRateScheduler::ConstantWithWarmup(7),
      *LearningRateScheduler::CosineWithWarmup(10, 200, 1.5f, 0.1f), *LearningRateScheduler::Step(30, 0.1f)};
  const std::string path = std::string(std::getenv("TEST_TMPDIR")) + "/scheduler_checkpoint";
  for (const LearningRateScheduler& scheduler : schedulers) {
    SCOPED_TRACE(scheduler.kind());
    CheckpointState state;
    state.optimizer.emplace();  // The scheduler is saved with the optimizer section.
    state.scheduler = scheduler.ToState();
    ASSERT_TRUE(SaveCheckpoint(path, state).ok());
    auto loaded = LoadCheckpoint(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    auto restored = LearningRateScheduler::FromState(loaded->scheduler);
    ASSERT_TRUE(restored.ok()) << restored.status();
    EXPECT_EQ(restored->kind(), scheduler.kind());
    for (int64_t n : {0, 1, 4, 5, 6, 29, 30, 99, 150, 250}) {
      EXPECT_EQ(*restored->LearningRate(n, 0.01f), *scheduler.LearningRate(n, 0.01f)) << "step " << n;
    }
  }
}

TEST(LearningRateSchedulerTest, FactoriesUseHuggingFaceDefaults) {
  auto cosine = LearningRateScheduler::CosineWithWarmup(0, 10);
  ASSERT_TRUE(cosine.ok()) << cosine.status();
  // num_cycles 0.5 and no floor: half a cosine from 1 down to exactly 0 at total_steps.
  EXPECT_DOUBLE_EQ(*cosine->Multiplier(0), 1.0);
  EXPECT_NEAR(*cosine->Multiplier(5), 0.5, 1e-15);
  EXPECT_NEAR(*cosine->Multiplier(10), 0.0, 1e-15);
}

void ExpectInvalid(const absl::StatusOr<LearningRateScheduler>& scheduler, const std::string& message_part) {
  ASSERT_FALSE(scheduler.ok()) << "accepted; expected an error about " << message_part;
  EXPECT_EQ(scheduler.status().code(), absl::StatusCode::kInvalidArgument) << scheduler.status();
  EXPECT_THAT(std::string(scheduler.status().message()), HasSubstr(message_part));
}

TEST(LearningRateSchedulerTest, BadSettingsAreRefusedWithTheirName) {
  ExpectInvalid(LearningRateScheduler::LinearWarmupDecay(-1, 10), "'warmup_steps' must be >= 0");
  ExpectInvalid(LearningRateScheduler::LinearWarmupDecay(0, 0), "'total_steps' must be > 0");
  ExpectInvalid(LearningRateScheduler::LinearWarmupDecay(11, 10), "must not exceed total_steps");
  ExpectInvalid(LearningRateScheduler::ConstantWithWarmup(-3), "'warmup_steps'");
  ExpectInvalid(LearningRateScheduler::CosineWithWarmup(0, 10, 0.0f), "'num_cycles' must be > 0");
  ExpectInvalid(LearningRateScheduler::CosineWithWarmup(0, 10, 0.5f, 1.5f), "'min_lr_rate' must be in [0, 1]");
  ExpectInvalid(LearningRateScheduler::CosineWithWarmup(0, 10, NAN), "'num_cycles' must be finite");
  ExpectInvalid(LearningRateScheduler::Step(0, 0.5f), "'step_size' must be > 0");
  ExpectInvalid(LearningRateScheduler::Step(3, -0.5f), "'gamma' must be > 0");
  ExpectInvalid(LearningRateScheduler::Step(3, INFINITY), "'gamma' must be finite");
}

TEST(LearningRateSchedulerTest, MalformedStatesAreRefused) {
  ExpectInvalid(LearningRateScheduler::FromState({"exponential", {}}), "unknown learning-rate scheduler 'exponential'");
  ExpectInvalid(LearningRateScheduler::FromState({"", {}}), "unknown learning-rate scheduler ''");
  ExpectInvalid(LearningRateScheduler::FromState({kStepSchedule, {{"step_size", int64_t{3}}}}), "'gamma' is missing");
  ExpectInvalid(LearningRateScheduler::FromState({kStepSchedule, {{"step_size", 3.0f}, {"gamma", 0.5f}}}),
                "'step_size' must be an int64");
  ExpectInvalid(
      LearningRateScheduler::FromState({kStepSchedule, {{"step_size", int64_t{3}}, {"gamma", std::string("half")}}}),
      "'gamma' must be a float");
  ExpectInvalid(LearningRateScheduler::FromState(
                    {kConstantWithWarmupSchedule, {{"warmup_steps", int64_t{3}}, {"total_steps", int64_t{9}}}}),
                "'total_steps' is not a setting of this scheduler");
}

TEST(LearningRateSchedulerTest, NegativeStepIsAnError) {
  auto scheduler = LearningRateScheduler::Step(2, 0.5f);
  ASSERT_TRUE(scheduler.ok());
  EXPECT_EQ(scheduler->Multiplier(-1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(scheduler->LearningRate(-1, 0.1f).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace traind::engine
