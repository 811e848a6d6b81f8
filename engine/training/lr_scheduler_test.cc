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

// scikit-learn's schedules, against its formulas (sklearn/linear_model/_sgd_fast.pyx, 1.2.1):
//   invscaling: eta = eta0 / pow(t, power_t), t the 1-based count of examples seen;
//   optimal:    eta = 1 / (alpha * (optimal_init + t - 1)), optimal_init = 1 / (alpha * alpha^(-1/4)).
TEST(SklearnSchedulesTest, InverseScalingAndOptimalFollowScikitLearnsFormulas) {
  absl::StatusOr<LearningRateScheduler> per_example = LearningRateScheduler::InverseScaling(0.25f, 1.0f, 1.0f, 1);
  ASSERT_TRUE(per_example.ok()) << per_example.status();
  for (int64_t n : {0, 1, 7, 1000}) {
    EXPECT_NEAR(*per_example->LearningRate(n, 0.01f), 0.01 / std::pow(double(n + 1), 0.25), 1e-9) << n;  // float
  }
  // Batches of 32 examples: t advances by 32 a step. MLP's per-epoch form: 100 examples in 4 steps an epoch.
  absl::StatusOr<LearningRateScheduler> batches = LearningRateScheduler::InverseScaling(0.5f, 1.0f, 32.0f, 1);
  EXPECT_NEAR(*batches->LearningRate(3, 0.1f), 0.1 / std::sqrt(1.0 + 96.0), 1e-8);
  absl::StatusOr<LearningRateScheduler> epochs = LearningRateScheduler::InverseScaling(0.5f, 1.0f, 100.0f, 4);
  EXPECT_NEAR(*epochs->LearningRate(3, 0.1f), 0.1, 1e-8);
  EXPECT_NEAR(*epochs->LearningRate(4, 0.1f), 0.1 / std::sqrt(101.0), 1e-8);
  EXPECT_NEAR(*epochs->LearningRate(9, 0.1f), 0.1 / std::sqrt(201.0), 1e-8);

  absl::StatusOr<LearningRateScheduler> optimal = LearningRateScheduler::Optimal(1e-4f, 1.0f);
  ASSERT_TRUE(optimal.ok()) << optimal.status();
  const double alpha = static_cast<double>(1e-4f);
  const double optimal_init = 1.0 / (alpha * std::sqrt(1.0 / std::sqrt(alpha)));
  for (int64_t n : {0, 1, 99, 100000}) {
    // The initial learning rate does not matter.
    EXPECT_NEAR(*optimal->LearningRate(n, 123.0f), 1.0 / (alpha * (optimal_init + double(n))),
                1e-6 / (alpha * (optimal_init + double(n))))
        << n;
  }
  EXPECT_NEAR(*optimal->LearningRate(0, 0.0f), std::pow(alpha, -0.25), 1e-3);  // Bottou: eta0 = typw
  EXPECT_EQ(*LearningRateScheduler::Constant()->LearningRate(12345, 0.5f), 0.5f);

  // Round trip through the checkpoint's SchedulerState, and bad settings named.
  absl::StatusOr<LearningRateScheduler> restored = LearningRateScheduler::FromState(epochs->ToState());
  ASSERT_TRUE(restored.ok());
  EXPECT_EQ(*restored->LearningRate(9, 0.1f), *epochs->LearningRate(9, 0.1f));
  EXPECT_THAT(std::string(LearningRateScheduler::InverseScaling(0.5f, 0.0f, 1.0f, 1).status().message()),
              HasSubstr("'offset' must be > 0"));
  EXPECT_THAT(std::string(LearningRateScheduler::Optimal(0.0f, 1.0f).status().message()),
              HasSubstr("'alpha' must be > 0"));
  EXPECT_FALSE(optimal->takes_metric());
  EXPECT_EQ(optimal->ObserveMetric(1.0, 1.0f).status().code(), absl::StatusCode::kFailedPrecondition);
}

// 'adaptive' as scikit-learn's SGD loop and MLP's _update_no_improvement_count drive it: a metric no better than
// best - tol counts as a bad epoch; `patience` of them in a row divide the rate by 5 while it is above 1e-6, after
// which the schedule stalls (where scikit-learn stops).
TEST(SklearnSchedulesTest, AdaptiveDividesByFiveThenStalls) {
  absl::StatusOr<LearningRateScheduler> adaptive = LearningRateScheduler::Adaptive(2, 0.1f, 0.2f, 1e-6f);
  ASSERT_TRUE(adaptive.ok()) << adaptive.status();
  ASSERT_TRUE(adaptive->takes_metric());
  float lr = *adaptive->LearningRate(0, 0.5f);
  EXPECT_EQ(lr, 0.5f);
  struct Expected {
    double metric;
    int64_t bad;
    bool reduced;
    double multiplier;
  };
  const std::vector<Expected> epochs = {
      {1.0, 0, false, 1.0},   // the first metric is the best so far
      {0.95, 1, false, 1.0},  // better, but not by more than tol
      {0.5, 0, false, 1.0},   // improves by more than tol
      {0.45, 1, false, 1.0},
      {0.47, 0, true, 0.2},   // the second bad epoch: divided by 5, the count starts again
      {0.46, 1, false, 0.2},
      {0.44, 0, true, 0.04},
  };
  for (const Expected& epoch : epochs) {
    absl::StatusOr<PlateauOutcome> outcome = adaptive->ObserveMetric(epoch.metric, lr);
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    EXPECT_EQ(outcome->bad_evaluations, epoch.bad) << epoch.metric;
    EXPECT_EQ(outcome->reduced, epoch.reduced) << epoch.metric;
    EXPECT_FALSE(outcome->stalled);
    lr = *adaptive->LearningRate(0, 0.5f);
    EXPECT_NEAR(lr, 0.5 * epoch.multiplier, 1e-7) << epoch.metric;
  }
  // The progress survives a checkpoint.
  absl::StatusOr<LearningRateScheduler> restored = LearningRateScheduler::FromState(adaptive->ToState());
  ASSERT_TRUE(restored.ok()) << restored.status();
  EXPECT_EQ(*restored->LearningRate(7, 0.5f), lr);
  // At the floor: no more reductions, the schedule stalls.
  absl::StatusOr<LearningRateScheduler> floor = LearningRateScheduler::Adaptive(1, 0.0f, 0.2f, 1e-6f);
  ASSERT_TRUE(floor->ObserveMetric(1.0, 1e-6f).ok());
  absl::StatusOr<PlateauOutcome> stalled = floor->ObserveMetric(1.1, 1e-6f);
  ASSERT_TRUE(stalled.ok());
  EXPECT_TRUE(stalled->stalled);
  EXPECT_FALSE(stalled->reduced);
  EXPECT_EQ(floor->ObserveMetric(std::nan(""), 1.0f).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(LearningRateScheduler::Adaptive(0, 0.1f, 0.2f, 0.0f).status().message()),
              HasSubstr("'patience' must be >= 1"));
  EXPECT_THAT(std::string(LearningRateScheduler::Adaptive(1, 0.1f, 1.0f, 0.0f).status().message()),
              HasSubstr("'factor' must lie in (0, 1)"));
}

}  // namespace
}  // namespace traind::engine
