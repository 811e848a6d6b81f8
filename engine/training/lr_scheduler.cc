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
  static const auto* const kNone = new std::set<std::string>{};
  static const auto* const kInverseScaling = new std::set<std::string>{"power_t", "offset", "scale", "interval"};
  static const auto* const kOptimal = new std::set<std::string>{"alpha", "scale"};
  static const auto* const kAdaptive = new std::set<std::string>{
      "patience", "tol", "factor", "min_lr", "multiplier", "best", "has_best", "bad_evaluations"};
  if (kind == kConstantSchedule) return kNone;
  if (kind == kInverseScalingSchedule) return kInverseScaling;
  if (kind == kOptimalSchedule) return kOptimal;
  if (kind == kAdaptiveSchedule) return kAdaptive;
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

absl::StatusOr<LearningRateScheduler> LearningRateScheduler::Constant() { return FromState({kConstantSchedule, {}}); }

absl::StatusOr<LearningRateScheduler> LearningRateScheduler::InverseScaling(float power_t, float offset, float scale,
                                                                            int64_t interval) {
  return FromState({kInverseScalingSchedule,
                    {{"power_t", power_t}, {"offset", offset}, {"scale", scale}, {"interval", interval}}});
}

absl::StatusOr<LearningRateScheduler> LearningRateScheduler::Optimal(float alpha, float scale) {
  return FromState({kOptimalSchedule, {{"alpha", alpha}, {"scale", scale}}});
}

absl::StatusOr<LearningRateScheduler> LearningRateScheduler::Adaptive(int64_t patience, float tol, float factor,
                                                                      float min_lr) {
  return FromState({kAdaptiveSchedule,
                    {{"patience", patience},
                     {"tol", tol},
                     {"factor", factor},
                     {"min_lr", min_lr},
                     {"multiplier", 1.0f},
                     {"best", 0.0f},
                     {"has_best", int64_t{0}},
                     {"bad_evaluations", int64_t{0}}}});
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
                     kConstantWithWarmupSchedule, ", ", kCosineWithWarmupSchedule, ", ", kStepSchedule, ", ",
                     kConstantSchedule, ", ", kInverseScalingSchedule, ", ", kOptimalSchedule, ", ",
                     kAdaptiveSchedule, ")"));
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

  if (state_.kind == kConstantSchedule) return absl::OkStatus();
  if (state_.kind == kInverseScalingSchedule) {
    TRAIND_ASSIGN_OR_RETURN(power_t_, FloatSetting(state_, "power_t"));
    TRAIND_ASSIGN_OR_RETURN(offset_, FloatSetting(state_, "offset"));
    TRAIND_ASSIGN_OR_RETURN(scale_, FloatSetting(state_, "scale"));
    TRAIND_ASSIGN_OR_RETURN(interval_, IntSetting(state_, "interval"));
    if (power_t_ < 0) return SettingError(state_, "power_t", absl::StrCat("must be >= 0, got ", power_t_));
    if (!(offset_ > 0)) return SettingError(state_, "offset", absl::StrCat("must be > 0, got ", offset_));
    if (!(scale_ > 0)) return SettingError(state_, "scale", absl::StrCat("must be > 0, got ", scale_));
    if (interval_ < 1) return SettingError(state_, "interval", absl::StrCat("must be >= 1, got ", interval_));
    return absl::OkStatus();
  }
  if (state_.kind == kOptimalSchedule) {
    TRAIND_ASSIGN_OR_RETURN(alpha_, FloatSetting(state_, "alpha"));
    TRAIND_ASSIGN_OR_RETURN(scale_, FloatSetting(state_, "scale"));
    if (!(alpha_ > 0)) return SettingError(state_, "alpha", absl::StrCat("must be > 0, got ", alpha_));
    if (!(scale_ > 0)) return SettingError(state_, "scale", absl::StrCat("must be > 0, got ", scale_));
    return absl::OkStatus();
  }
  if (state_.kind == kAdaptiveSchedule) {
    TRAIND_ASSIGN_OR_RETURN(patience_, IntSetting(state_, "patience"));
    TRAIND_ASSIGN_OR_RETURN(tol_, FloatSetting(state_, "tol"));
    TRAIND_ASSIGN_OR_RETURN(factor_, FloatSetting(state_, "factor"));
    TRAIND_ASSIGN_OR_RETURN(min_lr_, FloatSetting(state_, "min_lr"));
    TRAIND_ASSIGN_OR_RETURN(multiplier_, FloatSetting(state_, "multiplier"));
    TRAIND_ASSIGN_OR_RETURN(best_, FloatSetting(state_, "best"));
    TRAIND_ASSIGN_OR_RETURN(const int64_t has_best, IntSetting(state_, "has_best"));
    TRAIND_ASSIGN_OR_RETURN(bad_evaluations_, IntSetting(state_, "bad_evaluations"));
    if (patience_ < 1) return SettingError(state_, "patience", absl::StrCat("must be >= 1, got ", patience_));
    if (!(factor_ > 0 && factor_ < 1)) {
      return SettingError(state_, "factor", absl::StrCat("must lie in (0, 1), got ", factor_));
    }
    if (min_lr_ < 0) return SettingError(state_, "min_lr", absl::StrCat("must be >= 0, got ", min_lr_));
    if (multiplier_ < 0 || multiplier_ > 1) {
      return SettingError(state_, "multiplier", absl::StrCat("must lie in [0, 1], got ", multiplier_));
    }
    if (has_best != 0 && has_best != 1) return SettingError(state_, "has_best", "must be 0 or 1");
    if (bad_evaluations_ < 0) return SettingError(state_, "bad_evaluations", "must be >= 0");
    has_best_ = has_best == 1;
    return absl::OkStatus();
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
  if (state_.kind == kConstantSchedule) return 1.0;
  if (state_.kind == kInverseScalingSchedule) {
    return std::pow(offset_ + scale_ * static_cast<double>(n / interval_), -power_t_);
  }
  if (state_.kind == kOptimalSchedule) {
    const double t0 = std::pow(alpha_, -0.75);
    return 1.0 / (alpha_ * (t0 + scale_ * static_cast<double>(n)));
  }
  if (state_.kind == kAdaptiveSchedule) return multiplier_;
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
  if (state_.kind == kOptimalSchedule) return static_cast<float>(multiplier);
  return static_cast<float>(static_cast<double>(initial_learning_rate) * multiplier);
}

