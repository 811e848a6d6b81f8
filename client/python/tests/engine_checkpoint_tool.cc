// The C++ engine's side of the checkpoint-format tests of the Python client (checkpoint_test.py):
//   engine_checkpoint_tool write FULL NOMINAL   writes the sample state below (and its nominal form) with the
//                                                engine's SaveCheckpoint
//   engine_checkpoint_tool copy IN OUT           LoadCheckpoint(IN), then SaveCheckpoint(OUT): a file the engine
//                                                parses and writes back unchanged is one it read completely
// The sample uses every feature of the format: each storable dtype but bfloat16, a gradient, a frozen
// parameter, a scalar, an empty tensor, a non-ASCII name, optimizer state, a scheduler and every property kind.
// checkpoint_test.py builds the same state in Python.
#include <cstdio>
#include <cstring>
#include <string>

#include "engine/training/checkpoint.h"

namespace traind::engine {
namespace {

template <typename T>
Tensor Filled(DataType dtype, Shape shape, T first, T step) {
  Tensor tensor = *Tensor::Allocate(dtype, std::move(shape));
  T* data = tensor.mutable_data<T>();
  for (int64_t i = 0; i < tensor.num_elements(); ++i) data[i] = static_cast<T>(first + step * static_cast<T>(i));
  return tensor;
}

CheckpointState SampleState() {
  CheckpointState state;
  Parameter w{"w", Filled<float>(DataType::kFloat32, {2, 3}, 0.5f, 0.25f), Tensor(), true};
  w.grad = Filled<float>(DataType::kFloat32, {2, 3}, -1.0f, 0.125f);
  state.parameters.push_back(w);
  state.parameters.push_back({"b", Filled<double>(DataType::kFloat64, {3}, 0.1, 0.2), Tensor(), true});
  state.parameters.push_back({"steps", Filled<int64_t>(DataType::kInt64, {}, -7, 0), Tensor(), false});
  Tensor mask = *Tensor::Allocate(DataType::kBool, {4});
  const uint8_t bits[4] = {1, 0, 1, 1};
  std::memcpy(mask.mutable_raw_data(), bits, sizeof bits);
  state.parameters.push_back({"mask", mask, Tensor(), false});
  Tensor half = *Tensor::Allocate(DataType::kFloat16, {2});
  half.mutable_data<Float16>()[0] = FloatToFloat16(1.5f);
  half.mutable_data<Float16>()[1] = FloatToFloat16(-2.0f);
  state.parameters.push_back({"half", half, Tensor(), true});
  state.parameters.push_back({"emb.\xc3\xbc", Filled<uint8_t>(DataType::kUint8, {2, 2}, 1, 3), Tensor(), false});
  state.parameters.push_back({"i32", Filled<int32_t>(DataType::kInt32, {3}, 100, -50), Tensor(), false});
  state.parameters.push_back({"empty", *Tensor::Allocate(DataType::kFloat32, {0, 4}), Tensor(), true});
  OptimizerState& optimizer = state.optimizer.emplace();
  optimizer.group = {7, 0.25f, 0.5f};
  optimizer.parameter_states["w"]["momentum0"] = Filled<float>(DataType::kFloat32, {2, 3}, 0.01f, 0.01f);
  optimizer.parameter_states["w"]["momentum1"] = Filled<float>(DataType::kFloat32, {2, 3}, 0.001f, 0.001f);
  optimizer.parameter_states["b"]["momentum0"] = Filled<double>(DataType::kFloat64, {3}, 1.0, -1.0);
  state.scheduler.kind = "linear_warmup_decay";
  state.scheduler.values = {{"warmup_steps", int64_t{2}}, {"total_steps", int64_t{10}}};
  state.properties = {{"epoch", int64_t{3}}, {"loss", 0.125f}, {"name", std::string("mnist")},
                      {"neg", int64_t{-5}}, {"Zeta", std::string("")}};
  return state;
}

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "engine_checkpoint_tool: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace
}  // namespace traind::engine

int main(int argc, char** argv) {
  using namespace traind::engine;
  const std::string command = argc > 1 ? argv[1] : "";
  if (command == "write" && argc == 4) {
    const CheckpointState state = SampleState();
    if (absl::Status saved = SaveCheckpoint(argv[2], state); !saved.ok()) return Fail(saved);
    CheckpointSaveOptions nominal;
    nominal.nominal = true;
    if (absl::Status saved = SaveCheckpoint(argv[3], state, nominal); !saved.ok()) return Fail(saved);
    return 0;
  }
  if (command == "copy" && argc == 4) {
    absl::StatusOr<CheckpointState> state = LoadCheckpoint(argv[2]);
    if (!state.ok()) return Fail(state.status());
    CheckpointSaveOptions options;
    options.nominal = !state->parameters.empty() && !state->parameters.front().data.defined();
    if (absl::Status saved = SaveCheckpoint(argv[3], *state, options); !saved.ok()) return Fail(saved);
    return 0;
  }
  std::fprintf(stderr, "usage: engine_checkpoint_tool write FULL NOMINAL | copy IN OUT\n");
  return 2;
}
