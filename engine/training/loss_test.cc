// AppendLoss: bad terms and bad loss graphs are refused with a clear status (and leave the model unchanged);
// merged names never collide; values computed here by hand (double) agree with the engine's. PyTorch agreement
// of every loss and its gradients is tests/golden/loss_golden_test.cc.
#include "engine/training/loss.h"

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "engine/model/model_loader.h"
#include "engine/runtime/session.h"
#include "engine/training/training_graph.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kBatch = 2, kFeatures = 3, kClasses = 4;
const std::vector<float> kInput = {0.5f, -1.0f, 2.0f, 1.5f, 0.25f, -0.75f};  // x [2, 3]

float WeightValue(int64_t i) { return 0.1f * static_cast<float>(i + 1) - 0.6f; }  // W [3, 4], row-major

onnx::ValueInfoProto Info(const std::string& name, int32_t elem_type, const std::vector<int64_t>& dims,
                          bool with_shape = true) {
  onnx::ValueInfoProto info;
  info.set_name(name);
  auto* tensor = info.mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(elem_type);
  if (with_shape) {
    auto* shape = tensor->mutable_shape();
    for (int64_t dim : dims) shape->add_dim()->set_dim_value(dim);
  }
  return info;
}

onnx::NodeProto* AddNode(onnx::GraphProto* graph, const std::string& op, std::vector<std::string> inputs,
                         std::vector<std::string> outputs) {
  onnx::NodeProto* node = graph->add_node();
  node->set_op_type(op);
  for (const auto& input : inputs) node->add_input(input);
  for (const auto& output : outputs) node->add_output(output);
  return node;
}

void SetInt(onnx::NodeProto* node, const std::string& name, int64_t value) {
  auto* attribute = node->add_attribute();
  attribute->set_name(name);
  attribute->set_type(onnx::AttributeProto::INT);
  attribute->set_i(value);
}

void AddFloatInitializer(onnx::GraphProto* graph, const std::string& name, const std::vector<int64_t>& dims,
                         const std::vector<float>& values) {
  onnx::TensorProto* tensor = graph->add_initializer();
  tensor->set_name(name);
  tensor->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t dim : dims) tensor->add_dims(dim);
  for (float value : values) tensor->add_float_data(value);
}

// x [2, 3] -> MatMul(W [3, 4]) -> `hidden_name` -> Identity -> logits [2, 4]; scores = ReduceSum(logits, 1) [2];
// logits64 = Cast(logits, double).
onnx::ModelProto ForwardModel(int64_t opset = 17, const std::string& hidden_name = "hidden") {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(opset);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("forward");
  *graph->add_input() = Info("x", onnx::TensorProto::FLOAT, {kBatch, kFeatures});
  std::vector<float> weight;
  for (int64_t i = 0; i < kFeatures * kClasses; ++i) weight.push_back(WeightValue(i));
  AddFloatInitializer(graph, "W", {kFeatures, kClasses}, weight);
  onnx::TensorProto* axes = graph->add_initializer();
  axes->set_name("axes");
  axes->set_data_type(onnx::TensorProto::INT64);
  axes->add_dims(1);
  axes->add_int64_data(1);
  AddNode(graph, "MatMul", {"x", "W"}, {hidden_name});
  AddNode(graph, "Identity", {hidden_name}, {"logits"});
  SetInt(AddNode(graph, "ReduceSum", {"logits", "axes"}, {"scores"}), "keepdims", 0);
  SetInt(AddNode(graph, "Cast", {"logits"}, {"logits64"}), "to", onnx::TensorProto::DOUBLE);
  *graph->add_output() = Info("logits", onnx::TensorProto::FLOAT, {kBatch, kClasses});
  *graph->add_output() = Info("scores", onnx::TensorProto::FLOAT, {kBatch});
  *graph->add_output() = Info("logits64", onnx::TensorProto::DOUBLE, {kBatch, kClasses});
  return model;
}

