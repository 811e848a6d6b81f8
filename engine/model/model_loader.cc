#include "engine/model/model_loader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <exception>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "engine/core/dtype.h"
#include "engine/core/memory_budget.h"
#include "engine/core/shape.h"
#include "engine/core/status_macros.h"
#include "engine/model/external_data.h"
#include "engine/model/external_tensor.h"
#include "engine/model/traind_schemas.h"
#include "google/protobuf/io/coded_stream.h"
#include "onnx/checker.h"
#include "onnx/defs/schema.h"
#include "onnx/shape_inference/implementation.h"

namespace traind::engine {
namespace {

// Protobuf's own nesting limit; each subgraph costs three levels (Graph -> Node -> Attribute).
constexpr int kProtoRecursionLimit = 100;

std::vector<CustomDomain>& MutableCustomDomains() {
  static auto* domains = new std::vector<CustomDomain>();
  return *domains;
}

bool IsOnnxDomain(const std::string& domain) { return domain.empty() || domain == "ai.onnx"; }

absl::Status CheckOpsets(const onnx::ModelProto& model, const LoadOptions& options) {
  if (model.opset_import_size() == 0) {
    return absl::InvalidArgumentError("model has no opset_import");
  }
  for (const auto& opset : model.opset_import()) {
    if (IsOnnxDomain(opset.domain())) {
      if (opset.version() < kMinOnnxOpset || opset.version() > kMaxOnnxOpset) {
        return absl::UnimplementedError(absl::StrCat(
            "unsupported ai.onnx opset ", opset.version(), ": this engine supports opsets ",
            kMinOnnxOpset, " to ", kMaxOnnxOpset));
      }
      continue;
    }
    bool accepted = (opset.domain() == kOnnxPreviewTrainingDomain &&
                     opset.version() == kOnnxPreviewTrainingVersion) ||
                    (opset.domain() == kTraindTrainingDomain && opset.version() == kTraindTrainingVersion);
    for (const CustomDomain& custom : options.custom_domains) {
      if (custom.domain == opset.domain() && opset.version() >= custom.min_version &&
          opset.version() <= custom.max_version) {
        accepted = true;
      }
    }
    if (!accepted) {
      return absl::UnimplementedError(absl::StrCat("unsupported operator domain '", opset.domain(),
                                                   "' version ", opset.version()));
    }
  }
  return absl::OkStatus();
}

// A walk of the serialized ModelProto, before protobuf decodes it: counts nodes (graphs, subgraphs, functions) and
// bounds what decoding will allocate, so that a model of millions of tiny nodes or of millions of empty repeated
// strings is refused (kResourceExhausted, naming the limit) before it costs memory. Field numbers from onnx.proto.
class WireScan {
 public:
  WireScan(const ModelLimits& limits, int64_t max_decoded_bytes)
      : limits_(limits), max_decoded_bytes_(max_decoded_bytes) {}

  absl::Status Scan(absl::string_view bytes) {
    google::protobuf::io::CodedInputStream stream(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                  static_cast<int>(bytes.size()));
    TRAIND_RETURN_IF_ERROR(Message(stream, Kind::kModel, 0));
    return absl::OkStatus();
  }

 private:
  enum class Kind { kModel, kGraph, kNode, kAttribute, kFunction, kTensor, kOther };

  // The message kind of field `number` of a `kind` message, kOther for what is not walked into.
  static Kind Child(Kind kind, int number) {
    switch (kind) {
      case Kind::kModel:
        return number == 7 ? Kind::kGraph : number == 25 ? Kind::kFunction : Kind::kOther;
      case Kind::kGraph:
        return number == 1 ? Kind::kNode : number == 5 ? Kind::kTensor : Kind::kOther;
      case Kind::kNode:
        return number == 5 ? Kind::kAttribute : Kind::kOther;
      case Kind::kAttribute:
        return number == 6 || number == 11 ? Kind::kGraph : number == 5 || number == 10 ? Kind::kTensor : Kind::kOther;
      case Kind::kFunction:
        return number == 7 ? Kind::kNode : Kind::kOther;
      case Kind::kTensor:
      case Kind::kOther:
        break;
    }
    return Kind::kOther;
  }

  // Length-delimited fields that are packed arrays of varints (1 byte each on the wire, 8 decoded):
  // TensorProto dims, int32_data, int64_data, uint64_data; AttributeProto ints.
  static bool PackedVarints(Kind kind, int number) {
    return (kind == Kind::kTensor && (number == 1 || number == 5 || number == 7 || number == 11)) ||
           (kind == Kind::kAttribute && number == 8);
  }

