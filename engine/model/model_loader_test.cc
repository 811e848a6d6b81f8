#include "engine/model/model_loader.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <fstream>
#include <string>

#include "engine/model/tensor_proto.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

// A valid model: y = Relu(x) + w, w an initializer of 4 floats.
onnx::ModelProto ValidModel(int opset = 13) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  auto* import = model.add_opset_import();
  import->set_version(opset);
  auto* graph = model.mutable_graph();
  graph->set_name("g");
  auto add_value = [](onnx::ValueInfoProto* info, const char* name) {
    info->set_name(name);
    auto* type = info->mutable_type()->mutable_tensor_type();
    type->set_elem_type(onnx::TensorProto::FLOAT);
    type->mutable_shape()->add_dim()->set_dim_value(4);
  };
  add_value(graph->add_input(), "x");
  add_value(graph->add_output(), "y");
  auto* w = graph->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(4);
  w->set_raw_data(std::string(16, '\0'));
  auto* relu = graph->add_node();
  relu->set_op_type("Relu");
  relu->add_input("x");
  relu->add_output("r");
  auto* add = graph->add_node();
  add->set_op_type("Add");
  add->add_input("r");
  add->add_input("w");
  add->add_output("y");
  return model;
}

absl::Status LoadBytes(const onnx::ModelProto& model, const std::string& dir = "") {
  return LoadModelFromBytes(model.SerializeAsString(), LoadOptions(), dir).status();
}

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/model_loader_test.XXXXXX";
    path_ = mkdtemp(pattern);
  }
  ~TempDir() {
    if (std::system(("rm -rf '" + path_ + "'").c_str()) != 0) ADD_FAILURE() << "cleanup";
  }
  const std::string& path() const { return path_; }
  void Write(const std::string& name, const std::string& contents) const {
    std::ofstream(path_ + "/" + name, std::ios::binary) << contents;
  }

 private:
  std::string path_;
};

void MakeExternal(onnx::ModelProto& model, const std::string& location, int64_t offset,
                  int64_t length) {
  auto* w = model.mutable_graph()->mutable_initializer(0);
  w->clear_raw_data();
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [w](const char* key, const std::string& value) {
    auto* entry = w->add_external_data();
    entry->set_key(key);
    entry->set_value(value);
  };
  add("location", location);
  add("offset", std::to_string(offset));
  add("length", std::to_string(length));
}

TEST(ModelLoaderTest, AcceptsValidModel) { EXPECT_TRUE(LoadBytes(ValidModel()).ok()); }

// The onnx checker lets this through and onnx's IR import (the version converter) crashes on it (found by
// loss_graph_fuzzer): an output nothing produces is refused by the loader, naming it.
TEST(ModelLoaderTest, RejectsAGraphOutputNothingProduces) {
  onnx::ModelProto model = ValidModel();
  model.mutable_graph()->mutable_output(0)->set_name("loss");
  absl::Status status = LoadBytes(model);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("graph output 'loss'"), std::string::npos) << status;
  // An output that is a graph input or an initializer is produced.
  model = ValidModel();
  for (const char* name : {"w", "x"}) {
    onnx::ValueInfoProto* output = model.mutable_graph()->add_output();
    *output = model.graph().output(0);
    output->set_name(name);
  }
  EXPECT_TRUE(LoadBytes(model).ok()) << LoadBytes(model);
}

