#include "engine/training/optimizer.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace traind::engine {
namespace {

absl::Status CheckUpdate(const ParameterUpdate& update) {
  if (update.data == nullptr || update.gradient == nullptr || update.state == nullptr) {
    return absl::InvalidArgumentError("incomplete parameter update");
  }
  if (update.data->dtype() != DataType::kFloat32 || update.gradient->dtype() != DataType::kFloat32) {
    return absl::UnimplementedError("optimizers update float32 parameters only");
  }
  if (update.data->shape() != update.gradient->shape()) {
    return absl::InvalidArgumentError(absl::StrCat("gradient ", update.gradient->DebugString(),
                                                   " does not match parameter ", update.data->DebugString()));
  }
  // The updates write the parameter in place while reading the gradient (distinct tensors, see optimizer.h).
  if (update.data->raw_data() == update.gradient->raw_data()) {
    return absl::InvalidArgumentError("a gradient shares its parameter's buffer");
  }
  return absl::OkStatus();
}

// The named state tensor of `update`, zero-filled on first use.
absl::StatusOr<float*> State(const ParameterUpdate& update, const std::string& name) {
  auto it = update.state->find(name);
  if (it == update.state->end()) {
    absl::StatusOr<Tensor> zeros = Tensor::Allocate(DataType::kFloat32, update.data->shape());
    if (!zeros.ok()) return zeros.status();
    it = update.state->emplace(name, *zeros).first;
  }
  if (it->second.shape() != update.data->shape() || it->second.dtype() != DataType::kFloat32) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer state '", name, "' does not match its parameter"));
  }
  if (it->second.raw_data() == update.data->raw_data() || it->second.raw_data() == update.gradient->raw_data()) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer state '", name, "' shares a buffer with its parameter"));
  }
  return it->second.mutable_data<float>();
}

}  // namespace

bool AllFinite(const std::vector<ParameterUpdate>& updates) {
  for (const ParameterUpdate& update : updates) {
    const float* gradient = update.gradient->data<float>();
    for (int64_t i = 0; i < update.gradient->num_elements(); ++i) {
      if (!std::isfinite(gradient[i])) return false;
    }
  }
  return true;
}

AdamWStepScalars MakeAdamWStepScalars(const AdamWOptions& options, int64_t step) {
  const double bias1 = options.bias_correction ? 1.0 - std::pow(static_cast<double>(options.beta1), step) : 1.0;
  const double bias2 = options.bias_correction ? 1.0 - std::pow(static_cast<double>(options.beta2), step) : 1.0;
  AdamWStepScalars s;
  s.beta1 = options.beta1;
  s.one_minus_beta1 = 1.0f - options.beta1;
  s.beta2 = options.beta2;
  s.one_minus_beta2 = 1.0f - options.beta2;
  s.eps = options.eps;
  s.decay = 1.0f - options.lr * options.weight_decay;
  s.step_size = static_cast<float>(options.lr / bias1);
  s.bias2_sqrt = static_cast<float>(std::sqrt(bias2));
  return s;
}

absl::Status AdamWStep(const AdamWOptions& options, int64_t step, std::vector<ParameterUpdate>& updates) {
  if (step < 1) return absl::InvalidArgumentError("AdamW steps count from 1");
  const AdamWStepScalars scalars = MakeAdamWStepScalars(options, step);
  for (const ParameterUpdate& update : updates) {
    if (absl::Status status = CheckUpdate(update); !status.ok()) return status;
    absl::StatusOr<float*> m = State(update, "momentum0");
    if (!m.ok()) return m.status();
    absl::StatusOr<float*> v = State(update, "momentum1");
    if (!v.ok()) return v.status();
    float* p = update.data->mutable_data<float>();
    AdamWUpdate(scalars, 1.0f, p, update.gradient->data<float>(), *m, *v, 0, update.data->num_elements());
  }
  return absl::OkStatus();
}

// torch.optim.SGD (1.13): g += wd*p; buf = g on the first step, else momentum*buf + (1-dampening)*g;
// g = g + momentum*buf (Nesterov) or buf; p -= lr*g.
absl::Status SgdStep(const SgdOptions& options, int64_t step, std::vector<ParameterUpdate>& updates) {
  if (options.nesterov && (options.momentum <= 0.0f || options.dampening != 0.0f)) {
    return absl::InvalidArgumentError("Nesterov momentum requires momentum > 0 and zero dampening");
  }
  for (const ParameterUpdate& update : updates) {
    if (absl::Status status = CheckUpdate(update); !status.ok()) return status;
    float* buffer = nullptr;
    if (options.momentum != 0.0f) {
      absl::StatusOr<float*> state = State(update, "momentum0");
      if (!state.ok()) return state.status();
      buffer = *state;
    }
    float* p = update.data->mutable_data<float>();
    SgdUpdate(options, step == 1, 1.0f, p, update.gradient->data<float>(), buffer, 0, update.data->num_elements());
  }
  return absl::OkStatus();
}

}  // namespace traind::engine