// logits = x W, by hand.
std::vector<double> Logits() {
  std::vector<double> logits(kBatch * kClasses, 0.0);
  for (int64_t n = 0; n < kBatch; ++n) {
    for (int64_t c = 0; c < kClasses; ++c) {
      for (int64_t k = 0; k < kFeatures; ++k) {
        logits[n * kClasses + c] += static_cast<double>(kInput[n * kFeatures + k]) * WeightValue(k * kClasses + c);
      }
    }
  }
  return logits;
}

// A loss graph over logits [2, 4] (and optionally a target), built node by node.
struct LossGraphBuilder {
  explicit LossGraphBuilder(int64_t opset = 17) {
    model.set_ir_version(8);
    model.add_opset_import()->set_version(opset);
    model.mutable_graph()->set_name("user_loss");
  }
  onnx::GraphProto* graph() { return model.mutable_graph(); }
  onnx::ModelProto model;
};

// mean(logits * scale) with the scale an initializer named `scale_name`, intermediates named `product_name`.
onnx::ModelProto ScaledMeanLoss(int64_t opset, const std::string& scale_name, const std::string& product_name) {
  LossGraphBuilder loss(opset);
  *loss.graph()->add_input() = Info("logits", onnx::TensorProto::FLOAT, {kBatch, kClasses});
  AddFloatInitializer(loss.graph(), scale_name, {}, {2.0f});
  AddNode(loss.graph(), "Mul", {"logits", scale_name}, {product_name});
  SetInt(AddNode(loss.graph(), "ReduceMean", {product_name}, {"value"}), "keepdims", 0);
  *loss.graph()->add_output() = Info("value", onnx::TensorProto::FLOAT, {});
  return loss.model;
}

LossTerm GraphTerm(onnx::ModelProto graph, const std::string& target = "") {
  LossTerm term(LossKind::kOnnxGraph, "", target);
  term.graph = std::move(graph);
  return term;
}

// Appends `terms`, checks that the result passes the onnx checker and strict shape inference, runs it.
std::map<std::string, Tensor> AppendAndRun(const std::vector<LossTerm>& terms, const NamedTensors& targets,
                                           onnx::ModelProto model = ForwardModel()) {
  absl::StatusOr<AppendedLoss> appended = AppendLoss(&model, terms);
  EXPECT_TRUE(appended.ok()) << appended.status();
  if (!appended.ok()) return {};
  absl::StatusOr<onnx::ModelProto> validated = LoadModelFromBytes(model.SerializeAsString());
  EXPECT_TRUE(validated.ok()) << validated.status();
  if (!validated.ok()) return {};
  auto session = Session::Create(*validated);
  EXPECT_TRUE(session.ok()) << session.status();
  if (!session.ok()) return {};
  NamedTensors inputs = targets;
  inputs.emplace_back("x", *Tensor::FromVector<float>({kBatch, kFeatures}, kInput));
  auto outputs = (*session)->Run(inputs);
  EXPECT_TRUE(outputs.ok()) << outputs.status();
  if (!outputs.ok()) return {};
  return std::map<std::string, Tensor>(outputs->begin(), outputs->end());
}

absl::Status AppendError(const std::vector<LossTerm>& terms, onnx::ModelProto model = ForwardModel()) {
  const std::string before = model.SerializeAsString();
  absl::StatusOr<AppendedLoss> appended = AppendLoss(&model, terms);
  EXPECT_EQ(model.SerializeAsString(), before) << "a failed AppendLoss changed the model";
  return appended.status();
}

// ---- Values (by hand, double) ----