// onnx 1.12's ConvTranspose inference reads W's dim 1 without checking W's rank (found by train_fuzzer): the guard
// in front of it (onnx_inference_guards.cc) refuses the model instead.
TEST(ModelLoaderTest, RejectsAConvTransposeWeightOfTheWrongRank) {
  onnx::ModelProto model = ValidModel(17);
  auto* graph = model.mutable_graph();
  graph->clear_node();
  graph->clear_initializer();
  auto* x_shape = graph->mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
  x_shape->clear_dim();
  for (int64_t dim : {1, 2, 4, 4}) x_shape->add_dim()->set_dim_value(dim);
  auto* y_shape = graph->mutable_output(0)->mutable_type()->mutable_tensor_type()->mutable_shape();
  y_shape->clear_dim();
  for (const char* dim : {"n", "c", "h", "w"}) y_shape->add_dim()->set_dim_param(dim);
  auto* w = graph->add_initializer();
  w->set_name("w");
  w->set_data_type(onnx::TensorProto::FLOAT);
  w->add_dims(2);
  w->set_raw_data(std::string(8, '\0'));
  auto* node = graph->add_node();
  node->set_op_type("ConvTranspose");
  node->add_input("x");
  node->add_input("w");
  node->add_output("y");
  absl::Status status = LoadBytes(model);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("W has rank 1 and X rank 4"), std::string::npos) << status;
  // A stride of 0, which onnx's Conv / pooling inference divides by (SIGFPE; found by train_fuzzer).
  node->set_op_type("Conv");
  w->clear_dims();
  for (int64_t dim : {2, 2, 1, 1}) w->add_dims(dim);
  w->set_raw_data(std::string(16, '\0'));
  auto* strides = node->add_attribute();
  strides->set_name("strides");
  strides->set_type(onnx::AttributeProto::INTS);
  strides->add_ints(0);
  strides->add_ints(1);
  status = LoadBytes(model);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_NE(status.message().find("attribute 'strides' holds 0"), std::string::npos) << status;
  strides->set_ints(0, 1);
  EXPECT_TRUE(LoadBytes(model).ok()) << LoadBytes(model);
}

TEST(ModelLoaderTest, RejectsTruncatedBytes) {
  const std::string bytes = ValidModel().SerializeAsString();
  auto result = LoadModelFromBytes(bytes.substr(0, bytes.size() - 7));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
}

TEST(ModelLoaderTest, RejectsOpsetsOutside1To17) {
  for (int opset : {0, 18, 19}) {
    absl::Status status = LoadBytes(ValidModel(opset));
    EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << status;
    EXPECT_NE(status.message().find("supports opsets 1 to 17"), std::string::npos) << status;
  }
}

// PyTorch's legacy exports (libonnx-testdata's pytorch-converted, pytorch-operator) are opset 6; some
// ONNX node tests declare opset 1. Whether their ops run is up to each kernel's registered opset range.
TEST(ModelLoaderTest, AcceptsOldOpsetsAndNewestOpset17) {
  for (int opset : {1, 6, 7, 17}) EXPECT_TRUE(LoadBytes(ValidModel(opset)).ok()) << opset;
}

// y = op(Constant int64 [4]): an int64 Constant, as PyTorch's opset-6 exports emit for shapes.
onnx::ModelProto Int64ConstantModel(int opset, const char* op) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(opset);
  auto* graph = model.mutable_graph();
  graph->set_name("g");
  auto* output = graph->add_output();
  output->set_name("y");
  auto* type = output->mutable_type()->mutable_tensor_type();
  type->set_elem_type(onnx::TensorProto::INT64);
  type->mutable_shape()->add_dim()->set_dim_value(1);
  auto* constant = graph->add_node();
  constant->set_op_type("Constant");
  constant->add_output("c");
  auto* value = constant->add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  value->mutable_t()->set_data_type(onnx::TensorProto::INT64);
  value->mutable_t()->add_dims(1);
  value->mutable_t()->add_int64_data(4);
  auto* node = graph->add_node();
  node->set_op_type(op);
  node->add_input("c");
  node->add_output("y");
  return model;
}

