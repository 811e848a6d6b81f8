// Runs ONNX backend-test folders (model.onnx + test_data_set_*/{input,output}_N.pb) through the
// engine and reports PASS / FAIL / SKIP per test. Unsupported ops, dtypes, opsets and non-tensor
// values are SKIPs; everything else that goes wrong is a FAIL; nothing may crash the process.
#ifndef TRAIND_TESTS_ONNX_BACKEND_BACKEND_RUNNER_H_
#define TRAIND_TESTS_ONNX_BACKEND_BACKEND_RUNNER_H_

#include <string>
#include <vector>

namespace traind::backend_test {

enum class Outcome { kPass, kFail, kSkip };

struct TestResult {
  std::string name;  // "<suite dir basename>/<test dir>", e.g. "node/test_add".
  Outcome outcome = Outcome::kFail;
  std::string reason;  // Empty for PASS.
};

// Every test folder under `dir` (or `dir` itself if it holds a model.onnx), sorted by name.
std::vector<std::string> FindTestDirs(const std::string& dir);

TestResult RunBackendTest(const std::string& test_dir);

// "PASS name", "FAIL name: reason", "SKIP name: reason".
std::string FormatResult(const TestResult& result);

}  // namespace traind::backend_test

#endif  // TRAIND_TESTS_ONNX_BACKEND_BACKEND_RUNNER_H_