TEST(LossTest, CrossEntropyWeightedMeanSkipsIgnoredTargets) {
  LossTerm term(LossKind::kCrossEntropy, "logits", "labels");
  term.class_weight = {0.5f, 1.0f, 2.0f, 4.0f};
  term.ignore_index = 3;  // a valid class id: masking, not OneHot's range, must skip it
  const std::vector<int64_t> labels = {2, 3};
  auto results = AppendAndRun({term}, {{"labels", *Tensor::FromVector<int64_t>({kBatch}, labels)}});
  ASSERT_TRUE(results.count("loss"));
  // Only sample 0 counts: -w_2 log_softmax(logits_0)_2 / w_2.
  const std::vector<double> logits = Logits();
  double log_sum = 0;
  for (int64_t c = 0; c < kClasses; ++c) log_sum += std::exp(logits[c]);
  const double expected = -(logits[2] - std::log(log_sum));
  EXPECT_NEAR(results.at("loss").data<float>()[0], expected, 1e-5 * std::fabs(expected));
}

TEST(LossTest, CrossEntropyWithEveryTargetIgnoredIsNaNAsInPyTorch) {
  LossTerm term(LossKind::kCrossEntropy, "logits", "labels");
  auto results = AppendAndRun({term}, {{"labels", *Tensor::FromVector<int64_t>({kBatch}, {-100, -100})}});
  ASSERT_TRUE(results.count("loss"));
  EXPECT_TRUE(std::isnan(results.at("loss").data<float>()[0]));
}

TEST(LossTest, DoubleOutputsGetDoubleConstants) {
  LossTerm mse(LossKind::kMeanSquaredError, "logits64", "wanted", 0.5f);
  mse.reduction = Reduction::kSum;
  const std::vector<double> wanted = {1, 2, 3, 4, 5, 6, 7, 8};
  auto results = AppendAndRun({mse}, {{"wanted", *Tensor::FromVector<double>({kBatch, kClasses}, wanted)}});
  ASSERT_TRUE(results.count("loss"));
  ASSERT_EQ(results.at("loss").dtype(), DataType::kFloat64);
  const std::vector<double> logits = Logits();
  double expected = 0;
  for (size_t i = 0; i < logits.size(); ++i) expected += 0.5 * (logits[i] - wanted[i]) * (logits[i] - wanted[i]);
  EXPECT_NEAR(results.at("loss").data<double>()[0], expected, 1e-6 * expected);
}

TEST(LossTest, ReductionNoneExposesElementsAndSumsThem) {
  LossTerm l1(LossKind::kL1, "logits", "wanted");
  l1.reduction = Reduction::kNone;
  l1.per_element_output = "l1_elements";
  onnx::ModelProto model = ForwardModel();
  absl::StatusOr<AppendedLoss> appended = AppendLoss(&model, {l1});
  ASSERT_TRUE(appended.ok()) << appended.status();
  EXPECT_EQ(appended->per_element_outputs, std::vector<std::string>{"l1_elements"});
  EXPECT_EQ(appended->targets, std::vector<std::string>{"wanted"});
  // Outputs: the loss, the per-element loss, then the model's own.
  ASSERT_EQ(model.graph().output_size(), 5);
  EXPECT_EQ(model.graph().output(0).name(), "loss");
  EXPECT_EQ(model.graph().output(1).name(), "l1_elements");
  EXPECT_EQ(model.graph().output(2).name(), "logits");

  const std::vector<float> wanted(kBatch * kClasses, 0.25f);
  auto results = AppendAndRun({l1}, {{"wanted", *Tensor::FromVector<float>({kBatch, kClasses}, wanted)}});
  ASSERT_TRUE(results.count("l1_elements"));
  const std::vector<double> logits = Logits();
  double sum = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    EXPECT_NEAR(results.at("l1_elements").data<float>()[i], std::fabs(logits[i] - 0.25), 1e-6);
    sum += std::fabs(logits[i] - 0.25);
  }
  EXPECT_NEAR(results.at("loss").data<float>()[0], sum, 1e-5 * sum);
}