TEST(ModelLoaderTest, LegacyOpsetsSkipOnlyTheTypeConstraintCheck) {
  // Constant-1 allows only float types, yet PyTorch's opset-6 exports use int64 Constants.
  EXPECT_TRUE(LoadBytes(Int64ConstantModel(6, "Identity")).ok());
  EXPECT_TRUE(LoadBytes(Int64ConstantModel(8, "Identity")).ok());
  EXPECT_TRUE(LoadBytes(Int64ConstantModel(13, "Identity")).ok());
  // From opset 9 type constraints are checked: Sqrt takes only floats.
  absl::Status status = LoadBytes(Int64ConstantModel(13, "Sqrt"));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
}

TEST(ModelLoaderTest, CustomDomainNeedsRegistration) {
  onnx::ModelProto model = ValidModel();
  auto* import = model.add_opset_import();
  import->set_domain("com.traind");
  import->set_version(1);
  EXPECT_EQ(LoadBytes(model).code(), absl::StatusCode::kUnimplemented);
  LoadOptions options;
  options.custom_domains.push_back({"com.traind", 1, 1});
  EXPECT_TRUE(LoadModelFromBytes(model.SerializeAsString(), options).ok());
}

// y = Momentum(R, T, x, g, v) in ONNX's optimizer domain, importing only that domain.
onnx::ModelProto MomentumModel(const std::string& domain, int version) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  auto* import = model.add_opset_import();
  import->set_domain(domain);
  import->set_version(version);
  auto* graph = model.mutable_graph();
  graph->set_name("g");
  auto add_value = [](onnx::ValueInfoProto* info, const char* name, int type, bool scalar) {
    info->set_name(name);
    auto* tensor_type = info->mutable_type()->mutable_tensor_type();
    tensor_type->set_elem_type(type);
    auto* shape = tensor_type->mutable_shape();
    if (!scalar) shape->add_dim()->set_dim_value(3);
  };
  add_value(graph->add_input(), "R", onnx::TensorProto::FLOAT, true);
  add_value(graph->add_input(), "T", onnx::TensorProto::INT64, true);
  for (const char* name : {"X", "G", "V"}) {
    add_value(graph->add_input(), name, onnx::TensorProto::FLOAT, false);
  }
  for (const char* name : {"X_new", "V_new"}) {
    add_value(graph->add_output(), name, onnx::TensorProto::FLOAT, false);
  }
  auto* node = graph->add_node();
  node->set_op_type("Momentum");
  node->set_domain(domain);
  for (const char* name : {"R", "T", "X", "G", "V"}) node->add_input(name);
  node->add_output("X_new");
  node->add_output("V_new");
  auto add_float = [node](const char* name, float value) {
    auto* attribute = node->add_attribute();
    attribute->set_name(name);
    attribute->set_type(onnx::AttributeProto::FLOAT);
    attribute->set_f(value);
  };
  add_float("alpha", 0.9f);
  add_float("beta", 1.0f);
  add_float("norm_coefficient", 0.0f);
  auto* mode = node->add_attribute();
  mode->set_name("mode");
  mode->set_type(onnx::AttributeProto::STRING);
  mode->set_s("standard");
  return model;
}

TEST(ModelLoaderTest, AcceptsOnnxPreviewTrainingVersion1Only) {
  EXPECT_EQ(std::string(kOnnxPreviewTrainingDomain), "ai.onnx.preview.training");
  absl::Status status = LoadBytes(MomentumModel(kOnnxPreviewTrainingDomain, 1));
  EXPECT_TRUE(status.ok()) << status;
  for (int version : {0, 2}) {
    status = LoadBytes(MomentumModel(kOnnxPreviewTrainingDomain, version));
    EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << version << ": " << status;
    EXPECT_NE(status.message().find("unsupported operator domain 'ai.onnx.preview.training'"),
              std::string::npos)
        << status;
  }
  // Near misses are unknown domains.
  for (const char* domain : {"ai.onnx.preview", "ai.onnx.preview.training2", "com.microsoft"}) {
    status = LoadBytes(MomentumModel(domain, 1));
    EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented) << domain << ": " << status;
  }
  // The domain's schemas are registered with onnx, so the checker still checks its nodes.
  onnx::ModelProto bad = MomentumModel(kOnnxPreviewTrainingDomain, 1);
  bad.mutable_graph()->mutable_node(0)->mutable_attribute()->RemoveLast();  // Required 'mode'.
  status = LoadBytes(bad);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
}

