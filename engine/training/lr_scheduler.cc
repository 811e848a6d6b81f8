#include "engine/training/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/status_macros.h"

namespace traind::engine {
namespace {

constexpr double kPi = 3.14159265358979323846;

// The settings each kind requires (and the only ones it accepts).
const std::set<std::string>* RequiredSettings(const std::string& kind) {
  static const auto* const kLinear = new std::set<std::string>{"warmup_steps", "total_steps"};
  static const auto* const kConstant = new std::set<std::string>{"warmup_steps"};
  static const auto* const kCosine =
      new std::set<std::string>{"warmup_steps", "total_steps", "num_cycles", "min_lr_rate"};
  static const auto* const kStep = new std::set<std::string>{"step_size", "gamma"};
  if (kind == kLinearWarmupDecaySchedule) return kLinear;
  if (kind == kConstantWithWarmupSchedule) return kConstant;
  if (kind == kCosineWithWarmupSchedule) return kCosine;
  if (kind == kStepSchedule) return kStep;
  return nullptr;
}

absl::Status SettingError(const SchedulerState& state, const std::string& name, const std::string& problem) {
  return absl::InvalidArgumentError(
      absl::StrCat("learning-rate scheduler '", state.kind, "': setting '", name, "' ", problem));
}

absl::StatusOr<int64_t> IntSetting(const SchedulerState& state, const std::string& name) {
  const int64_t* value = std::get_if<int64_t>(&state.values.at(name));
  if (value == nullptr) return SettingError(state, name, "must be an int64");
  return *value;
}

absl::StatusOr<double> FloatSetting(const SchedulerState& state, const std::string& name) {
  const float* value = std::get_if<float>(&state.values.at(name));
  if (value == nullptr) return SettingError(state, name, "must be a float");
  if (!std::isfinite(*value)) return SettingError(state, name, absl::StrCat("must be finite, got ", *value));
  return static_cast<double>(*value);
}

// The part of the linear and cosine schedules before the decay starts: 0 -> 1 over warmup_steps.
double WarmupFraction(int64_t step, int64_t warmup_steps) {
  return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup_steps));
}

}  // namespace

LearningRateScheduler::LearningRateScheduler(SchedulerState state) : state_(std::move(state)) {}

absl::StatusOr<LearningRateScheduler> LearningRateScheduler::LinearWarmupDecay(int64_t warmup_steps,
                                                                               int64_t total_steps) {
  return FromState({kLinearWarmupDecaySchedule, {{"warmup_steps", warmup_steps}, {"total_steps", total_steps}}});
}

absl::StatusOr<LearningRateScheduler> LearningRateScheduler::ConstantWithWarmup(int64_t warmup_steps) {
  return FromState({kConstantWithWarmupSchedule, {{"warmup_steps", warmup_steps}}});
}

absl::StatusOr<LearningRateScheduler> LearningRateScheduler::CosineWithWarmup(int64_t warmup_steps, int64_t total_steps,
                                                                              float num_cycles, float min_lr_rate) {
  return FromState({kCosineWithWarmupSchedule,
                    {{"warmup_steps", warmup_steps},
                     {"total_steps", total_steps},
                     {"num_cycles", num_cycles},
                     {"min_lr_rate", min_lr_rate}}});
}

absl::StatusOr<LearningRateScheduler> LearningRateScheduler::Step(int64_t step_size, float gamma) {
  return FromState({kStepSchedule, {{"step_size", step_size}, {"gamma", gamma}}});
}

absl::StatusOr<LearningRateScheduler> LearningRateScheduler::FromState(const SchedulerState& state) {
  LearningRateScheduler scheduler(state);
  TRAIND_RETURN_IF_ERROR(scheduler.Parse());
  return scheduler;
}