TEST(LossTest, LossGraphNamesArePrefixedSoTheyNeverCollide) {
  // The loss graph calls its scale "x" and its product "W", both names of the model; its opset 13 is converted to
  // the model's 17; it is weighted 0.5 and added to a built-in term.
  LossTerm user = GraphTerm(ScaledMeanLoss(13, "x", "W"));
  user.weight = 0.5f;
  LossTerm mse(LossKind::kMeanSquaredError, "logits", "wanted");
  const std::vector<float> wanted(kBatch * kClasses, 0.0f);
  auto results = AppendAndRun({user, mse}, {{"wanted", *Tensor::FromVector<float>({kBatch, kClasses}, wanted)}});
  ASSERT_TRUE(results.count("loss"));
  double mean = 0, mean_square = 0;
  for (double value : Logits()) {
    mean += value / (kBatch * kClasses);
    mean_square += value * value / (kBatch * kClasses);
  }
  const double expected = 0.5 * 2.0 * mean + mean_square;
  EXPECT_NEAR(results.at("loss").data<float>()[0], expected, 1e-5 * std::fabs(expected));
}

TEST(LossTest, TermPrefixAvoidsNamesTheModelAlreadyUses) {
  LossTerm mse(LossKind::kMeanSquaredError, "logits", "wanted");
  const std::vector<float> wanted(kBatch * kClasses, 1.0f);
  // The model's own value "loss0/difference" is what term 0's prefix would produce.
  auto results = AppendAndRun({mse}, {{"wanted", *Tensor::FromVector<float>({kBatch, kClasses}, wanted)}},
                              ForwardModel(17, "loss0/difference"));
  ASSERT_TRUE(results.count("loss"));
  double expected = 0;
  for (double value : Logits()) expected += (value - 1.0) * (value - 1.0) / (kBatch * kClasses);
  EXPECT_NEAR(results.at("loss").data<float>()[0], expected, 1e-5 * expected);
}

TEST(LossTest, TrainingGraphDifferentiatesEveryKind) {
  for (LossKind kind : {LossKind::kMeanSquaredError, LossKind::kL1, LossKind::kCrossEntropy,
                        LossKind::kBinaryCrossEntropyWithLogits}) {
    for (Reduction reduction : {Reduction::kMean, Reduction::kSum, Reduction::kNone}) {
      LossTerm term(kind, "logits", "wanted");
      term.reduction = reduction;
      if (reduction == Reduction::kNone) term.per_element_output = "elements";
      TrainingGraphOptions options;
      options.loss = {term};
      auto training = BuildTrainingGraph(ForwardModel(), options);
      ASSERT_TRUE(training.ok()) << LossKindName(kind) << " " << ReductionName(reduction) << ": "
                                 << training.status();
      EXPECT_EQ(training->trainable, std::vector<std::string>{"W"});
      EXPECT_EQ(training->targets, std::vector<std::string>{"wanted"});
      EXPECT_EQ(training->per_element_losses.size(), reduction == Reduction::kNone ? 1u : 0u);
      auto validated = LoadModelFromBytes(training->model.SerializeAsString());
      EXPECT_TRUE(validated.ok()) << validated.status();
    }
  }
}

// ---- Bad terms ----