TEST(ModelLoaderTest, UnknownOpNamesTheOp) {
  onnx::ModelProto model = ValidModel();
  model.mutable_graph()->mutable_node(0)->set_op_type("NoSuchOp");
  absl::Status status = LoadBytes(model);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.message().find("NoSuchOp"), std::string::npos) << status;
}

TEST(ModelLoaderTest, RejectsRawDataSizeMismatch) {
  onnx::ModelProto model = ValidModel();
  model.mutable_graph()->mutable_initializer(0)->set_raw_data(std::string(12, '\0'));
  absl::Status status = LoadBytes(model);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("raw_data"), std::string::npos) << status;
}

TEST(ModelLoaderTest, RejectsOverflowingDims) {
  onnx::ModelProto model = ValidModel();
  auto* w = model.mutable_graph()->mutable_initializer(0);
  w->clear_dims();
  w->add_dims(int64_t{1} << 62);
  w->add_dims(int64_t{1} << 62);
  EXPECT_EQ(LoadBytes(model).code(), absl::StatusCode::kInvalidArgument);
  w->clear_dims();
  w->add_dims(-4);
  EXPECT_EQ(LoadBytes(model).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ModelLoaderTest, NodeCountAndDepthLimits) {
  LoadOptions options;
  options.limits.max_nodes = 1;
  EXPECT_EQ(LoadModelFromBytes(ValidModel().SerializeAsString(), options).status().code(),
            absl::StatusCode::kResourceExhausted);
  onnx::ModelProto model = ValidModel();
  onnx::GraphProto* graph = model.mutable_graph();
  for (int depth = 0; depth < 10; ++depth) {  // If -> then_branch -> If -> ...
    auto* node = graph->add_node();
    node->set_op_type("If");
    auto* attribute = node->add_attribute();
    attribute->set_name("then_branch");
    attribute->set_type(onnx::AttributeProto::GRAPH);
    graph = attribute->mutable_g();
  }
  EXPECT_EQ(LoadBytes(model).code(), absl::StatusCode::kInvalidArgument);
}

TEST(ModelLoaderTest, ExternalDataInsideModelDirIsInlined) {
  TempDir dir;
  dir.Write("weights.bin", std::string(8, 'x') + std::string(16, '\0'));
  onnx::ModelProto model = ValidModel();
  MakeExternal(model, "weights.bin", 8, 16);
  auto loaded = LoadModelFromBytes(model.SerializeAsString(), LoadOptions(), dir.path());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->graph().initializer(0).raw_data().size(), 16u);
  EXPECT_NE(loaded->graph().initializer(0).data_location(), onnx::TensorProto::EXTERNAL);
}

TEST(ModelLoaderTest, RejectsHostileExternalData) {
  TempDir dir;
  dir.Write("weights.bin", std::string(16, '\0'));
  mkdir((dir.path() + "/sub").c_str(), 0700);
  ASSERT_EQ(symlink((dir.path() + "/weights.bin").c_str(), (dir.path() + "/link.bin").c_str()), 0);
  ASSERT_EQ(symlink(dir.path().c_str(), (dir.path() + "/sub/up").c_str()), 0);
  struct Case {
    std::string location;
    int64_t offset;
    int64_t length;
  };
  for (const Case& c : {Case{"/etc/passwd", 0, 16}, Case{"../weights.bin", 0, 16},
                        Case{"sub/../weights.bin", 0, 16}, Case{"link.bin", 0, 16},
                        Case{"sub/up/weights.bin", 0, 16}, Case{"weights.bin", 8, 16},
                        Case{"weights.bin", 100, 0}, Case{"weights.bin", 0, 12},
                        Case{"missing.bin", 0, 16}}) {
    onnx::ModelProto model = ValidModel();
    MakeExternal(model, c.location, c.offset, c.length);
    absl::Status status = LoadBytes(model, dir.path());
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.location << ": " << status;
  }
  // Without a model directory no external data is allowed at all.
  onnx::ModelProto model = ValidModel();
  MakeExternal(model, "weights.bin", 0, 16);
  EXPECT_FALSE(LoadBytes(model).ok());
}