absl::Status LearningRateScheduler::Parse() {
  const std::set<std::string>* required = RequiredSettings(state_.kind);
  if (required == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown learning-rate scheduler '", state_.kind, "' (known: ", kLinearWarmupDecaySchedule, ", ",
                     kConstantWithWarmupSchedule, ", ", kCosineWithWarmupSchedule, ", ", kStepSchedule, ")"));
  }
  for (const std::string& name : *required) {
    if (state_.values.count(name) == 0) {
      return SettingError(state_, name, absl::StrCat("is missing (required: ", absl::StrJoin(*required, ", "), ")"));
    }
  }
  for (const auto& [name, value] : state_.values) {
    if (required->count(name) == 0) {
      return SettingError(
          state_, name,
          absl::StrCat("is not a setting of this scheduler (its settings: ", absl::StrJoin(*required, ", "), ")"));
    }
  }

  if (state_.kind == kStepSchedule) {
    TRAIND_ASSIGN_OR_RETURN(step_size_, IntSetting(state_, "step_size"));
    TRAIND_ASSIGN_OR_RETURN(gamma_, FloatSetting(state_, "gamma"));
    if (step_size_ <= 0) return SettingError(state_, "step_size", absl::StrCat("must be > 0, got ", step_size_));
    if (!(gamma_ > 0)) return SettingError(state_, "gamma", absl::StrCat("must be > 0, got ", gamma_));
    return absl::OkStatus();
  }

  TRAIND_ASSIGN_OR_RETURN(warmup_steps_, IntSetting(state_, "warmup_steps"));
  if (warmup_steps_ < 0) {
    return SettingError(state_, "warmup_steps", absl::StrCat("must be >= 0, got ", warmup_steps_));
  }
  if (state_.kind == kConstantWithWarmupSchedule) return absl::OkStatus();

  TRAIND_ASSIGN_OR_RETURN(total_steps_, IntSetting(state_, "total_steps"));
  if (total_steps_ <= 0) return SettingError(state_, "total_steps", absl::StrCat("must be > 0, got ", total_steps_));
  if (warmup_steps_ > total_steps_) {
    return SettingError(state_, "warmup_steps",
                        absl::StrCat("(", warmup_steps_, ") must not exceed total_steps (", total_steps_, ")"));
  }
  if (state_.kind == kLinearWarmupDecaySchedule) return absl::OkStatus();

  TRAIND_ASSIGN_OR_RETURN(num_cycles_, FloatSetting(state_, "num_cycles"));
  TRAIND_ASSIGN_OR_RETURN(min_lr_rate_, FloatSetting(state_, "min_lr_rate"));
  if (!(num_cycles_ > 0)) return SettingError(state_, "num_cycles", absl::StrCat("must be > 0, got ", num_cycles_));
  if (min_lr_rate_ < 0 || min_lr_rate_ > 1) {
    return SettingError(state_, "min_lr_rate", absl::StrCat("must be in [0, 1], got ", min_lr_rate_));
  }
  return absl::OkStatus();
}

absl::StatusOr<double> LearningRateScheduler::Multiplier(int64_t completed_steps) const {
  if (completed_steps < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("learning-rate scheduler '", state_.kind, "': negative step count ", completed_steps));
  }
  const int64_t n = completed_steps;
  if (state_.kind == kStepSchedule) {
    return std::pow(gamma_, static_cast<double>(n / step_size_));
  }
  if (n < warmup_steps_) return WarmupFraction(n, warmup_steps_);
  if (state_.kind == kConstantWithWarmupSchedule) return 1.0;
  const double decay_steps = static_cast<double>(std::max<int64_t>(1, total_steps_ - warmup_steps_));
  if (state_.kind == kLinearWarmupDecaySchedule) {
    return std::max(0.0, static_cast<double>(total_steps_ - n) / decay_steps);
  }
  // Cosine. Past total_steps the cosine keeps going (as in HF); with num_cycles 0.5 it rises again, which is
  // what the reference does too.
  const double progress = static_cast<double>(n - warmup_steps_) / decay_steps;
  const double cosine = 0.5 * (1.0 + std::cos(kPi * num_cycles_ * 2.0 * progress));
  return std::max(0.0, min_lr_rate_ + (1.0 - min_lr_rate_) * cosine);
}

absl::StatusOr<float> LearningRateScheduler::LearningRate(int64_t completed_steps, float initial_learning_rate) const {
  TRAIND_ASSIGN_OR_RETURN(const double multiplier, Multiplier(completed_steps));
  return static_cast<float>(static_cast<double>(initial_learning_rate) * multiplier);
}

}  // namespace traind::engine