  // Every decoded field costs at most this much beyond its bytes (a std::string or a message object and its slot
  // in a repeated field); a packed varint element at most 8 bytes.
  static constexpr int64_t kBytesPerField = 64;

  absl::Status Charge(int64_t bytes) {
    decoded_bytes_ += bytes;
    if (decoded_bytes_ > max_decoded_bytes_) {
      return absl::ResourceExhaustedError(absl::StrCat("decoding the model would take more than ",
                                                       max_decoded_bytes_, " bytes of memory (the loader's limit)"));
    }
    return absl::OkStatus();
  }

  absl::Status Message(google::protobuf::io::CodedInputStream& stream, Kind kind, int depth) {
    if (depth > kProtoRecursionLimit) {  // protobuf would refuse to decode it as well
      return absl::InvalidArgumentError("model bytes are nested too deeply");
    }
    if (kind == Kind::kNode && ++nodes_ > limits_.max_nodes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("model has more than ", limits_.max_nodes, " nodes (the loader's limit)"));
    }
    while (true) {
      const uint32_t tag = stream.ReadTag();
      if (tag == 0) return absl::OkStatus();  // end of this message (or of the input)
      TRAIND_RETURN_IF_ERROR(Charge(kBytesPerField));
      const int number = static_cast<int>(tag >> 3);
      switch (tag & 7) {
        case 0: {  // varint
          uint64_t ignored;
          if (!stream.ReadVarint64(&ignored)) return Corrupt();
          break;
        }
        case 1:  // fixed64
          if (!stream.Skip(8)) return Corrupt();
          break;
        case 5:  // fixed32
          if (!stream.Skip(4)) return Corrupt();
          break;
        case 2: {  // length-delimited: a message walked into, or bytes / a packed array
          uint32_t length;
          if (!stream.ReadVarint32(&length) || length > static_cast<uint32_t>(INT32_MAX)) return Corrupt();
          const Kind child = Child(kind, number);
          if (child != Kind::kOther) {
            const auto limit = stream.PushLimit(static_cast<int>(length));
            TRAIND_RETURN_IF_ERROR(Message(stream, child, depth + 1));
            if (!stream.ConsumedEntireMessage()) return Corrupt();
            stream.PopLimit(limit);
          } else {
            // Bytes decode to themselves; a packed array of 1-byte varints to 8 bytes per byte at most.
            TRAIND_RETURN_IF_ERROR(Charge((PackedVarints(kind, number) ? 8 : 1) * static_cast<int64_t>(length)));
            if (!stream.Skip(static_cast<int>(length))) return Corrupt();
          }
          break;
        }
        default:  // groups (3, 4) and invalid wire types: protobuf would refuse them as well
          return Corrupt();
      }
    }
  }

  static absl::Status Corrupt() {
    return absl::InvalidArgumentError("model bytes are not a valid ONNX ModelProto (truncated or corrupt)");
  }

  const ModelLimits& limits_;
  const int64_t max_decoded_bytes_;
  int64_t nodes_ = 0;
  int64_t decoded_bytes_ = 0;
};

// Walks graphs, subgraphs and functions: counts nodes, bounds depth, validates every tensor's
// dims and data size, and inlines external data.
class ModelValidator {
 public:
  ModelValidator(const ModelLimits& limits, ExternalDataSource external_data, bool map_external_data)
      : limits_(limits),
        external_data_(std::move(external_data)),
        map_external_data_(map_external_data),
        external_budget_(limits.max_external_data_bytes) {}

  bool mapped_any() const { return mapped_any_; }

  absl::Status ValidateModel(onnx::ModelProto& model) {
    if (!model.has_graph()) return absl::InvalidArgumentError("model has no graph");
    TRAIND_RETURN_IF_ERROR(ValidateGraph(*model.mutable_graph(), 1));
    TRAIND_RETURN_IF_ERROR(CheckGraphOutputsAreProduced(model.graph()));
    for (auto& function : *model.mutable_functions()) {
      for (auto& node : *function.mutable_node()) TRAIND_RETURN_IF_ERROR(ValidateNode(node, 1));
    }
    return absl::OkStatus();
  }

