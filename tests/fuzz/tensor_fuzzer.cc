// Tensors on the wire (TrainStep, Eval, SetParameters): a serialized TrainStepRequest, decoded as the handlers
// decode its inputs.
#include <cstddef>
#include <cstdint>

#include "server/wire_convert.h"
#include "traind/v1/training_service.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  traind::v1::TrainStepRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  (void)traind::NamedTensorsFromWire(request.inputs(), int64_t{16} << 20, "inputs", "input");
  for (const traind::v1::Tensor& tensor : request.inputs()) {
    (void)traind::TensorFromWire(tensor, int64_t{16} << 20, "input");
  }
  return 0;
}