TEST(LossTest, BadTermsAreInvalidArguments) {
  struct BadTerm {
    const char* what;
    LossTerm term;
    const char* message;
  };
  std::vector<BadTerm> cases;
  cases.push_back({"unknown output", LossTerm(LossKind::kMeanSquaredError, "nope", "t"), "'nope' is not a graph"});
  cases.push_back({"no target", LossTerm(LossKind::kL1, "logits", ""), "no target"});
  cases.push_back({"target is a model input", LossTerm(LossKind::kL1, "logits", "x"), "collide"});
  cases.push_back({"target is a model value", LossTerm(LossKind::kL1, "logits", "hidden"), "collide"});
  cases.push_back({"target is the loss", LossTerm(LossKind::kL1, "logits", "loss"), "loss output"});
  cases.push_back({"cross entropy on rank 1", LossTerm(LossKind::kCrossEntropy, "scores", "t"), "static C"});
  {
    LossTerm term(LossKind::kCrossEntropy, "logits", "t");
    term.class_weight = {1, 2, 3};
    cases.push_back({"class_weight size", term, "3 values for 4 classes"});
  }
  {
    LossTerm term(LossKind::kMeanSquaredError, "logits", "t");
    term.class_weight = {1, 2, 3, 4};
    cases.push_back({"class_weight on MSE", term, "CrossEntropyLoss only"});
  }
  {
    LossTerm term(LossKind::kMeanSquaredError, "logits", "t");
    term.ignore_index = 0;
    cases.push_back({"ignore_index on MSE", term, "CrossEntropyLoss only"});
  }
  {
    LossTerm term(LossKind::kBinaryCrossEntropyWithLogits, "logits", "t");
    term.pos_weight = {1, 2, 3};
    cases.push_back({"pos_weight size", term, "one per class"});
  }
  {
    LossTerm term(LossKind::kBinaryCrossEntropyWithLogits, "logits", "t");
    term.bce_weight = {{3}, {1, 2, 3}};
    cases.push_back({"bce_weight not broadcastable", term, "does not broadcast"});
  }
  {
    LossTerm term(LossKind::kBinaryCrossEntropyWithLogits, "logits", "t");
    term.bce_weight = {{2, 1}, {1, 2, 3}};
    cases.push_back({"bce_weight value count", term, "3 values for dims [2, 1]"});
  }
  {
    LossTerm term(LossKind::kBinaryCrossEntropyWithLogits, "logits", "t");
    term.bce_weight = {{1, 2, 1}, {1, 2}};
    cases.push_back({"bce_weight rank", term, "higher rank"});
  }
  {
    LossTerm term(LossKind::kCrossEntropy, "logits", "t");
    term.pos_weight = {1, 2, 3, 4};
    cases.push_back({"pos_weight on cross entropy", term, "BCEWithLogitsLoss only"});
  }
  {
    LossTerm term(LossKind::kL1, "logits", "t");
    term.reduction = Reduction::kNone;
    cases.push_back({"none without a name", term, "needs per_element_output"});
  }
  {
    LossTerm term(LossKind::kL1, "logits", "t");
    term.reduction = Reduction::kNone;
    term.per_element_output = "scores";
    cases.push_back({"per-element name collides", term, "collide"});
  }
  {
    LossTerm term(LossKind::kL1, "logits", "t");
    term.per_element_output = "elements";
    cases.push_back({"per-element name without none", term, "reduction none only"});
  }
  {
    LossTerm term(LossKind::kL1, "logits", "t", std::numeric_limits<float>::quiet_NaN());
    cases.push_back({"NaN weight", term, "not finite"});
  }
  {
    LossTerm term(LossKind::kL1, "logits", "t");
    term.graph = ScaledMeanLoss(17, "s", "p");
    cases.push_back({"graph on a built-in", term, "kOnnxGraph terms only"});
  }
  for (const BadTerm& bad : cases) {
    absl::Status status = AppendError({bad.term});
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad.what << ": " << status;
    EXPECT_THAT(std::string(status.message()), HasSubstr(bad.message)) << bad.what;
  }
}

TEST(LossTest, BadCombinationsAreInvalidArguments) {
  LossTerm mse(LossKind::kMeanSquaredError, "logits", "t");
  LossTerm ce(LossKind::kCrossEntropy, "logits", "t");  // the same target as an int64 [2]
  absl::Status status = AppendError({mse, ce});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("target 't'"));

  LossTerm mse64(LossKind::kMeanSquaredError, "logits64", "t64");
  status = AppendError({mse, mse64});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("share a type"));

  LossTerm none(LossKind::kL1, "logits", "t1");
  none.reduction = Reduction::kNone;
  none.per_element_output = "t";
  status = AppendError({mse, none});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("both a target and a per-element output"));

  EXPECT_EQ(AppendError({}).code(), absl::StatusCode::kInvalidArgument);
}

