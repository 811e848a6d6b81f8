#include "tests/onnx_backend/backend_runner.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/model/model_loader.h"
#include "engine/model/tensor_proto.h"
#include "engine/runtime/session.h"

namespace traind::backend_test {
namespace {

using engine::DataType;
using engine::Tensor;

// ONNX's backend runner defaults (onnx/backend/test/runner/__init__.py).
constexpr double kDefaultRtol = 1e-3;
constexpr double kDefaultAtol = 1e-7;

struct Tolerance {
  double rtol;
  double atol;
};

// Tests that need looser bounds than the defaults, with the reason. Keep this short and justified.
const std::map<std::string, Tolerance>& ToleranceOverrides() {
  static const auto* overrides = new std::map<std::string, Tolerance>{};
  return *overrides;
}

// Test data that is wrong in Debian's libonnx-testdata (onnx 1.12) and fixed upstream: each entry
// turns the shipped model into the one its expected outputs were generated from, cited. The kernels
// stay spec-exact; an entry must be a no-op on corrected data. Keep this short.
using ModelErratum = void (*)(onnx::ModelProto& model);
const std::map<std::string, ModelErratum>& ModelErrata() {
  static const auto* errata = new std::map<std::string, ModelErratum>{
      // onnx/onnx#7749: the generator (backend/test/case/node/adam.py, export_adam_multiple)
      // computes the outputs with epsilon = 1e-2 but, before the fix, did not pass epsilon to
      // make_node, so model.onnx falls back to the schema default 1e-6 (X_new then differs by
      // ~0.5%). Add the attribute only where it is missing.
      {"node/test_adam_multiple",
       [](onnx::ModelProto& model) {
         for (auto& node : *model.mutable_graph()->mutable_node()) {
           if (node.op_type() != "Adam") continue;
           bool has_epsilon = false;
           for (const auto& attribute : node.attribute()) has_epsilon |= attribute.name() == "epsilon";
           if (has_epsilon) continue;
           auto* epsilon = node.add_attribute();
           epsilon->set_name("epsilon");
           epsilon->set_type(onnx::AttributeProto::FLOAT);
           epsilon->set_f(1e-2f);
         }
       }},
  };
  return *errata;
}

bool IsDirectory(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISDIR(info.st_mode);
}

bool IsFile(const std::string& path) {
  struct stat info;
  return stat(path.c_str(), &info) == 0 && S_ISREG(info.st_mode);
}

std::vector<std::string> ListSubdirs(const std::string& dir) {
  std::vector<std::string> names;
  DIR* handle = opendir(dir.c_str());
  if (handle == nullptr) return names;
  while (dirent* entry = readdir(handle)) {
    const std::string name = entry->d_name;
    if (name == "." || name == "..") continue;
    if (IsDirectory(dir + "/" + name)) names.push_back(name);
  }
  closedir(handle);
  std::sort(names.begin(), names.end());
  return names;
}

std::string Basename(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool ReadFile(const std::string& path, std::string* contents) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return false;
  std::ostringstream buffer;
  buffer << file.rdbuf();
  *contents = buffer.str();
  return true;
}

TestResult Skip(TestResult result, std::string reason) {
  result.outcome = Outcome::kSkip;
  result.reason = std::move(reason);
  return result;
}

TestResult Fail(TestResult result, std::string reason) {
  result.outcome = Outcome::kFail;
  result.reason = std::move(reason);
  return result;
}

// kUnimplemented (unsupported op / dtype / opset / value kind) is a SKIP, anything else a FAIL.
TestResult FromStatus(TestResult result, const absl::Status& status, const char* stage) {
  if (status.code() == absl::StatusCode::kUnimplemented) {
    return Skip(std::move(result), std::string(status.message()));
  }
  return Fail(std::move(result), absl::StrCat(stage, ": ", status.ToString()));
}

double ElementAsDouble(const Tensor& tensor, int64_t i) {
  const void* data = tensor.raw_data();
  switch (tensor.dtype()) {
    case DataType::kFloat32: return static_cast<const float*>(data)[i];
    case DataType::kFloat64: return static_cast<const double*>(data)[i];
    case DataType::kFloat16:
      return engine::Float16ToFloat(static_cast<const engine::Float16*>(data)[i]);
    case DataType::kBFloat16:
      return engine::BFloat16ToFloat(static_cast<const engine::BFloat16*>(data)[i]);
    default: return 0;
  }
}

// Integers compare exactly as bit patterns of their width (int64 and uint64 included).
bool IntegerElementEqual(const Tensor& a, const Tensor& b, int64_t i) {
  const size_t size = engine::ElementSize(a.dtype());
  return std::memcmp(static_cast<const char*>(a.raw_data()) + i * size,
                     static_cast<const char*>(b.raw_data()) + i * size, size) == 0;
}

// Empty string when equal within tolerance, otherwise what differs.
std::string Compare(const Tensor& expected, const Tensor& actual, Tolerance tolerance) {
  if (!actual.defined()) return "output missing";
  if (expected.dtype() != actual.dtype()) {
    return absl::StrCat("dtype ", engine::DataTypeName(actual.dtype()), ", expected ",
                        engine::DataTypeName(expected.dtype()));
  }
  if (expected.shape() != actual.shape()) {
    return absl::StrCat("shape ", engine::ShapeToString(actual.shape()), ", expected ",
                        engine::ShapeToString(expected.shape()));
  }
  const DataType dtype = expected.dtype();
  const bool floating = dtype == DataType::kFloat32 || dtype == DataType::kFloat64 ||
                        dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
  int64_t mismatches = 0;
  int64_t first = -1;
  for (int64_t i = 0; i < expected.num_elements(); ++i) {
    bool equal;
    if (floating) {
      const double e = ElementAsDouble(expected, i);
      const double a = ElementAsDouble(actual, i);
      // numpy.testing.assert_allclose: NaNs equal each other, infinities must match exactly.
      if (std::isnan(e) || std::isnan(a)) {
        equal = std::isnan(e) && std::isnan(a);
      } else if (std::isinf(e) || std::isinf(a)) {
        equal = e == a;
      } else {
        equal = std::fabs(a - e) <= tolerance.atol + tolerance.rtol * std::fabs(e);
      }
    } else {
      equal = IntegerElementEqual(expected, actual, i);
    }
    if (!equal) {
      if (first < 0) first = i;
      ++mismatches;
    }
  }
  if (mismatches == 0) return "";
  std::string detail;
  if (floating) {
    detail = absl::StrCat(" (first at ", first, ": got ", ElementAsDouble(actual, first),
                          ", expected ", ElementAsDouble(expected, first), ")");
  }
  return absl::StrCat(mismatches, " of ", expected.num_elements(), " elements differ", detail);
}

// onnx 1.12's bfloat16 test data is stored as uint16 tensors holding the bfloat16 bit patterns
// (numpy has no bfloat16); reinterpret it when the model declares bfloat16.
Tensor AdaptBFloat16TestData(const Tensor& tensor, DataType declared) {
  if (declared == DataType::kBFloat16 && tensor.dtype() == DataType::kUint16) {
    return Tensor(DataType::kBFloat16, tensor.shape(), tensor.buffer(), tensor.num_elements());
  }
  return tensor;
}

// Reads input_N.pb / output_N.pb for N = 0, 1, ... until one is missing.
absl::StatusOr<std::vector<onnx::TensorProto>> ReadTensorFiles(const std::string& dir,
                                                               const std::string& prefix) {
  std::vector<onnx::TensorProto> tensors;
  for (int i = 0;; ++i) {
    const std::string path = absl::StrCat(dir, "/", prefix, "_", i, ".pb");
    std::string bytes;
    if (!ReadFile(path, &bytes)) break;
    onnx::TensorProto proto;
    if (!proto.ParseFromString(bytes)) {
      return absl::InvalidArgumentError(absl::StrCat("cannot parse ", path));
    }
    tensors.push_back(std::move(proto));
  }
  return tensors;
}

TestResult RunTestUnguarded(const std::string& test_dir, TestResult result) {
  const std::string model_path = test_dir + "/model.onnx";
  if (!IsFile(model_path)) {
    return Skip(std::move(result), IsFile(test_dir + "/data.json")
                                       ? "model not present (data.json only names a download)"
                                       : "no model.onnx");
  }
  auto model = engine::LoadModelFromFile(model_path);
  if (!model.ok()) return FromStatus(std::move(result), model.status(), "load");
  auto erratum = ModelErrata().find(result.name);
  if (erratum != ModelErrata().end()) erratum->second(*model);
  auto session = engine::Session::Create(*model);
  if (!session.ok()) return FromStatus(std::move(result), session.status(), "compile");
  const engine::Plan& plan = (*session)->plan();

  Tolerance tolerance{kDefaultRtol, kDefaultAtol};
  auto override_it = ToleranceOverrides().find(result.name);
  if (override_it != ToleranceOverrides().end()) tolerance = override_it->second;

  int data_sets = 0;
  for (const std::string& set_name : ListSubdirs(test_dir)) {
    if (!absl::StartsWith(set_name, "test_data_set_")) continue;
    ++data_sets;
    const std::string set_dir = test_dir + "/" + set_name;
    auto input_protos = ReadTensorFiles(set_dir, "input");
    auto output_protos = ReadTensorFiles(set_dir, "output");
    if (!input_protos.ok() || !output_protos.ok()) {
      // Sequence/optional values are stored as other message types.
      return Skip(std::move(result), "test data is not plain tensors (sequence or optional)");
    }
    if (input_protos->size() != plan.inputs.size()) {
      return Fail(std::move(result), absl::StrCat(set_name, ": ", input_protos->size(),
                                                  " input files for ", plan.inputs.size(),
                                                  " graph inputs"));
    }
    std::vector<Tensor> inputs;
    for (size_t i = 0; i < input_protos->size(); ++i) {
      auto tensor = engine::TensorFromProto((*input_protos)[i]);
      if (!tensor.ok()) return FromStatus(std::move(result), tensor.status(), "input data");
      inputs.push_back(AdaptBFloat16TestData(*tensor, plan.inputs[i].dtype));
    }
    auto outputs = (*session)->Run(inputs);
    if (!outputs.ok()) return FromStatus(std::move(result), outputs.status(), set_name.c_str());
    if (output_protos->size() != outputs->size()) {
      return Fail(std::move(result), absl::StrCat(set_name, ": ", outputs->size(),
                                                  " outputs, expected ", output_protos->size()));
    }
    for (size_t i = 0; i < outputs->size(); ++i) {
      auto expected = engine::TensorFromProto((*output_protos)[i]);
      if (!expected.ok()) return FromStatus(std::move(result), expected.status(), "output data");
      const std::string difference = Compare(
          AdaptBFloat16TestData(*expected, plan.outputs[i].dtype), (*outputs)[i], tolerance);
      if (!difference.empty()) {
        return Fail(std::move(result), absl::StrCat(set_name, " output ", i, " '",
                                                    plan.outputs[i].name, "': ", difference));
      }
    }
  }
  if (data_sets == 0) return Skip(std::move(result), "no test_data_set_*");
  result.outcome = Outcome::kPass;
  return result;
}

}  // namespace

std::vector<std::string> FindTestDirs(const std::string& dir) {
  if (IsFile(dir + "/model.onnx") || IsFile(dir + "/data.json")) return {dir};
  std::vector<std::string> dirs;
  for (const std::string& name : ListSubdirs(dir)) dirs.push_back(dir + "/" + name);
  return dirs;
}

TestResult RunBackendTest(const std::string& test_dir) {
  std::string parent = test_dir;
  while (parent.size() > 1 && parent.back() == '/') parent.pop_back();
  const size_t slash = parent.find_last_of('/');
  parent = slash == std::string::npos ? "." : parent.substr(0, slash);
  TestResult result;
  result.name = absl::StrCat(Basename(parent), "/", Basename(test_dir));
  // The engine reports errors as Status; this only catches what escapes anyway (bad_alloc from
  // protobuf, a throwing library) so that one test cannot take the whole run down.
  try {
    return RunTestUnguarded(test_dir, result);
  } catch (const std::exception& e) {
    return Fail(std::move(result), absl::StrCat("exception: ", e.what()));
  } catch (...) {
    return Fail(std::move(result), "unknown exception");
  }
}

std::string FormatResult(const TestResult& result) {
  switch (result.outcome) {
    case Outcome::kPass: return absl::StrCat("PASS ", result.name);
    case Outcome::kFail: return absl::StrCat("FAIL ", result.name, ": ", result.reason);
    case Outcome::kSkip: return absl::StrCat("SKIP ", result.name, ": ", result.reason);
  }
  return "";
}

}  // namespace traind::backend_test