absl::StatusOr<PlateauOutcome> LearningRateScheduler::ObserveMetric(double metric, float learning_rate) {
  if (!takes_metric()) {
    return absl::FailedPreconditionError(
        absl::StrCat("learning-rate scheduler '", state_.kind, "' does not take a metric (only '",
                     kAdaptiveSchedule, "' does)"));
  }
  if (!std::isfinite(metric)) {
    return absl::InvalidArgumentError(absl::StrCat("the metric must be finite, got ", metric));
  }
  // Stored as float: compare what is stored.
  const double observed = static_cast<float>(metric);
  PlateauOutcome outcome;
  bad_evaluations_ = has_best_ && observed > best_ - tol_ ? bad_evaluations_ + 1 : 0;
  if (!has_best_ || observed < best_) {
    best_ = observed;
    has_best_ = true;
  }
  if (bad_evaluations_ >= patience_) {
    if (learning_rate > min_lr_) {
      multiplier_ = static_cast<float>(multiplier_ * factor_);
      bad_evaluations_ = 0;
      outcome.reduced = true;
    } else {
      outcome.stalled = true;
    }
  }
  outcome.bad_evaluations = bad_evaluations_;
  state_.values["multiplier"] = static_cast<float>(multiplier_);
  state_.values["best"] = static_cast<float>(best_);
  state_.values["has_best"] = int64_t{has_best_ ? 1 : 0};
  state_.values["bad_evaluations"] = bad_evaluations_;
  return outcome;
}

}  // namespace traind::engine
