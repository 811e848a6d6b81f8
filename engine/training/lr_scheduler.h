// Learning-rate schedulers with ONNX Runtime's training-API semantics (orttraining/training_api/lr_scheduler.h):
// a scheduler is a pure function of the number of optimizer steps taken so far, multiplying the optimizer's
// initial learning rate. After n steps the learning rate is initial * Multiplier(n), which is what
// torch.optim.lr_scheduler.LambdaLR gives after n calls of scheduler.step() (and Multiplier(0) applies before the
// first step, as LambdaLR's constructor does).
//
// Kinds (SchedulerState::kind) and their settings (SchedulerState::values, every key required, no others):
//   "linear_warmup_decay"   ORT's LinearLRScheduler = HF get_linear_schedule_with_warmup:
//                           n < warmup_steps: n / max(1, warmup_steps);
//                           else max(0, (total_steps - n) / max(1, total_steps - warmup_steps)).
//                           warmup_steps: int64 >= 0, total_steps: int64 > 0, warmup_steps <= total_steps.
//   "constant_with_warmup"  HF get_constant_schedule_with_warmup: n < warmup_steps ? n / warmup_steps : 1.
//                           warmup_steps: int64 >= 0.
//   "cosine_with_warmup"    HF get_cosine_schedule_with_warmup (with get_cosine_with_min_lr_schedule_with_warmup's
//                           floor): linear warm-up, then with progress p = (n - warmup_steps) /
//                           max(1, total_steps - warmup_steps):
//                           max(0, min_lr_rate + (1 - min_lr_rate) * 0.5 * (1 + cos(pi * num_cycles * 2 * p))).
//                           warmup_steps: int64 >= 0, total_steps: int64 > 0, warmup_steps <= total_steps,
//                           num_cycles: float > 0 (HF's default 0.5 decays once to the floor), min_lr_rate: float
//                           in [0, 1] (the floor as a fraction of the initial learning rate; 0 = HF's default).
//   "step"                  torch.optim.lr_scheduler.StepLR: gamma ^ floor(n / step_size).
//                           step_size: int64 > 0, gamma: float, finite and > 0.
// scikit-learn's schedules (sklearn/linear_model/_sgd_fast.pyx and sklearn/neural_network/_stochastic_optimizers.py,
// 1.2), for traind_client.sklearn:
//   "constant"              1 (no settings).
//   "inverse_scaling"       (offset + scale * floor(n / interval)) ^ -power_t. SGD's 'invscaling' is offset 1,
//                           scale = examples per step, interval 1 (eta0 / t^power_t, t the 1-based example count);
//                           MLP's is offset 1, scale = examples per epoch, interval = steps per epoch (the rate
//                           changes after each epoch). power_t: float >= 0; offset, scale: float > 0; interval:
//                           int64 >= 1.
//   "optimal"               SGD's 'optimal': the rate itself (the initial learning rate is ignored) is
//                           1 / (alpha * (t0 + scale * n)) with t0 = alpha^(-3/4) (Bottou's heuristic as scikit-learn
//                           computes it: eta at the first example is alpha^(-1/4)). alpha, scale: float > 0.
//   "adaptive"              SGD's and MLP's 'adaptive': not a function of the step but of a metric observed after
//                           each epoch (ObserveMetric: the training loss, or minus a validation score). The multiplier
//                           starts at 1; when `patience` observations in a row fail to improve on the best one by
//                           more than tol, it is multiplied by `factor` (scikit-learn: 1/5) if the rate is still
//                           above min_lr, else the schedule reports that it has stalled (where scikit-learn stops).
//                           patience: int64 >= 1, tol: float, factor: float in (0, 1), min_lr: float >= 0. Its
//                           progress lives in the state too: multiplier (float in [0, 1]), best (float),
//                           has_best (int64 0/1), bad_evaluations (int64 >= 0).
// Settings are validated when a scheduler is made (from its settings or from a checkpoint's SchedulerState);
// errors are kInvalidArgument and name the kind and the setting.
#ifndef TRAIND_ENGINE_TRAINING_LR_SCHEDULER_H_
#define TRAIND_ENGINE_TRAINING_LR_SCHEDULER_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "engine/training/checkpoint.h"