 private:
  // onnx's checker accepts a main-graph output that nothing produces, but onnx's IR import (used by the version
  // converter on loss graphs and on models below the gradient opset) dereferences a null producer for it: refuse
  // it here, before anything hands the model to libonnx beyond the checker.
  static absl::Status CheckGraphOutputsAreProduced(const onnx::GraphProto& graph) {
    absl::flat_hash_set<absl::string_view> defined;
    for (const auto& input : graph.input()) defined.insert(input.name());
    for (const auto& initializer : graph.initializer()) defined.insert(initializer.name());
    for (const auto& sparse : graph.sparse_initializer()) defined.insert(sparse.values().name());
    for (const auto& node : graph.node()) {
      for (const auto& output : node.output()) defined.insert(output);
    }
    for (const auto& output : graph.output()) {
      if (output.name().empty() || !defined.contains(output.name())) {
        return absl::InvalidArgumentError(absl::StrCat("graph output '", output.name(),
                                                       "' is not a graph input, an initializer or a node output"));
      }
    }
    return absl::OkStatus();
  }

  absl::Status ValidateGraph(onnx::GraphProto& graph, int depth) {
    if (depth > limits_.max_graph_depth) {  // structure, not size: a malformed model for this engine
      return absl::InvalidArgumentError(absl::StrCat("graph '", graph.name(), "' is nested ", depth,
                                                     " deep; the limit is ", limits_.max_graph_depth));
    }
    for (auto& tensor : *graph.mutable_initializer()) {
      TRAIND_RETURN_IF_ERROR(ValidateTensor(tensor, /*may_map=*/depth == 1));
    }
    for (auto& sparse : *graph.mutable_sparse_initializer()) {
      TRAIND_RETURN_IF_ERROR(ValidateSparse(sparse));
    }
    for (const auto* infos : {&graph.input(), &graph.output(), &graph.value_info()}) {
      for (const auto& info : *infos) TRAIND_RETURN_IF_ERROR(ValidateValueInfo(info));
    }
    for (auto& node : *graph.mutable_node()) TRAIND_RETURN_IF_ERROR(ValidateNode(node, depth));
    return absl::OkStatus();
  }

  absl::Status ValidateNode(onnx::NodeProto& node, int depth) {
    if (++node_count_ > limits_.max_nodes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("model has more than ", limits_.max_nodes, " nodes (the loader's limit)"));
    }
    for (auto& attribute : *node.mutable_attribute()) {
      absl::Status status = ValidateAttribute(attribute, depth);
      if (!status.ok()) {
        return absl::Status(status.code(),
                            absl::StrCat("node '", node.name(), "' (", node.op_type(),
                                         ") attribute '", attribute.name(), "': ",
                                         status.message()));
      }
    }
    return absl::OkStatus();
  }

  absl::Status ValidateAttribute(onnx::AttributeProto& attribute, int depth) {
    if (attribute.has_t()) TRAIND_RETURN_IF_ERROR(ValidateTensor(*attribute.mutable_t()));
    for (auto& tensor : *attribute.mutable_tensors()) TRAIND_RETURN_IF_ERROR(ValidateTensor(tensor));
    if (attribute.has_sparse_tensor()) {
      TRAIND_RETURN_IF_ERROR(ValidateSparse(*attribute.mutable_sparse_tensor()));
    }
    for (auto& sparse : *attribute.mutable_sparse_tensors()) {
      TRAIND_RETURN_IF_ERROR(ValidateSparse(sparse));
    }
    if (attribute.has_g()) TRAIND_RETURN_IF_ERROR(ValidateGraph(*attribute.mutable_g(), depth + 1));
    for (auto& graph : *attribute.mutable_graphs()) {
      TRAIND_RETURN_IF_ERROR(ValidateGraph(graph, depth + 1));
    }
    return absl::OkStatus();
  }

  absl::Status ValidateSparse(onnx::SparseTensorProto& sparse) {
    TRAIND_RETURN_IF_ERROR(ValidateTensor(*sparse.mutable_values()));
    TRAIND_RETURN_IF_ERROR(ValidateTensor(*sparse.mutable_indices()));
    Shape dims(sparse.dims().begin(), sparse.dims().end());
    return ElementCount(dims, limits_.max_tensor_elements).status();
  }

  // Declared shapes may not hold negative or absurd dims (shape inference multiplies them).
  absl::Status ValidateValueInfo(const onnx::ValueInfoProto& info) {
    if (!info.has_type() || !info.type().has_tensor_type() ||
        !info.type().tensor_type().has_shape()) {
      return absl::OkStatus();
    }
    for (const auto& dim : info.type().tensor_type().shape().dim()) {
      if (dim.has_dim_value() &&
          (dim.dim_value() < 0 || dim.dim_value() > limits_.max_tensor_elements)) {
        return absl::InvalidArgumentError(absl::StrCat("value '", info.name(), "' has dim ",
                                                       dim.dim_value(), " out of range"));
      }
    }
    return absl::OkStatus();
  }