TEST(LossTest, ModelWithAnOutputNamedLossIsRefused) {
  onnx::ModelProto model = ForwardModel();
  model.mutable_graph()->mutable_output(1)->set_name("loss");
  model.mutable_graph()->mutable_node(2)->set_output(0, "loss");
  absl::Status status = AppendError({LossTerm(LossKind::kL1, "logits", "t")}, model);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr("'loss'"));
}

TEST(LossTest, ModelsBelowOpset13AreUnimplemented) {
  absl::Status status = AppendError({LossTerm(LossKind::kL1, "logits", "t")}, ForwardModel(12));
  EXPECT_EQ(status.code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(status.message()), HasSubstr("opset 13"));
}

// ---- Bad loss graphs ----

void ExpectBadGraph(const LossTerm& term, const std::string& message,
                    absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
  absl::Status status = AppendError({term});
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(message));
  EXPECT_THAT(std::string(status.message()), HasSubstr("loss term 0 (loss graph)"));
}

TEST(LossTest, LossGraphWithANonScalarOutputIsRefused) {
  // Declared [2, 4].
  LossGraphBuilder declared;
  *declared.graph()->add_input() = Info("logits", onnx::TensorProto::FLOAT, {kBatch, kClasses});
  AddNode(declared.graph(), "Abs", {"logits"}, {"value"});
  *declared.graph()->add_output() = Info("value", onnx::TensorProto::FLOAT, {kBatch, kClasses});
  ExpectBadGraph(GraphTerm(declared.model), "must be a scalar");
  // Declared [N], inferred [2] from the model's output type.
  LossGraphBuilder symbolic;
  onnx::ValueInfoProto input = Info("logits", onnx::TensorProto::FLOAT, {});
  input.mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_param("N");
  input.mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_param("C");
  *symbolic.graph()->add_input() = input;
  onnx::NodeProto* reduce_max = AddNode(symbolic.graph(), "ReduceMax", {"logits"}, {"value"});
  auto* axes = reduce_max->add_attribute();
  axes->set_name("axes");
  axes->set_type(onnx::AttributeProto::INTS);
  axes->add_ints(1);
  SetInt(reduce_max, "keepdims", 0);
  onnx::ValueInfoProto output = Info("value", onnx::TensorProto::FLOAT, {});
  output.mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_param("N");
  *symbolic.graph()->add_output() = output;
  ExpectBadGraph(GraphTerm(symbolic.model), "must be a scalar; it is FLOAT[2]");
  // Declared a scalar, computed [2, 4]: strict shape inference of the graph itself refuses it.
  LossGraphBuilder lying;
  *lying.graph()->add_input() = Info("logits", onnx::TensorProto::FLOAT, {kBatch, kClasses});
  AddNode(lying.graph(), "Abs", {"logits"}, {"value"});
  *lying.graph()->add_output() = Info("value", onnx::TensorProto::FLOAT, {});
  ExpectBadGraph(GraphTerm(lying.model), "bad loss graph");
}

TEST(LossTest, LossGraphInputsMustNameModelOutputsOrTargets) {
  onnx::ModelProto graph = ScaledMeanLoss(17, "s", "p");
  graph.mutable_graph()->mutable_input(0)->set_name("probabilities");
  graph.mutable_graph()->mutable_node(0)->set_input(0, "probabilities");
  ExpectBadGraph(GraphTerm(graph), "input 'probabilities' names no output of the model");
  // Declared a target, the same graph is fine.
  onnx::ModelProto model = ForwardModel();
  absl::StatusOr<AppendedLoss> appended = AppendLoss(&model, {GraphTerm(graph, "probabilities")});
  ASSERT_TRUE(appended.ok()) << appended.status();
  EXPECT_EQ(appended->targets, std::vector<std::string>{"probabilities"});
  // A declared target the graph does not read.
  ExpectBadGraph(GraphTerm(ScaledMeanLoss(17, "s", "p"), "labels"), "declared target 'labels' is not an input");
}

