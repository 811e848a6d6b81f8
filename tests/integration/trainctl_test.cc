// Runs the real trainctl binary against a real traind: health and info, --help of every command, exit codes, TLS,
// the bearer token (sent as metadata, checked by a daemon with tenants), and progress output (plain lines in a
// pipe, a bar on a terminal).
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "engine/io/file_util.h"
#include "gmock/gmock.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "tests/integration/trainctl_testing.h"
#include "tests/testing/process.h"
#include "tests/testing/test_certs.h"
#include "traind/v1/training_service.grpc.pb.h"

namespace traind {
namespace {

namespace v1 = ::traind::v1;
using ::testing::HasSubstr;
using ::testing::Not;
using testing::CommandResult;
using testing::Field;
using testing::ParseJson;
using testing::Trainctl;

std::string WriteTempFile(const std::string& name, const std::string& content) {
  const std::string path = testing::MakeTempDir("files") + "/" + name;
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

TEST(TrainctlTest, HealthPrintsServingAndExitsZero) {
  auto daemon = testing::DaemonProcess::Start({});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  CommandResult text = Trainctl({"health", "--address", (*daemon)->grpc_address()});
  EXPECT_EQ(text.exit_code, 0) << text.stderr_text;
  EXPECT_THAT(text.stdout_text, HasSubstr("SERVING"));
  CommandResult json = Trainctl({"--json", "health", "--address=" + (*daemon)->grpc_address()});
  EXPECT_EQ(json.exit_code, 0);
  google::protobuf::Struct health;
  ASSERT_TRUE(ParseJson(json.stdout_text, &health));
  EXPECT_EQ(Field(health, "status").string_value(), "SERVING");
  CommandResult info = Trainctl({"info", "--address=" + (*daemon)->grpc_address(), "--json"});
  EXPECT_EQ(info.exit_code, 0);
  v1::ServerInfo server_info;
  ASSERT_TRUE(ParseJson(info.stdout_text, &server_info));
  EXPECT_TRUE(server_info.implemented_rpcs().at("GetServerInfo"));
  EXPECT_THAT(Trainctl({"info", "--address=" + (*daemon)->grpc_address()}).stdout_text, HasSubstr("implemented:"));
}

TEST(TrainctlTest, UnreachableDaemonExitsThreeWithJsonError) {
  CommandResult result = Trainctl({"health", "--address=127.0.0.1:1", "--timeout=2", "--json"});
  EXPECT_EQ(result.exit_code, 3);
  google::protobuf::Struct error;
  ASSERT_TRUE(ParseJson(result.stdout_text, &error));
  EXPECT_EQ(Field(Field(error, "error").struct_value(), "code").string_value(), "UNAVAILABLE");
  EXPECT_EQ(Field(error, "command").string_value(), "health");
}

TEST(TrainctlTest, UsageErrorsExitTwo) {
  EXPECT_EQ(Trainctl({"health", "--no-such-flag"}).exit_code, 2);
  EXPECT_EQ(Trainctl({}).exit_code, 2);
  EXPECT_EQ(Trainctl({"health", "--tls-cert=/x.pem"}).exit_code, 2);  // a certificate without its key
  EXPECT_EQ(Trainctl({"session"}).exit_code, 2);
  EXPECT_EQ(Trainctl({"session", "destroy"}).exit_code, 2);
  EXPECT_EQ(Trainctl({"frobnicate"}).exit_code, 2);
}

// The command words of every command, read from the top-level help of the binary itself.
std::vector<std::string> CommandsFromHelp() {
  const CommandResult help = Trainctl({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  std::vector<std::string> commands;
  bool in_list = false;
  for (absl::string_view line : absl::StrSplit(help.stdout_text, '\n')) {
    if (line == "commands:") {
      in_list = true;
      continue;
    }
    if (!in_list) continue;
    if (line.empty()) break;
    // "  session show ID     summary": the head ends where two spaces separate it from the summary.
    absl::string_view head = absl::StripLeadingAsciiWhitespace(line);
    head = head.substr(0, head.find("  "));
    std::vector<std::string> words;
    for (absl::string_view word : absl::StrSplit(head, ' ', absl::SkipEmpty())) {
      if (!absl::ascii_islower(word[0])) break;  // ID, FILE, NAME: arguments
      words.emplace_back(word);
    }
    if (!words.empty() && words[0] != "help") commands.push_back(absl::StrJoin(words, " "));
  }
  return commands;
}

TEST(TrainctlTest, EveryCommandHasHelp) {
  const std::vector<std::string> commands = CommandsFromHelp();
  EXPECT_GE(commands.size(), 33u);
  for (const std::string& command : commands) {
    std::vector<std::string> args = absl::StrSplit(command, ' ');
    args.push_back("--help");
    const CommandResult help = Trainctl(args);
    EXPECT_EQ(help.exit_code, 0) << command;
    EXPECT_TRUE(absl::StartsWith(help.stdout_text, "usage: trainctl " + command)) << help.stdout_text;
    EXPECT_THAT(help.stdout_text, HasSubstr("exit codes: 0 ok")) << command;
    EXPECT_THAT(help.stdout_text, HasSubstr("JSON:")) << command;
    std::vector<std::string> help_args = {"help"};
    for (absl::string_view word : absl::StrSplit(command, ' ')) help_args.emplace_back(word);
    EXPECT_EQ(Trainctl(help_args).stdout_text, help.stdout_text) << command;
  }
  for (const char* group : {"artifacts", "session", "lr", "checkpoint", "params", "job", "optimizer"}) {
    const CommandResult help = Trainctl({group, "--help"});
    EXPECT_EQ(help.exit_code, 0) << group;
    EXPECT_THAT(help.stdout_text, HasSubstr(absl::StrCat("usage: trainctl ", group, " <subcommand>")));
  }
}

TEST(TrainctlTest, MutualTlsFlagsWork) {
  const testing::PemFiles pki = testing::GenerateTestPki(testing::MakeTempDir("pki"), "");
  auto daemon = testing::DaemonProcess::Start(
      {"--tls_cert=" + pki.server_cert, "--tls_key=" + pki.server_key, "--tls_client_ca=" + pki.ca_cert});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const std::string address = "--address=" + (*daemon)->grpc_address();
  CommandResult without_cert = Trainctl({"health", address, "--tls-ca=" + pki.ca_cert, "--timeout=3"});
  EXPECT_EQ(without_cert.exit_code, 3) << without_cert.stdout_text;
  CommandResult with_cert = Trainctl({"health", address, "--tls-ca=" + pki.ca_cert, "--tls-cert=" + pki.client_cert,
                                      "--tls-key=" + pki.client_key});
  EXPECT_EQ(with_cert.exit_code, 0) << with_cert.stderr_text;
  CommandResult listed = Trainctl({"session", "list", address, "--tls-ca=" + pki.ca_cert,
                                   "--tls-cert=" + pki.client_cert, "--tls-key=" + pki.client_key, "--json"});
  EXPECT_EQ(listed.exit_code, 0) << listed.stderr_text;
}

// A gRPC server in this process on a free loopback port; `*address_flag` gets "--address=127.0.0.1:PORT".
std::unique_ptr<grpc::Server> StartTestServer(grpc::Service* service, std::string* address_flag) {
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  *address_flag = absl::StrCat("--address=127.0.0.1:", port);
  return server;
}

// A TrainingService that records the authorization metadata of each call (what trainctl sent on the wire).
class MetadataRecorder final : public v1::TrainingService::Service {
 public:
  grpc::Status GetServerInfo(grpc::ServerContext* context, const v1::GetServerInfoRequest*,
                             v1::ServerInfo* response) override {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto found = context->client_metadata().find("authorization");
    seen_.push_back(found == context->client_metadata().end() ? "<none>"
                                                              : std::string(found->second.data(), found->second.size()));
    response->set_version("recorder");
    return grpc::Status::OK;
  }
  std::vector<std::string> seen() {
    std::lock_guard<std::mutex> lock(mutex_);
    return seen_;
  }

 private:
  std::mutex mutex_;
  std::vector<std::string> seen_;
};

TEST(TrainctlTest, TokenFromFileOrEnvironmentTravelsAsBearerMetadata) {
  MetadataRecorder recorder;
  std::string address;
  std::unique_ptr<grpc::Server> server = StartTestServer(&recorder, &address);
  ASSERT_NE(server, nullptr);
  const std::string token_file = WriteTempFile("token", "file-token-123\n");

  EXPECT_EQ(Trainctl({"info", address}).exit_code, 0);
  EXPECT_EQ(Trainctl({"info", address, "--token-file", token_file}).exit_code, 0);
  EXPECT_EQ(Trainctl({"info", address}, {"TRAIND_TOKEN=env-token-456"}).exit_code, 0);
  // The file wins over the environment.
  EXPECT_EQ(Trainctl({"info", address, "--token-file=" + token_file}, {"TRAIND_TOKEN=env-token-456"}).exit_code, 0);
  EXPECT_THAT(recorder.seen(), ::testing::ElementsAre("<none>", "Bearer file-token-123", "Bearer env-token-456",
                                                      "Bearer file-token-123"));
  // Never on the command line (ps would show it), never a malformed one.
  const CommandResult on_command_line = Trainctl({"info", address, "--token=secret"});
  EXPECT_EQ(on_command_line.exit_code, 2);
  EXPECT_THAT(on_command_line.stderr_text, HasSubstr("--token-file"));
  EXPECT_EQ(Trainctl({"info", address, "--token-file", WriteTempFile("bad", "two words")}).exit_code, 2);
  EXPECT_EQ(Trainctl({"info", address, "--token-file", "/no/such/file"}).exit_code, 2);
  EXPECT_EQ(recorder.seen().size(), 4u);  // the refused invocations sent nothing
  server->Shutdown();
}

TEST(TrainctlTest, TokensAgainstADaemonWithTenants) {
  const std::string tenants = WriteTempFile(
      "tenants.conf", absl::StrCat("[tenant alice]\ntoken_sha256 = ", engine::Sha256Hex("alice-secret"),
                                   "\n\n[tenant bob]\ntoken_sha256 = ", engine::Sha256Hex("bob-secret"), "\n"));
  auto daemon = testing::DaemonProcess::Start({"--tenants_file=" + tenants});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const std::string address = "--address=" + (*daemon)->grpc_address();
  const std::string alice = WriteTempFile("alice", "alice-secret\n");

  const CommandResult listed = Trainctl({"session", "list", address, "--token-file", alice, "--json"});
  EXPECT_EQ(listed.exit_code, 0) << listed.stderr_text;
  const CommandResult from_env = Trainctl({"session", "list", address}, {"TRAIND_TOKEN=bob-secret"});
  EXPECT_EQ(from_env.exit_code, 0) << from_env.stderr_text;
  for (const std::vector<std::string>& env :
       std::vector<std::vector<std::string>>{{}, {"TRAIND_TOKEN=mallory-guess"}}) {
    const CommandResult refused = Trainctl({"session", "list", address, "--json"}, env);
    EXPECT_EQ(refused.exit_code, 3) << refused.stdout_text;
    google::protobuf::Struct error;
    ASSERT_TRUE(ParseJson(refused.stdout_text, &error));
    EXPECT_EQ(Field(Field(error, "error").struct_value(), "code").string_value(), "UNAUTHENTICATED");
  }
  // Health stays unauthenticated.
  EXPECT_EQ(Trainctl({"health", address}).exit_code, 0);
  // What alice uploads, bob does not see: GetBlobInfo answers NOT_FOUND for him, so his upload really sends it.
  const std::string blob = WriteTempFile("blob.bin", "tenant data");
  google::protobuf::Struct first, second;
  ASSERT_TRUE(ParseJson(Trainctl({"upload", blob, address, "--token-file", alice, "--json"}).stdout_text, &first));
  EXPECT_TRUE(Field(first, "uploaded").bool_value());
  ASSERT_TRUE(ParseJson(Trainctl({"upload", blob, address, "--json"}, {"TRAIND_TOKEN=bob-secret"}).stdout_text,
                        &second));
  EXPECT_TRUE(Field(second, "uploaded").bool_value());
}

// Serves Download with a scripted answer: the content, announced with a size and digest that may lie.
class ScriptedDownloads final : public v1::TrainingService::Service {
 public:
  std::string content;
  std::string announced_sha256;
  int64_t announced_bytes = 0;
  std::string file_name = "served.bin";

  grpc::Status Download(grpc::ServerContext*, const v1::DownloadRequest* request,
                        grpc::ServerWriter<v1::DownloadResponse>* writer) override {
    v1::DownloadResponse header;
    header.mutable_header()->set_total_bytes(announced_bytes);
    header.mutable_header()->set_sha256_hex(announced_sha256);
    header.mutable_header()->set_file_name(file_name);
    writer->Write(header);
    const size_t chunk = request->chunk_bytes() > 0 ? static_cast<size_t>(request->chunk_bytes()) : 1 << 20;
    for (size_t offset = 0; offset < content.size(); offset += chunk) {
      v1::DownloadResponse part;
      part.set_chunk(content.substr(offset, chunk));
      if (!writer->Write(part)) break;
    }
    return grpc::Status::OK;
  }
};

TEST(TrainctlTest, DownloadsAreCheckedAgainstTheAnnouncedSizeAndDigest) {
  ScriptedDownloads service;
  std::string address;
  std::unique_ptr<grpc::Server> server = StartTestServer(&service, &address);
  ASSERT_NE(server, nullptr);
  const std::string dir = testing::MakeTempDir("downloads");
  service.content = std::string(10000, 'x');
  service.announced_bytes = 10000;
  service.announced_sha256 = engine::Sha256Hex(service.content);

  // Honest: written, in lines of progress (chunks of 1000 bytes), under the suggested name in a directory.
  const CommandResult honest = Trainctl({"checkpoint", "download", "c", "--out", dir + "/", "--chunk-bytes", "1000",
                                         address});
  ASSERT_EQ(honest.exit_code, 0) << honest.stderr_text;
  EXPECT_THAT(honest.stdout_text, HasSubstr("download served.bin: 50% (4.9 KiB of 9.8 KiB)"));
  std::ifstream written(dir + "/served.bin", std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(written), {}), service.content);

  // A digest that does not match, a size that does not match (short or long): DATA_LOSS, exit 3, nothing written.
  struct Lie {
    const char* what;
    std::string sha256;
    int64_t bytes;
  };
  for (const Lie& lie : {Lie{"digest", engine::Sha256Hex("something else"), 10000},
                         Lie{"short", engine::Sha256Hex(service.content), 20000},
                         Lie{"long", engine::Sha256Hex(service.content), 5000}}) {
    service.announced_sha256 = lie.sha256;
    service.announced_bytes = lie.bytes;
    const std::string target = dir + "/" + lie.what + ".bin";
    const CommandResult result = Trainctl({"checkpoint", "download", "c", "--out", target, address, "--json"});
    EXPECT_EQ(result.exit_code, 3) << lie.what << result.stdout_text;
    EXPECT_THAT(result.stdout_text, HasSubstr("DATA_LOSS")) << lie.what;
    EXPECT_FALSE(std::filesystem::exists(target)) << lie.what;
  }
  // A suggested name that would leave the directory is not used.
  service.announced_sha256 = engine::Sha256Hex(service.content);
  service.announced_bytes = 10000;
  service.file_name = "../escape.bin";
  EXPECT_EQ(Trainctl({"checkpoint", "download", "c", "--out", dir + "/", address}).exit_code, 2);
  EXPECT_FALSE(std::filesystem::exists(dir + "/../escape.bin"));
  server->Shutdown();
}

std::string RandomBytes(size_t size) {
  std::mt19937_64 random(42);
  std::string bytes(size, '\0');
  for (char& byte : bytes) byte = static_cast<char>(random());
  return bytes;
}

TEST(TrainctlTest, UploadProgressIsPlainLinesWhenStdoutIsNotATerminal) {
  auto daemon = testing::DaemonProcess::Start({});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const std::string address = "--address=" + (*daemon)->grpc_address();
  const std::string content = RandomBytes(3 << 20);
  const std::string file = WriteTempFile("big.bin", content);
  const CommandResult uploaded = Trainctl({"upload", file, address, "--chunk-bytes", "65536"});
  ASSERT_EQ(uploaded.exit_code, 0) << uploaded.stderr_text;
  EXPECT_THAT(uploaded.stdout_text, Not(HasSubstr("\r")));
  EXPECT_THAT(uploaded.stdout_text, HasSubstr("upload big.bin: 10% ("));
  EXPECT_THAT(uploaded.stdout_text, HasSubstr("upload big.bin: 100% (3.0 MiB of 3.0 MiB)"));
  EXPECT_THAT(uploaded.stdout_text, HasSubstr("blob " + engine::Sha256Hex(content)));
  // The second time the daemon has it: nothing is sent.
  const CommandResult again = Trainctl({"upload", file, address, "--chunk-bytes", "65536"});
  EXPECT_THAT(again.stdout_text, HasSubstr("already on the daemon"));
  EXPECT_THAT(again.stdout_text, Not(HasSubstr("%")));
  // --json: one document, no progress.
  const CommandResult json = Trainctl({"upload", file, address, "--chunk-bytes", "65536", "--force", "--json"});
  google::protobuf::Struct document;
  ASSERT_TRUE(ParseJson(json.stdout_text, &document));
  EXPECT_TRUE(Field(document, "uploaded").bool_value());
  EXPECT_EQ(Field(document, "size_bytes").number_value(), 3 << 20);
}

TEST(TrainctlTest, UploadProgressIsABarOnATerminal) {
  auto daemon = testing::DaemonProcess::Start({});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  const std::string file = WriteTempFile("big.bin", RandomBytes(2 << 20));
  // script(1) (util-linux) runs the command on a pseudo-terminal and copies what it printed.
  const std::string command = absl::StrCat("'", testing::RunfilePath("client/trainctl"), "' upload '", file,
                                           "' --address=", (*daemon)->grpc_address(), " --chunk-bytes 32768");
  const CommandResult on_tty = testing::RunCommand("/usr/bin/script", {"-qec", command, "/dev/null"});
  ASSERT_EQ(on_tty.exit_code, 0) << on_tty.stdout_text << on_tty.stderr_text;
  EXPECT_THAT(on_tty.stdout_text, HasSubstr("\r\x1b[Kupload big.bin ["));
  EXPECT_THAT(on_tty.stdout_text, HasSubstr("100% 2.0 MiB of 2.0 MiB"));
  EXPECT_THAT(on_tty.stdout_text, HasSubstr("uploaded "));
}

}  // namespace
}  // namespace traind