  // `may_map`: a graph initializer, whose external data may stay in its file (LoadOptions::map_external_data).
  absl::Status ValidateTensor(onnx::TensorProto& tensor, bool may_map = false) {
    Shape dims(tensor.dims().begin(), tensor.dims().end());
    auto count = ElementCount(dims, limits_.max_tensor_elements);
    if (!count.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", tensor.name(), "': ", count.status().message()));
    }
    const auto type = static_cast<DataType>(tensor.data_type());
    if (tensor.data_type() < 1 || tensor.data_type() > 16) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", tensor.name(), "' has invalid data type ", tensor.data_type()));
    }
    int64_t element_bytes = static_cast<int64_t>(ElementSize(type));
    if (type == DataType::kComplex64) element_bytes = 8;
    if (type == DataType::kComplex128) element_bytes = 16;
    const int64_t expected_bytes = *count * element_bytes;  // <= 2^32 * 16: no overflow.

    if (tensor.data_location() == onnx::TensorProto::EXTERNAL) {
      if (type == DataType::kString) {
        return absl::InvalidArgumentError(
            absl::StrCat("tensor '", tensor.name(), "': string tensors cannot be external"));
      }
      if (map_external_data_ && may_map && IsFloatingPoint(type)) {
        mapped_any_ = true;
        return PinExternalData(tensor, external_data_, expected_bytes, external_budget_);
      }
      return ResolveExternalData(tensor, external_data_, expected_bytes, external_budget_);
    }
    if (tensor.has_raw_data() && type != DataType::kString &&
        static_cast<int64_t>(tensor.raw_data().size()) != expected_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", tensor.name(), "': raw_data has ", tensor.raw_data().size(),
          " bytes but dims ", ShapeToString(dims), " of ", DataTypeName(type), " need ",
          expected_bytes));
    }
    return absl::OkStatus();
  }

  static bool IsFloatingPoint(DataType type) {
    return type == DataType::kFloat32 || type == DataType::kFloat64 || type == DataType::kFloat16 ||
           type == DataType::kBFloat16;
  }

  const ModelLimits& limits_;
  const ExternalDataSource external_data_;
  const bool map_external_data_;
  bool mapped_any_ = false;
  int64_t external_budget_;
  int64_t node_count_ = 0;
};

// PyTorch's opset-6 exporter emits int64 Constant nodes (shape and repeat operands), although
// Constant-1 allows only float types; type constraints were widened in opset 9. For models below
// opset 9, shape inference therefore skips the schema type-constraint check (shapes are still
// inferred strictly); the kernels check dtypes at run time anyway.
constexpr int kFirstOpsetWithStrictTypeCheck = 9;

bool CheckTypesStrictly(const onnx::ModelProto& model) {
  for (const auto& opset : model.opset_import()) {
    if (IsOnnxDomain(opset.domain())) return opset.version() >= kFirstOpsetWithStrictTypeCheck;
  }
  return true;
}

absl::Status RunOnnxCheckerInPlace(onnx::ModelProto& model);

// The checker looks for external data files relative to the working directory, and pinned tensors keep their data
// in files: it checks a copy (cheap: the weights are not in the proto) in which every pinned initializer is a
// typed graph input instead, then the model takes the copy's inferred value types. Only floating-point tensors are
// pinned, so shape inference loses no data it could propagate.
absl::Status RunOnnxCheckerWithPinnedTensors(onnx::ModelProto& model) {
  onnx::ModelProto checked = model;
  onnx::GraphProto* graph = checked.mutable_graph();
  absl::flat_hash_set<std::string> inputs;
  for (const auto& input : graph->input()) inputs.insert(input.name());
  google::protobuf::RepeatedPtrField<onnx::TensorProto> kept;
  for (auto& initializer : *graph->mutable_initializer()) {
    if (!IsPinnedExternal(initializer)) {
      *kept.Add() = std::move(initializer);
      continue;
    }
    if (inputs.contains(initializer.name())) continue;
    onnx::ValueInfoProto* input = graph->add_input();
    input->set_name(initializer.name());
    auto* tensor_type = input->mutable_type()->mutable_tensor_type();
    tensor_type->set_elem_type(initializer.data_type());
    auto* shape = tensor_type->mutable_shape();
    for (int64_t dim : initializer.dims()) shape->add_dim()->set_dim_value(dim);
  }
  const int original_inputs = model.graph().input_size();
  graph->mutable_initializer()->Swap(&kept);
  TRAIND_RETURN_IF_ERROR(RunOnnxCheckerInPlace(checked));
  graph->mutable_input()->DeleteSubrange(original_inputs, graph->input_size() - original_inputs);
  graph->mutable_initializer()->Swap(model.mutable_graph()->mutable_initializer());
  model = std::move(checked);
  return absl::OkStatus();
}