namespace traind::engine {

inline constexpr const char* kLinearWarmupDecaySchedule = "linear_warmup_decay";
inline constexpr const char* kConstantWithWarmupSchedule = "constant_with_warmup";
inline constexpr const char* kCosineWithWarmupSchedule = "cosine_with_warmup";
inline constexpr const char* kStepSchedule = "step";
inline constexpr const char* kConstantSchedule = "constant";
inline constexpr const char* kInverseScalingSchedule = "inverse_scaling";
inline constexpr const char* kOptimalSchedule = "optimal";
inline constexpr const char* kAdaptiveSchedule = "adaptive";

// What an "adaptive" schedule did with an observed metric.
struct PlateauOutcome {
  bool reduced = false;  // the multiplier was just lowered
  bool stalled = false;  // no improvement for `patience` observations and the rate is at its floor
  int64_t bad_evaluations = 0;
};

class LearningRateScheduler {
 public:
  static absl::StatusOr<LearningRateScheduler> LinearWarmupDecay(int64_t warmup_steps, int64_t total_steps);
  static absl::StatusOr<LearningRateScheduler> ConstantWithWarmup(int64_t warmup_steps);
  static absl::StatusOr<LearningRateScheduler> CosineWithWarmup(int64_t warmup_steps, int64_t total_steps,
                                                                float num_cycles = 0.5f, float min_lr_rate = 0.0f);
  static absl::StatusOr<LearningRateScheduler> Step(int64_t step_size, float gamma);
  static absl::StatusOr<LearningRateScheduler> Constant();
  static absl::StatusOr<LearningRateScheduler> InverseScaling(float power_t, float offset, float scale,
                                                              int64_t interval);
  static absl::StatusOr<LearningRateScheduler> Optimal(float alpha, float scale);
  static absl::StatusOr<LearningRateScheduler> Adaptive(int64_t patience, float tol, float factor, float min_lr);

  // The inverse of ToState(). An empty kind is not a scheduler (the caller checks for it).
  static absl::StatusOr<LearningRateScheduler> FromState(const SchedulerState& state);
  // What CheckpointState::scheduler stores: enough to rebuild an identical scheduler.
  const SchedulerState& ToState() const { return state_; }

  const std::string& kind() const { return state_.kind; }

  // The factor applied to the initial learning rate once `completed_steps` optimizer steps have been taken
  // ("optimal": the rate itself). kInvalidArgument for a negative step count. Computed in double precision, like
  // the Python references.
  absl::StatusOr<double> Multiplier(int64_t completed_steps) const;
  // initial_learning_rate * Multiplier(completed_steps) ("optimal": Multiplier alone), rounded to float.
  absl::StatusOr<float> LearningRate(int64_t completed_steps, float initial_learning_rate) const;
  // Whether ObserveMetric applies ("adaptive").
  bool takes_metric() const { return state_.kind == kAdaptiveSchedule; }
  // "adaptive": records a metric (lower is better) and moves the schedule as its comment above says; the state
  // (ToState) then holds the new progress. `learning_rate` is the rate now (compared with min_lr).
  // FailedPrecondition for the other kinds, InvalidArgument for a non-finite metric.
  absl::StatusOr<PlateauOutcome> ObserveMetric(double metric, float learning_rate);

 private:
  explicit LearningRateScheduler(SchedulerState state);
  // Reads and checks the settings of state_ into the fields below.
  absl::Status Parse();

  SchedulerState state_;
  int64_t warmup_steps_ = 0;
  int64_t total_steps_ = 0;
  int64_t step_size_ = 0;
  double num_cycles_ = 0.5;
  double min_lr_rate_ = 0.0;
  double gamma_ = 1.0;
  double power_t_ = 0.0, offset_ = 1.0, scale_ = 1.0, alpha_ = 0.0;
  int64_t interval_ = 1;
  // "adaptive".
  int64_t patience_ = 1, bad_evaluations_ = 0;
  double tol_ = 0.0, factor_ = 0.2, min_lr_ = 0.0, multiplier_ = 1.0, best_ = 0.0;
  bool has_best_ = false;
};

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_TRAINING_LR_SCHEDULER_H_