TEST(LossTest, LossGraphInputTypesMustMatchTheModel) {
  LossGraphBuilder in_double;  // a consistent graph in double over the model's float logits
  *in_double.graph()->add_input() = Info("logits", onnx::TensorProto::DOUBLE, {kBatch, kClasses});
  SetInt(AddNode(in_double.graph(), "ReduceMean", {"logits"}, {"value"}), "keepdims", 0);
  *in_double.graph()->add_output() = Info("value", onnx::TensorProto::DOUBLE, {});
  ExpectBadGraph(GraphTerm(in_double.model), "is DOUBLE but the model output is FLOAT");
  onnx::ModelProto graph = ScaledMeanLoss(17, "s", "p");
  *graph.mutable_graph()->mutable_input(0) = Info("logits", onnx::TensorProto::FLOAT, {kBatch, 5});
  ExpectBadGraph(GraphTerm(graph), "FLOAT[2, 5] but the model output is FLOAT[2, 4]");
}

TEST(LossTest, LossGraphOpsetsOutsideTheEngineAreRefused) {
  ExpectBadGraph(GraphTerm(ScaledMeanLoss(18, "s", "p")), "opset 18");
  ExpectBadGraph(GraphTerm(ScaledMeanLoss(99, "s", "p")), "opset 99");
  onnx::ModelProto unknown_domain = ScaledMeanLoss(17, "s", "p");
  auto* opset = unknown_domain.add_opset_import();
  opset->set_domain("com.example");
  opset->set_version(1);
  ExpectBadGraph(GraphTerm(unknown_domain), "com.example");
}

TEST(LossTest, MalformedLossGraphsAreRefused) {
  ExpectBadGraph(GraphTerm(onnx::ModelProto()), "no loss graph");
  onnx::ModelProto two_outputs = ScaledMeanLoss(17, "s", "p");
  *two_outputs.mutable_graph()->add_output() = Info("p", onnx::TensorProto::FLOAT, {kBatch, kClasses});
  ExpectBadGraph(GraphTerm(two_outputs), "single output");
  onnx::ModelProto dangling = ScaledMeanLoss(17, "s", "p");
  dangling.mutable_graph()->mutable_node(1)->set_input(0, "nowhere");
  ExpectBadGraph(GraphTerm(dangling), "bad loss graph");
  LossTerm with_reduction = GraphTerm(ScaledMeanLoss(17, "s", "p"));
  with_reduction.reduction = Reduction::kSum;
  ExpectBadGraph(with_reduction, "already a scalar");
  LossTerm with_output = GraphTerm(ScaledMeanLoss(17, "s", "p"));
  with_output.output = "logits";
  ExpectBadGraph(with_output, "leave `output` empty");
}

TEST(LossTest, LossGraphsWithSubgraphsAreUnimplemented) {
  LossGraphBuilder loss;
  *loss.graph()->add_input() = Info("logits", onnx::TensorProto::FLOAT, {kBatch, kClasses});
  onnx::TensorProto* flag = loss.graph()->add_initializer();
  flag->set_name("flag");
  flag->set_data_type(onnx::TensorProto::BOOL);
  flag->add_int32_data(1);
  onnx::NodeProto* node = AddNode(loss.graph(), "If", {"flag"}, {"value"});
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto* attribute = node->add_attribute();
    attribute->set_name(branch);
    attribute->set_type(onnx::AttributeProto::GRAPH);
    onnx::GraphProto* body = attribute->mutable_g();
    body->set_name(branch);
    SetInt(AddNode(body, "ReduceMean", {"logits"}, {std::string(branch) + "_out"}), "keepdims", 0);
    *body->add_output() = Info(std::string(branch) + "_out", onnx::TensorProto::FLOAT, {});
  }
  *loss.graph()->add_output() = Info("value", onnx::TensorProto::FLOAT, {});
  ExpectBadGraph(GraphTerm(loss.model), "subgraphs", absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace traind::engine