// Runs onnx's checker and strict shape inference; onnx reports errors by throwing.
absl::Status RunOnnxChecker(onnx::ModelProto& model, bool has_pinned_tensors) {
  if (has_pinned_tensors) return RunOnnxCheckerWithPinnedTensors(model);
  return RunOnnxCheckerInPlace(model);
}

absl::Status RunOnnxCheckerInPlace(onnx::ModelProto& model) {
  RegisterTraindSchemas();
  try {
    onnx::checker::check_model(model);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("onnx checker: ", e.what()));
  } catch (...) {
    return absl::InvalidArgumentError("onnx checker: unknown exception");
  }
  try {
    onnx::shape_inference::InferShapes(
        model, onnx::OpSchemaRegistry::Instance(),
        onnx::ShapeInferenceOptions(CheckTypesStrictly(model), /*error_mode=*/1,
                                    /*enable_data_propagation=*/true));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("onnx shape inference: ", e.what()));
  } catch (...) {
    return absl::InvalidArgumentError("onnx shape inference: unknown exception");
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterCustomDomain(CustomDomain domain) {
  MutableCustomDomains().push_back(std::move(domain));
}

const std::vector<CustomDomain>& RegisteredCustomDomains() { return MutableCustomDomains(); }

absl::StatusOr<onnx::ModelProto> LoadModelFromBytes(absl::string_view bytes,
                                                    const LoadOptions& options,
                                                    const std::string& external_data_dir) {
  if (static_cast<int64_t>(bytes.size()) > options.limits.max_model_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat("model is ", bytes.size(),
                                                     " bytes; the limit is ",
                                                     options.limits.max_model_bytes));
  }
  const int64_t max_decoded_bytes = options.limits.max_decoded_bytes > 0 ? options.limits.max_decoded_bytes
                                                                         : PhysicalMemoryBytes() / 2;
  TRAIND_RETURN_IF_ERROR(WireScan(options.limits, max_decoded_bytes).Scan(bytes));
  onnx::ModelProto model;
  google::protobuf::io::CodedInputStream stream(reinterpret_cast<const uint8_t*>(bytes.data()),
                                                static_cast<int>(bytes.size()));
  stream.SetRecursionLimit(kProtoRecursionLimit);
  if (!model.ParseFromCodedStream(&stream) || !stream.ConsumedEntireMessage()) {
    return absl::InvalidArgumentError(
        "model bytes are not a valid ONNX ModelProto (truncated, corrupt or nested too deeply)");
  }
  TRAIND_RETURN_IF_ERROR(CheckOpsets(model, options));
  ExternalDataSource external_data;
  external_data.base_dir = external_data_dir;
  external_data.files = options.external_data_files;
  ModelValidator validator(options.limits, std::move(external_data), options.map_external_data);
  TRAIND_RETURN_IF_ERROR(validator.ValidateModel(model));
  if (options.run_onnx_checker) TRAIND_RETURN_IF_ERROR(RunOnnxChecker(model, validator.mapped_any()));
  return model;
}

absl::StatusOr<onnx::ModelProto> LoadModelFromFile(const std::string& path,
                                                   const LoadOptions& options) {
  // O_NONBLOCK: a FIFO must not block the open (it is refused as not a regular file right after).
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot open '", path, "': ", strerror(errno)));
  }
  struct stat info;
  if (fstat(fd, &info) != 0 || !S_ISREG(info.st_mode)) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' is not a regular file"));
  }
  if (info.st_size > options.limits.max_model_bytes) {
    close(fd);
    return absl::ResourceExhaustedError(absl::StrCat("model file '", path, "' is ", info.st_size,
                                                     " bytes; the limit is ",
                                                     options.limits.max_model_bytes));
  }
  std::string bytes(static_cast<size_t>(info.st_size), '\0');
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = read(fd, &bytes[done], bytes.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += static_cast<size_t>(got);
  }
  close(fd);
  bytes.resize(done);
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  return LoadModelFromBytes(bytes, options, dir);
}

}  // namespace traind::engine
