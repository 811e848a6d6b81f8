// trainctl with a model over 100 MiB (a Gemm with a 5200 x 5200 weight, written by Debian's onnx for Python):
// the model goes up as a blob by digest, the artifacts come back streamed into --out, the session is made from that
// directory (its files are on the daemon already), and a trained checkpoint (parameters + AdamW moments, > 300 MB)
// and the exported model come back with Download, every file matching its digest. Heavy: optimised build only.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/io/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/integration/trainctl_testing.h"
#include "tests/testing/process.h"
#include "traind/v1/training_service.pb.h"

namespace traind {
namespace {

namespace v1 = ::traind::v1;
using testing::CommandResult;
using testing::Field;
using testing::ParseJson;

constexpr char kMakeModel[] = R"(
import sys, numpy as np, onnx
from onnx import helper, numpy_helper
n, out = 5200, sys.argv[1]
random = np.random.RandomState(3)
weight = random.uniform(-0.01, 0.01, (n, n)).astype(np.float32)
graph = helper.make_graph(
    [helper.make_node('Gemm', ['x', 'W', 'b'], ['y'])], 'big',
    [helper.make_tensor_value_info('x', onnx.TensorProto.FLOAT, [2, n])],
    [helper.make_tensor_value_info('y', onnx.TensorProto.FLOAT, [2, n])],
    [numpy_helper.from_array(weight, 'W'), numpy_helper.from_array(np.zeros(n, np.float32), 'b')])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid('', 17)])
model.ir_version = 8
onnx.save(model, out + '/big.onnx')
np.save(out + '/x.npy', random.uniform(-1, 1, (2, n)).astype(np.float32))
np.save(out + '/target.npy', random.uniform(-1, 1, (2, n)).astype(np.float32))
)";

std::string FileSha256(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  engine::Sha256 hasher;
  std::string buffer(1 << 20, '\0');
  while (file.read(buffer.data(), static_cast<std::streamsize>(buffer.size())) || file.gcount() > 0) {
    hasher.Update(absl::string_view(buffer.data(), static_cast<size_t>(file.gcount())));
  }
  return hasher.FinishHex();
}

TEST(TrainctlLargeTest, AModelOver100MiBGoesUpAndItsArtifactsCheckpointAndExportComeBack) {
  const std::string dir = testing::MakeTempDir("large");
  const CommandResult made = testing::RunCommand("/usr/bin/python3", {"-c", kMakeModel, dir});
  ASSERT_EQ(made.exit_code, 0) << made.stderr_text;
  ASSERT_GT(std::filesystem::file_size(dir + "/big.onnx"), 100u << 20);
  auto daemon = testing::DaemonProcess::Start({"--max_message_bytes=67108864"});
  ASSERT_TRUE(daemon.ok()) << daemon.status();
  auto ok = [&](std::vector<std::string> args) {
    args.push_back("--address=" + (*daemon)->grpc_address());
    const CommandResult result = testing::Trainctl(args);
    EXPECT_EQ(result.exit_code, 0) << args[0] << " " << args[1] << "\n" << result.stdout_text << result.stderr_text;
    return result.stdout_text;
  };

  v1::GenerateArtifactsResponse artifacts;
  ASSERT_TRUE(ParseJson(ok({"artifacts", "generate", "--model", dir + "/big.onnx", "--loss", "mse", "--out",
                            dir + "/artifacts", "--json"}),
                        &artifacts));
  for (const v1::ArtifactFile& file : artifacts.files()) {
    EXPECT_EQ(FileSha256(dir + "/artifacts/" + file.file_name()), file.sha256_hex()) << file.file_name();
  }
  // The model went up as a blob: uploading it again sends nothing.
  google::protobuf::Struct upload;
  ASSERT_TRUE(ParseJson(ok({"upload", dir + "/big.onnx", "--json"}), &upload));
  EXPECT_FALSE(Field(upload, "uploaded").bool_value());

  v1::Session session;
  ASSERT_TRUE(ParseJson(ok({"session", "create", "--artifact-dir", dir + "/artifacts", "--json"}), &session));
  ok({"train", "--session", session.session_id(), "--input", "x=" + dir + "/x.npy", "--input",
      "target=" + dir + "/target.npy"});
  v1::SaveCheckpointResponse saved;
  ASSERT_TRUE(ParseJson(ok({"checkpoint", "save", "--session", session.session_id(), "--name", "big",
                            "--include-optimizer-state", "--json"}),
                        &saved));
  EXPECT_GT(saved.size_bytes(), 300 << 20);
  const std::string text = ok({"checkpoint", "download", "big", "--out", dir + "/big.ckpt", "--chunk-bytes",
                               std::to_string(8 << 20)});
  EXPECT_THAT(text, ::testing::HasSubstr("download big.ckpt: 50% ("));
  EXPECT_EQ(FileSha256(dir + "/big.ckpt"), saved.sha256_hex());

  google::protobuf::Struct exported;
  ASSERT_TRUE(ParseJson(ok({"export", "--session", session.session_id(), "--out", dir + "/exported.onnx", "--json"}),
                        &exported));
  EXPECT_GT(Field(exported, "size_bytes").number_value(), 100 << 20);
  EXPECT_EQ(FileSha256(dir + "/exported.onnx"), Field(exported, "sha256_hex").string_value());
}

}  // namespace
}  // namespace traind