// LoadOptions::map_external_data: the data stays in its file (not in the proto), TensorFromProto maps it (aligned
// offset) or reads it (unaligned), writes to the tensor never reach the file, and a file replaced after loading is
// refused. The same hostile references are refused as when inlining, and pinned keys are never accepted as input.
TEST(ModelLoaderTest, MappedExternalDataStaysInItsFile) {
  TempDir dir;
  std::string file(4096 + 16, '\0');
  const float values[4] = {1.5f, -2.0f, 3.25f, 4.0f};
  std::memcpy(&file[4096], values, sizeof values);
  std::memcpy(&file[8], values, sizeof values);
  dir.Write("weights.bin", file);
  LoadOptions options;
  options.map_external_data = true;
  for (int64_t offset : {int64_t{4096}, int64_t{8}}) {
    onnx::ModelProto model = ValidModel();
    MakeExternal(model, "weights.bin", offset, 16);
    auto loaded = LoadModelFromBytes(model.SerializeAsString(), options, dir.path());
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    const onnx::TensorProto& w = loaded->graph().initializer(0);
    EXPECT_EQ(w.data_location(), onnx::TensorProto::EXTERNAL);
    EXPECT_TRUE(w.raw_data().empty());
    EXPECT_EQ(loaded->graph().initializer_size(), 1);
    EXPECT_EQ(loaded->graph().input_size(), 1);  // the checker's stand-in input is gone again
    absl::StatusOr<Tensor> tensor = TensorFromProto(w);
    ASSERT_TRUE(tensor.ok()) << tensor.status();
    EXPECT_EQ(std::vector<float>(tensor->data<float>(), tensor->data<float>() + 4),
              std::vector<float>(values, values + 4));
    tensor->mutable_data<float>()[0] = 99.0f;  // copy-on-write
    // A pinned reference loads again through the serialized model only via the loader's refusal.
    EXPECT_EQ(LoadModelFromBytes(loaded->SerializeAsString(), options, dir.path()).status().code(),
              absl::StatusCode::kInvalidArgument);
  }
  std::ifstream in(dir.path() + "/weights.bin", std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), file);

  onnx::ModelProto model = ValidModel();
  MakeExternal(model, "weights.bin", 4096, 16);
  auto loaded = LoadModelFromBytes(model.SerializeAsString(), options, dir.path());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  dir.Write("weights.new", file);  // same name, size and content, but another file
  ASSERT_EQ(rename((dir.path() + "/weights.new").c_str(), (dir.path() + "/weights.bin").c_str()), 0);
  EXPECT_EQ(TensorFromProto(loaded->graph().initializer(0)).status().code(), absl::StatusCode::kInvalidArgument);

  for (const char* location : {"/etc/passwd", "../weights.bin", "missing.bin"}) {
    onnx::ModelProto hostile = ValidModel();
    MakeExternal(hostile, location, 0, 16);
    EXPECT_EQ(LoadModelFromBytes(hostile.SerializeAsString(), options, dir.path()).status().code(),
              absl::StatusCode::kInvalidArgument)
        << location;
  }
}

