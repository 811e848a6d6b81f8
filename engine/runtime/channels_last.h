// Convolution networks in the channels-last layout, on the node list the compiler plans (the model, its artifacts
// and its exports keep their nodes).
//
// ONNX activations are [N, C, H, W]; oneDNN's fast convolutions want the channel innermost. Run on plain NCHW
// tensors, every Conv reordered its input and output and every ConvGrad its dY, X and dX: five copies of an
// activation per convolution and step (resnet8: 45 copies, 2.7-4 ms of a ~20 ms step, DNNL_VERBOSE). This pass keeps
// activations channels-last ([N, H, W, C] in memory) from one convolution to the next instead:
//
// - Every Conv and ConvGrad (traind) on rank-4 activations becomes ChannelsLastConv / ConvGrad channels_last = 1,
//   whose kernels hand oneDNN the nhwc layout as it is (no reorder).
// - The nodes between them join when one of their rank-4 inputs is channels-last already (their producer joined):
//   BatchNormalization (-> ChannelsLastBatchNormalization), BatchNormalizationGrad (channels_last = 1), MaxPool
//   without Indices (-> ChannelsLastMaxPool), MaxPoolGrad (channels_last = 1), and elementwise ops whose other inputs
//   are scalars (Relu, ReluGrad, Add, Sum, ...): an axis permutation applied to every operand commutes with
//   elementwise maths, broadcasting included.
// - Where a channels-last value meets a node that did not join (or is a graph output), a Transpose back to NCHW
//   under the value's own name feeds it; where a joined node reads an NCHW value, a Transpose to channels-last
//   (once per value) does. Size reads the channels-last value as it is (same element count), Shape reads it and a
//   Gather puts the dims back in NCHW order. So the pass never changes a result: only where the copies are.
//
// A channels-last value is named "<name>/channels_last" and has the byte size of <name>.
#ifndef TRAIND_ENGINE_RUNTIME_CHANNELS_LAST_H_
#define TRAIND_ENGINE_RUNTIME_CHANNELS_LAST_H_

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "onnx/onnx_pb.h"

namespace traind::engine {

struct ChannelsLastGraph {
  absl::flat_hash_map<std::string, int> ranks;  // every value whose rank is known (others are inferred where needed)
  absl::flat_hash_set<std::string> outputs;     // graph outputs
  int onnx_opset = 0;                           // the model's default-domain opset
};

struct ChannelsLastResult {
  int converted_nodes = 0;  // Convolutions and the nodes that joined them.
  int transposes = 0;       // Transposes inserted at the borders.
  // Each channels-last value and the NCHW value whose size it has.
  absl::flat_hash_map<std::string, std::string> same_size_as;
};

// Whether `name` is a value the pass made channels-last ("<name>/channels_last"): its dims are the NCHW value's
// with the channel axis moved last.
bool IsChannelsLastValue(const std::string& name);

// Rewrites `nodes` in place as above. Nodes it makes are in the ai.traind.training domain, which the caller then
// imports. A graph without a rank-4 Conv or ConvGrad is left as it is.
ChannelsLastResult ConvertToChannelsLast(std::vector<onnx::NodeProto>& nodes, const ChannelsLastGraph& graph);

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_RUNTIME_CHANNELS_LAST_H_
