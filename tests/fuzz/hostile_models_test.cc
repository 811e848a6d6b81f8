// The hostile-model corpus (make_hostile_models.py, generated afresh into the test's temporary directory) through
// the engine in process, as the daemon would run it: every malformed or hostile model is refused with
// kInvalidArgument, kUnimplemented or kFailedPrecondition (the daemon's INVALID_ARGUMENT / FAILED_PRECONDITION),
// every resource bomb with kResourceExhausted naming the limit, and nothing crashes, hangs or allocates beyond the
// budget (run under ASan too). External-data cases load from their directory (FIFOs, devices, symlinks, paths
// outside the folder).
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/fuzz/harness.h"
#include "tests/testing/process.h"

namespace traind::fuzz {
namespace {

struct Case {
  std::string path;
  std::string category;
  std::string expect;  // "refused" or "resource"
};

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<Case> GenerateCorpus(const std::string& directory) {
  const testing::CommandResult generated = testing::RunCommand(
      "/usr/bin/python3", {testing::RunfilePath("tests/fuzz/make_hostile_models.py"), directory}, {},
      absl::Seconds(300));
  EXPECT_EQ(generated.exit_code, 0) << generated.stderr_text;
  std::vector<Case> cases;
  for (absl::string_view line : absl::StrSplit(ReadFile(directory + "/manifest.tsv"), '\n', absl::SkipEmpty())) {
    std::vector<std::string> fields = absl::StrSplit(line, '\t');
    if (fields.size() == 3) cases.push_back({directory + "/" + fields[0], fields[1], fields[2]});
  }
  return cases;
}

// What the daemon does with a model, in process: load (with its directory for external data), compile and run;
// then generate artifacts and train.
absl::Status Exercise(const Case& c, const HarnessLimits& limits) {
  const std::string bytes = ReadFile(c.path);
  const std::string directory = c.path.substr(0, c.path.find_last_of('/') + 1);
  absl::Status status = LoadCompileAndRun(bytes, limits, c.category == "external" ? directory : "");
  if (!status.ok()) return status;
  return GenerateAndTrain(bytes, limits);
}

TEST(HostileModelsTest, EveryCaseIsRefusedPreciselyAndNothingCrashes) {
  const std::vector<Case> cases = GenerateCorpus(testing::MakeTempDir("hostile"));
  ASSERT_GE(cases.size(), 300u);
  HarnessLimits limits;
  limits.memory_budget_bytes = int64_t{256} << 20;
  limits.max_decoded_bytes = int64_t{256} << 20;
  int refused = 0, exhausted = 0;
  // Every case's answer, for review: bazel-testlogs/tests/fuzz/hostile_models_test/test.outputs/answers.tsv.
  const char* outputs = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  std::ofstream answers(std::string(outputs != nullptr ? outputs : "/tmp") + "/answers.tsv");
  for (const Case& c : cases) {
    const absl::Time start = absl::Now();
    const absl::Status status = Exercise(c, limits);
    const absl::Duration took = absl::Now() - start;
    answers << c.path.substr(c.path.find("/hostile") + 1) << '\t' << status << '\n';
    EXPECT_LT(took, absl::Seconds(20)) << c.path << " took " << took;
    if (c.expect == "resource") {
      EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << c.path << ": " << status;
      EXPECT_THAT(std::string(status.message()), ::testing::AnyOf(::testing::HasSubstr("limit"),
                                                                  ::testing::HasSubstr("budget")))
          << c.path << ": " << status;
      ++exhausted;
    } else {
      EXPECT_THAT(status.code(), ::testing::AnyOf(absl::StatusCode::kInvalidArgument, absl::StatusCode::kUnimplemented,
                                                  absl::StatusCode::kFailedPrecondition))
          << c.path << " (" << c.category << "): " << status;
      ++refused;
    }
  }
  std::fprintf(stderr, "%d hostile models refused, %d resource bombs refused\n", refused, exhausted);
}

}  // namespace
}  // namespace traind::fuzz