TEST(ModelLoaderTest, ExternalDataFromListedFilesOnly) {
  TempDir dir;
  dir.Write("blob-1", std::string(16, '\0'));
  LoadOptions options;
  options.map_external_data = true;
  options.external_data_files = {{"weights/w.bin", dir.path() + "/blob-1"}};
  onnx::ModelProto model = ValidModel();
  MakeExternal(model, "weights/w.bin", 0, 16);
  auto loaded = LoadModelFromBytes(model.SerializeAsString(), options);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_TRUE(TensorFromProto(loaded->graph().initializer(0)).ok());
  MakeExternal(model, "other.bin", 0, 16);
  model.mutable_graph()->mutable_initializer(0)->mutable_external_data()->DeleteSubrange(0, 3);
  EXPECT_EQ(LoadModelFromBytes(model.SerializeAsString(), options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// A FIFO blocks open() until a writer comes: external data and model files that are FIFOs (or devices) must be
// refused at once, never waited on.
TEST(ModelLoaderTest, FifosAndDevicesAreRefusedWithoutBlocking) {
  TempDir dir;
  ASSERT_EQ(mkfifo((dir.path() + "/pipe.bin").c_str(), 0600), 0);
  ASSERT_EQ(symlink("/dev/zero", (dir.path() + "/zero.bin").c_str()), 0);
  for (const char* location : {"pipe.bin", "zero.bin"}) {
    onnx::ModelProto model = ValidModel();
    MakeExternal(model, location, 0, 16);
    absl::Status status = LoadBytes(model, dir.path());
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << location << ": " << status;
  }
  absl::StatusOr<onnx::ModelProto> fifo_model = LoadModelFromFile(dir.path() + "/pipe.bin");
  EXPECT_EQ(fifo_model.status().code(), absl::StatusCode::kInvalidArgument) << fifo_model.status();
  absl::StatusOr<onnx::ModelProto> device = LoadModelFromFile("/dev/zero");
  EXPECT_EQ(device.status().code(), absl::StatusCode::kInvalidArgument) << device.status();
}

// Counted on the wire, before protobuf decodes anything: too many nodes, or fields whose decoded objects would
// take more memory than allowed (millions of empty repeated strings), are RESOURCE_EXHAUSTED naming the limit.
TEST(ModelLoaderTest, NodeCountAndDecodedSizeAreBoundedBeforeDecoding) {
  onnx::ModelProto model = ValidModel();
  for (int i = 0; i < 50; ++i) {
    onnx::NodeProto* node = model.mutable_graph()->add_node();
    node->set_op_type("Relu");
    node->add_input("x");
    node->add_output("r" + std::to_string(i));
  }
  LoadOptions options;
  options.limits.max_nodes = 40;
  absl::Status nodes = LoadModelFromBytes(model.SerializeAsString(), options).status();
  EXPECT_EQ(nodes.code(), absl::StatusCode::kResourceExhausted) << nodes;
  EXPECT_NE(nodes.message().find("more than 40 nodes"), std::string::npos) << nodes;

  onnx::ModelProto strings = ValidModel();
  for (int i = 0; i < 100000; ++i) strings.mutable_graph()->mutable_node(0)->add_input("");
  options = LoadOptions();
  options.limits.max_decoded_bytes = 1 << 20;
  absl::Status decoded = LoadModelFromBytes(strings.SerializeAsString(), options).status();
  EXPECT_EQ(decoded.code(), absl::StatusCode::kResourceExhausted) << decoded;
  EXPECT_NE(decoded.message().find("1048576 bytes"), std::string::npos) << decoded;
  // The same model decodes under the default limit (half of this machine's memory).
  EXPECT_NE(LoadModelFromBytes(strings.SerializeAsString()).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(ModelLoaderTest, CheckerErrorsAreStatusesNotExceptions) {
  onnx::ModelProto model = ValidModel();
  model.mutable_graph()->mutable_node(1)->clear_input();  // Add with no inputs.
  absl::Status status = LoadBytes(model);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("Add"), std::string::npos) << status;
}

}  // namespace
}  // namespace traind::engine
