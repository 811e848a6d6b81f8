// Running the real trainctl binary in integration tests and reading its --json output.
#ifndef TRAIND_TESTS_INTEGRATION_TRAINCTL_TESTING_H_
#define TRAIND_TESTS_INTEGRATION_TRAINCTL_TESTING_H_

#include <string>
#include <vector>

#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/testing/process.h"

namespace traind::testing {

// trainctl with `args` (and `env` "NAME=VALUE" entries); stdout and stderr apart.
inline CommandResult Trainctl(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  return RunCommand(RunfilePath("client/trainctl"), args, env, absl::Seconds(120));
}

// Parses trainctl's --json output strictly (unknown fields are an error) into `message`.
template <typename Message>
::testing::AssertionResult ParseJson(const std::string& json, Message* message) {
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status = google::protobuf::util::JsonStringToMessage(json, message, options);
  if (status.ok()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "not a " << message->GetTypeName() << ": " << status.ToString() << "\n"
                                       << json;
}

inline std::string MessageJson(const google::protobuf::Message& message) {
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(message, &json);
  return json;
}

// A field of a JSON object document ("" / 0 when absent).
inline const google::protobuf::Value& Field(const google::protobuf::Struct& document, const std::string& name) {
  static const google::protobuf::Value* const kNull = new google::protobuf::Value();
  const auto found = document.fields().find(name);
  return found == document.fields().end() ? *kNull : found->second;
}

}  // namespace traind::testing

#endif  // TRAIND_TESTS_INTEGRATION_TRAINCTL_TESTING_H_
