// Loads an ONNX ModelProto from untrusted bytes or a file and validates it before anything else in
// the engine sees it. Models arrive over the network, so every size is bounded, external data may
// only come from regular files inside the model's own directory, and every onnx exception becomes
// an absl::Status. On success every tensor's data is inline (external data has been read in).
//
// Status codes: kInvalidArgument for malformed or hostile input (subgraphs nested deeper than the limit
// included), kUnimplemented for well-formed models this engine does not support (opset outside 1..17, unknown
// domain or domain version), kResourceExhausted for size limits (bytes, nodes, elements, decoded memory), naming
// the limit.
#ifndef TRAIND_ENGINE_MODEL_MODEL_LOADER_H_
#define TRAIND_ENGINE_MODEL_MODEL_LOADER_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "onnx/onnx_pb.h"

namespace traind::engine {

// Every ai.onnx opset whose models the loader accepts; whether a node runs is then decided per op by the
// opset range of its kernel registration (engine/ops/op_list.inc).
inline constexpr int kMinOnnxOpset = 1;
inline constexpr int kMaxOnnxOpset = 17;

// ONNX's training-optimizer domain (Adam, Momentum, Adagrad): the engine implements version 1 itself,
// so models importing it load without registration; other versions are refused like unknown domains.
inline constexpr const char* kOnnxPreviewTrainingDomain = "ai.onnx.preview.training";
inline constexpr int kOnnxPreviewTrainingVersion = 1;

struct ModelLimits {
  // Protobuf cannot parse messages of 2 GiB or more.
  int64_t max_model_bytes = (int64_t{1} << 31) - 1;
  int64_t max_external_data_bytes = int64_t{16} << 30;  // Sum over all external tensors.
  int64_t max_tensor_elements = int64_t{1} << 32;       // Per tensor (initializer, attribute).
  int64_t max_nodes = 1'000'000;                        // All graphs, subgraphs and functions.
  int max_graph_depth = 8;  // Main graph is depth 1; each subgraph attribute adds one.
  // What decoding the protobuf may take in memory, estimated from the wire format before decoding (every field
  // becomes an object: a few hundred bytes of empty repeated strings decode to kilobytes); 0: half of this
  // machine's memory (PhysicalMemoryBytes).
  int64_t max_decoded_bytes = 0;
};

// A non-ONNX operator domain whose nodes the engine accepts (traind's own ops register here).
struct CustomDomain {
  std::string domain;
  int min_version = 1;
  int max_version = 1;
};

// Hook for traind: domains registered here are accepted by every later load. Call at start-up,
// before loading models (not synchronised with concurrent loads).
void RegisterCustomDomain(CustomDomain domain);
const std::vector<CustomDomain>& RegisteredCustomDomains();

struct LoadOptions {
  ModelLimits limits;
  std::vector<CustomDomain> custom_domains = RegisteredCustomDomains();
  // Run onnx::checker::check_model and strict shape inference (off only for unit tests that build
  // deliberately incomplete models).
  bool run_onnx_checker = true;
  // Leave the external data of floating-point graph initializers in its files instead of reading it into the
  // proto: the returned model holds checked, pinned references (external_data.h) that TensorFromProto maps into
  // memory copy-on-write. One copy of the weights instead of two, and models beyond protobuf's 2 GiB. Other
  // external tensors (integers, attributes, subgraphs) are read in as without it.
  bool map_external_data = false;
  // External data files by location (e.g. uploaded blobs): when not empty, the only files external data may come
  // from, instead of the model's directory.
  std::map<std::string, std::string> external_data_files;
};

// Parses and validates. `external_data_dir`: directory external data paths are relative to; empty
// (and no LoadOptions::external_data_files) means the model must not use external data.
absl::StatusOr<onnx::ModelProto> LoadModelFromBytes(absl::string_view bytes,
                                                    const LoadOptions& options = LoadOptions(),
                                                    const std::string& external_data_dir = "");

// Reads `path` (size-limited) and loads it with external data relative to its directory.
absl::StatusOr<onnx::ModelProto> LoadModelFromFile(const std::string& path,
                                                   const LoadOptions& options = LoadOptions());

}  // namespace traind::engine

#endif  // TRAIND_ENGINE_MODEL_MODEL_LOADER_H_
