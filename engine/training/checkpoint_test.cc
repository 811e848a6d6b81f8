#include "engine/training/checkpoint.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"
#include "engine/io/file_util.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::engine {
namespace {

using ::testing::HasSubstr;

constexpr size_t kHeaderBytes = 88;  // As documented in checkpoint.h.

std::string TestDir(const std::string& name) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  std::filesystem::create_directories(dir);
  return dir;
}

Tensor Floats(Shape shape, std::vector<float> values) {
  return *Tensor::FromVector<float>(std::move(shape), values);
}

std::vector<float> ValuesOf(const Tensor& tensor) {
  return std::vector<float>(tensor.data<float>(), tensor.data<float>() + tensor.num_elements());
}

// Two trainable float parameters (one with a gradient), one frozen int64 parameter, AdamW-like optimizer state,
// a scheduler and properties of all three types.
CheckpointState MakeState() {
  CheckpointState state;
  state.parameters.push_back({"fc.weight", Floats({2, 3}, {1, 2, 3, 4, 5, 6}), Floats({2, 3}, {.1f, .2f, .3f, .4f, .5f, .6f}),
                              /*requires_grad=*/true});
  state.parameters.push_back({"fc.bias", Floats({3}, {-1, -2, -3}), Tensor(), /*requires_grad=*/true});
  state.parameters.push_back({"bn.num_batches_tracked", *Tensor::FromVector<int64_t>({}, {int64_t{42}}), Tensor(),
                              /*requires_grad=*/false});
  OptimizerState& optimizer = state.optimizer.emplace();
  optimizer.group = {/*step=*/7, /*learning_rate=*/0.0025f, /*initial_learning_rate=*/0.01f};
  optimizer.parameter_states["fc.weight"]["momentum0"] = Floats({2, 3}, {0, 1, 0, 1, 0, 1});
  optimizer.parameter_states["fc.weight"]["momentum1"] = Floats({2, 3}, {9, 8, 7, 6, 5, 4});
  optimizer.parameter_states["fc.bias"]["momentum0"] = Floats({3}, {.5f, .25f, .125f});
  state.scheduler.kind = "linear_warmup_decay";
  state.scheduler.values = {{"warmup_steps", int64_t{10}}, {"total_steps", int64_t{1000}}};
  state.properties = {{"epoch", int64_t{3}}, {"best_loss", 0.125f}, {"model", std::string("mnist-mlp")}};
  return state;
}

void ExpectSameTensor(const Tensor& actual, const Tensor& expected, const std::string& what) {
  ASSERT_EQ(actual.dtype(), expected.dtype()) << what;
  ASSERT_EQ(actual.shape(), expected.shape()) << what;
  ASSERT_TRUE(actual.defined()) << what;
  EXPECT_EQ(std::memcmp(actual.raw_data(), expected.raw_data(), expected.byte_size()), 0) << what;
}

void ExpectSameParameters(const CheckpointState& actual, const CheckpointState& expected) {
  ASSERT_EQ(actual.parameters.size(), expected.parameters.size());
  for (size_t i = 0; i < expected.parameters.size(); ++i) {
    const Parameter& a = actual.parameters[i];
    const Parameter& e = expected.parameters[i];
    EXPECT_EQ(a.name, e.name);  // Checkpoint order is kept.
    EXPECT_EQ(a.requires_grad, e.requires_grad) << e.name;
    ExpectSameTensor(a.data, e.data, e.name);
    ASSERT_EQ(a.has_grad(), e.has_grad()) << e.name;
    if (e.has_grad()) ExpectSameTensor(a.grad, e.grad, e.name + " grad");
  }
}

std::string SerializeOrDie(const CheckpointState& state, const CheckpointSaveOptions& options = {}) {
  absl::StatusOr<std::string> bytes = SerializeCheckpoint(state, options);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::string();
}

// Builds a file around a hand-written payload with a correct header and digest, to reach the payload parser
// with hostile content.
std::string FileWithPayload(const std::string& payload) {
  std::string header("TRDCKPT\n", 8);
  auto append_le = [&header](uint64_t value, int bytes) {
    for (int i = 0; i < bytes; ++i) header.push_back(static_cast<char>(value >> (8 * i)));
  };
  append_le(1, 4);
  append_le(0, 4);
  append_le(payload.size(), 8);
  return header + Sha256Hex(header + payload) + payload;
}

std::string Le(uint64_t value, int bytes) {
  std::string out;
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>(value >> (8 * i)));
  return out;
}

TEST(CheckpointTest, RoundTripWithOptimizerState) {
  const CheckpointState state = MakeState();
  const std::string path = TestDir("round_trip") + "/ckpt";
  ASSERT_TRUE(SaveCheckpoint(path, state).ok());
  absl::StatusOr<CheckpointState> loaded = LoadCheckpoint(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();

  ExpectSameParameters(*loaded, state);
  ASSERT_TRUE(loaded->optimizer.has_value());
  EXPECT_EQ(loaded->optimizer->group.step, 7);
  EXPECT_EQ(loaded->optimizer->group.learning_rate, 0.0025f);
  EXPECT_EQ(loaded->optimizer->group.initial_learning_rate, 0.01f);
  ASSERT_EQ(loaded->optimizer->parameter_states.size(), 2u);
  for (const auto& [parameter, states] : state.optimizer->parameter_states) {
    ASSERT_EQ(loaded->optimizer->parameter_states.at(parameter).size(), states.size()) << parameter;
    for (const auto& [name, tensor] : states) {
      ExpectSameTensor(loaded->optimizer->parameter_states.at(parameter).at(name), tensor, parameter + "/" + name);
    }
  }
  EXPECT_EQ(loaded->scheduler.kind, "linear_warmup_decay");
  EXPECT_EQ(loaded->scheduler.values, state.scheduler.values);
  EXPECT_EQ(loaded->properties, state.properties);
  // Deterministic encoding: the loaded state serializes to the very same bytes.
  EXPECT_EQ(SerializeOrDie(*loaded), *ReadFileLimited(path, 1 << 20));
}

TEST(CheckpointTest, RoundTripWithoutOptimizerStateDropsOptimizerAndScheduler) {
  const CheckpointState state = MakeState();
  CheckpointSaveOptions options;
  options.include_optimizer_state = false;
  const std::string path = TestDir("no_optimizer") + "/ckpt";
  ASSERT_TRUE(SaveCheckpoint(path, state, options).ok());
  absl::StatusOr<CheckpointState> loaded = LoadCheckpoint(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameParameters(*loaded, state);
  EXPECT_FALSE(loaded->optimizer.has_value());
  EXPECT_TRUE(loaded->scheduler.kind.empty());
  EXPECT_TRUE(loaded->scheduler.values.empty());
  EXPECT_EQ(loaded->properties, state.properties);
  EXPECT_LT(SerializeOrDie(state, options).size(), SerializeOrDie(state).size());
}

TEST(CheckpointTest, PropertiesOfAllThreeTypesKeepExactValues) {
  CheckpointState state;
  state.properties = {
      {"int_min", std::numeric_limits<int64_t>::min()},
      {"int_max", std::numeric_limits<int64_t>::max()},
      {"negative_zero", -0.0f},
      {"tiny", std::numeric_limits<float>::denorm_min()},
      {"infinity", std::numeric_limits<float>::infinity()},
      {"empty", std::string()},
      {"binary", std::string("a\0b\xff", 4)},
      {"utf8", std::string("lr \xce\xb7")},
  };
  absl::StatusOr<CheckpointState> parsed = ParseCheckpoint(SerializeOrDie(state));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->properties, state.properties);
  EXPECT_TRUE(std::signbit(std::get<float>(parsed->properties.at("negative_zero"))));
  EXPECT_EQ(std::get<std::string>(parsed->properties.at("binary")).size(), 4u);
  // The variant's alternative survives too: an int64 never comes back as a float.
  EXPECT_TRUE(std::holds_alternative<int64_t>(parsed->properties.at("int_max")));
  EXPECT_TRUE(std::holds_alternative<float>(parsed->properties.at("tiny")));
}

TEST(CheckpointTest, NominalCheckpointHasShapesButNoData) {
  const CheckpointState state = MakeState();
  CheckpointSaveOptions options;
  options.nominal = true;
  const std::string path = TestDir("nominal") + "/ckpt";
  ASSERT_TRUE(SaveCheckpoint(path, state, options).ok());
  const std::string full = SerializeOrDie(state);
  EXPECT_LT(ReadFileLimited(path, 1 << 20)->size() + 6 * 4 * 4, full.size());  // Four 6-float tensors fewer.

  absl::StatusOr<CheckpointState> loaded = LoadCheckpoint(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->parameters.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const Parameter& parameter = loaded->parameters[i];
    EXPECT_EQ(parameter.name, state.parameters[i].name);
    EXPECT_EQ(parameter.data.dtype(), state.parameters[i].data.dtype());
    EXPECT_EQ(parameter.data.shape(), state.parameters[i].data.shape());
    EXPECT_EQ(parameter.data.num_elements(), state.parameters[i].data.num_elements());
    EXPECT_FALSE(parameter.data.defined()) << parameter.name;
    EXPECT_EQ(parameter.data.raw_data(), nullptr);
  }
  EXPECT_TRUE(loaded->parameters[0].has_grad());
  EXPECT_FALSE(loaded->parameters[0].grad.defined());
  EXPECT_EQ(loaded->optimizer->parameter_states.at("fc.weight").at("momentum1").shape(), (Shape{2, 3}));
  EXPECT_EQ(loaded->optimizer->group.step, 7);
  EXPECT_EQ(loaded->properties, state.properties);

  // A shape-only state cannot be saved as a full checkpoint by mistake.
  absl::StatusOr<std::string> as_full = SerializeCheckpoint(*loaded);
  EXPECT_EQ(as_full.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(as_full.status().message(), HasSubstr("no data"));
  // Nor flattened.
  EXPECT_EQ(GetContiguousParameters(*loaded, true).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CheckpointTest, NominalStateIsFilledByCopyBufferToParameters) {
  CheckpointSaveOptions nominal;
  nominal.nominal = true;
  nominal.include_optimizer_state = false;
  CheckpointState state = MakeState();
  state.parameters.pop_back();  // Keep the float parameters only.
  absl::StatusOr<CheckpointState> skeleton = ParseCheckpoint(SerializeOrDie(state, nominal));
  ASSERT_TRUE(skeleton.ok()) << skeleton.status();
  skeleton->parameters[0].grad = Tensor();  // The skeleton's grad stays shape-only; drop it for a full save.

  const std::vector<float> weights = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  ASSERT_TRUE(CopyBufferToParameters(weights, /*trainable_only=*/false, *skeleton).ok());
  EXPECT_EQ(ValuesOf(skeleton->parameters[0].data), std::vector<float>({1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(ValuesOf(skeleton->parameters[1].data), std::vector<float>({7, 8, 9}));
  EXPECT_TRUE(SerializeCheckpoint(*skeleton).ok());
}

// Every way a file can be torn: cut at each seventh of its length, and one byte short.
TEST(CheckpointTest, TruncatedFileIsRefusedAsDamaged) {
  const std::string dir = TestDir("truncated");
  const std::string bytes = SerializeOrDie(MakeState());
  std::vector<size_t> lengths;
  for (size_t k = 0; k < 7; ++k) lengths.push_back(bytes.size() * k / 7);
  lengths.push_back(bytes.size() - 1);
  for (size_t length : lengths) {
    const std::string path = absl::StrCat(dir, "/cut_", length);
    ASSERT_TRUE(WriteFileAtomically(path, bytes.substr(0, length)).ok());
    absl::StatusOr<CheckpointState> loaded = LoadCheckpoint(path);
    EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss) << length << ": " << loaded.status();
    EXPECT_THAT(loaded.status().message(), HasSubstr("is damaged: truncated")) << length;
    EXPECT_THAT(loaded.status().message(), HasSubstr(path)) << length;
  }
}

TEST(CheckpointTest, AppendedBytesAreRefusedAsDamaged) {
  absl::StatusOr<CheckpointState> parsed = ParseCheckpoint(SerializeOrDie(MakeState()) + "x");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(parsed.status().message(), HasSubstr("unexpected bytes after"));
}

TEST(CheckpointTest, SingleBitFlipsAreRefusedAsDamaged) {
  const std::string bytes = SerializeOrDie(MakeState());
  // Reserved field, payload length, digest, flags, a tensor's elements in the middle, the last property byte.
  const size_t offsets[] = {12, 17, 23, 24, 60, 87, kHeaderBytes, kHeaderBytes + 5, bytes.size() / 2, bytes.size() - 1};
  for (size_t offset : offsets) {
    for (int bit : {0, 7}) {
      std::string altered = bytes;
      altered[offset] = static_cast<char>(altered[offset] ^ (1 << bit));
      absl::StatusOr<CheckpointState> parsed = ParseCheckpoint(altered, "flipped");
      EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss)
          << "offset " << offset << " bit " << bit << ": " << parsed.status();
      EXPECT_THAT(parsed.status().message(), HasSubstr("flipped is damaged")) << offset;
    }
  }
  // And a flipped content byte is reported as a digest mismatch.
  std::string altered = bytes;
  altered[bytes.size() / 2] ^= 1;
  EXPECT_THAT(ParseCheckpoint(altered).status().message(), HasSubstr("SHA-256"));
}

TEST(CheckpointTest, WrongMagicIsRefusedAsNotACheckpoint) {
  std::string bytes = SerializeOrDie(MakeState());
  bytes[0] = 'X';
  absl::StatusOr<CheckpointState> parsed = ParseCheckpoint(bytes, "model.onnx");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("model.onnx is not a traind checkpoint"));
  EXPECT_EQ(ParseCheckpoint("PK\x03\x04 a zip file").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckpointTest, FutureFormatVersionIsRefusedClearly) {
  std::string bytes = SerializeOrDie(MakeState());
  bytes[8] = 2;  // Version 2, little-endian u32 at offset 8.
  absl::StatusOr<CheckpointState> parsed = ParseCheckpoint(bytes, "new.ckpt");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(parsed.status().message(), HasSubstr("new.ckpt has checkpoint format version 2"));
  EXPECT_THAT(parsed.status().message(), HasSubstr("reads version 1"));
}

TEST(CheckpointTest, InterruptedSaveLeavesThePreviousCheckpointIntact) {
  const std::string dir = TestDir("crash");
  const std::string path = dir + "/ckpt";
  const CheckpointState previous = MakeState();
  ASSERT_TRUE(SaveCheckpoint(path, previous).ok());
  const std::string previous_bytes = *ReadFileLimited(path, 1 << 20);

  // A process dies half-way through writing the next checkpoint: its temporary file stays behind.
  CheckpointState next = MakeState();
  next.optimizer->group.step = 8;
  const std::string next_bytes = SerializeOrDie(next);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    absl::StatusOr<std::unique_ptr<AtomicFileWriter>> writer = AtomicFileWriter::Create(path);
    if (writer.ok()) (void)(*writer)->Append(next_bytes.substr(0, next_bytes.size() / 2));
    _exit(0);  // No destructors, no commit: as if killed.
  }
  int wait_status = 0;
  ASSERT_EQ(waitpid(child, &wait_status, 0), child);
  int leftovers = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) leftovers += entry.path() != path;
  EXPECT_EQ(leftovers, 1);  // The simulated crash really left a temporary file.

  EXPECT_EQ(*ReadFileLimited(path, 1 << 20), previous_bytes);
  absl::StatusOr<CheckpointState> loaded = LoadCheckpoint(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->optimizer->group.step, 7);

  // The next save succeeds despite the leftover and replaces the checkpoint whole.
  ASSERT_TRUE(SaveCheckpoint(path, next).ok());
  EXPECT_EQ(LoadCheckpoint(path)->optimizer->group.step, 8);
}

TEST(CheckpointTest, FailedSaveNeverTouchesTheTargetOrThePreviousCheckpoint) {
  const std::string dir = TestDir("failed_save");
  const std::string path = dir + "/ckpt";
  ASSERT_TRUE(SaveCheckpoint(path, MakeState()).ok());
  const std::string previous_bytes = *ReadFileLimited(path, 1 << 20);

  // The directory is missing: the write fails before anything exists.
  const absl::Status missing_dir = SaveCheckpoint(dir + "/no_such_dir/ckpt", MakeState());
  EXPECT_EQ(missing_dir.code(), absl::StatusCode::kNotFound) << missing_dir;
  EXPECT_FALSE(std::filesystem::exists(dir + "/no_such_dir"));

  // An invalid state fails in serialization, before the file is opened.
  CheckpointState invalid = MakeState();
  invalid.parameters.push_back(invalid.parameters[0]);
  const absl::Status duplicate = SaveCheckpoint(path, invalid);
  EXPECT_EQ(duplicate.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(duplicate.message(), HasSubstr("parameter 'fc.weight' appears twice"));
  EXPECT_EQ(*ReadFileLimited(path, 1 << 20), previous_bytes);
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) entries += entry.is_regular_file();
  EXPECT_EQ(entries, 1);
}

TEST(CheckpointTest, InvalidStatesAreRefusedWithTheirReason) {
  CheckpointState grad_mismatch = MakeState();
  grad_mismatch.parameters[1].grad = Floats({2}, {1, 2});
  EXPECT_THAT(SerializeCheckpoint(grad_mismatch).status().message(), HasSubstr("'fc.bias' has grad float[2]"));

  CheckpointState orphan_state = MakeState();
  orphan_state.optimizer->parameter_states["gone"]["momentum0"] = Floats({1}, {0});
  EXPECT_THAT(SerializeCheckpoint(orphan_state).status().message(),
              HasSubstr("optimizer state of 'gone': the checkpoint has no such parameter"));

  CheckpointState unnamed = MakeState();
  unnamed.parameters[0].name.clear();
  EXPECT_THAT(SerializeCheckpoint(unnamed).status().message(), HasSubstr("empty name"));
}

TEST(CheckpointTest, HostilePayloadsWithValidDigestAreRefusedBeforeAllocating) {
  struct Case {
    std::string name;
    std::string payload;
    std::string expected;
  };
  const std::string no_optimizer = Le(0, 4);
  const std::string one_parameter_named_w = no_optimizer + Le(1, 8) + Le(1, 4) + "w" + Le(1, 1);
  const Case cases[] = {
      {"absurd parameter count", no_optimizer + Le(uint64_t{1} << 40, 8), "parameter count is 1099511627776"},
      {"count beyond remaining bytes", no_optimizer + Le(1000, 8), "only 0 bytes remain"},
      {"name longer than the file", no_optimizer + Le(1, 8) + Le(0xffffffff, 4) + std::string(20, 'a'),
       "more than the limit"},
      {"unknown flag", Le(0x80, 4), "unknown flags"},
      {"huge rank", one_parameter_named_w + Le(1, 4) + Le(1000, 4), "rank 1000"},
      {"negative dim", one_parameter_named_w + Le(1, 4) + Le(1, 4) + Le(uint64_t(-5), 8), "shape [-5]"},
      {"overflowing dims",
       one_parameter_named_w + Le(1, 4) + Le(3, 4) + Le(uint64_t{1} << 32, 8) + Le(uint64_t{1} << 32, 8) +
           Le(uint64_t{1} << 32, 8),
       "shape"},
      {"data beyond the payload", one_parameter_named_w + Le(1, 4) + Le(1, 4) + Le(1u << 30, 8),
       "'w' data (float[1073741824]) needs 4294967296 bytes"},
      {"string dtype", one_parameter_named_w + Le(8, 4) + Le(0, 4), "unsupported dtype string"},
      {"bool byte 2", one_parameter_named_w + Le(9, 4) + Le(0, 4) + Le(2, 1), "holds the byte 2"},
      {"requires_grad 7", no_optimizer + Le(1, 8) + Le(1, 4) + "w" + Le(7, 1) + std::string(20, '\0'),
       "requires_grad is 7"},
      {"trailing bytes", no_optimizer + Le(0, 8) + Le(0, 8) + "zz", "2 unread bytes"},
      {"duplicate property", no_optimizer + Le(0, 8) + Le(2, 8) + Le(1, 4) + "p" + Le(0, 1) + Le(1, 8) + Le(1, 4) +
                                 "p" + Le(0, 1) + Le(2, 8),
       "property 'p' appears twice"},
  };
  for (const Case& test : cases) {
    absl::StatusOr<CheckpointState> parsed = ParseCheckpoint(FileWithPayload(test.payload), "crafted");
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << test.name << ": " << parsed.status();
    EXPECT_THAT(parsed.status().message(), HasSubstr("crafted is malformed")) << test.name;
    EXPECT_THAT(parsed.status().message(), HasSubstr(test.expected)) << test.name;
  }
  // The crafting helper itself produces a parsable file from a well-formed payload.
  EXPECT_TRUE(ParseCheckpoint(FileWithPayload(no_optimizer + Le(0, 8) + Le(0, 8))).ok());
}

TEST(CheckpointTest, ContiguousParametersRoundTripInCheckpointOrder) {
  CheckpointState state = MakeState();
  state.parameters.push_back({"frozen.scale", Floats({2}, {100, 200}), Tensor(), /*requires_grad=*/false});
  EXPECT_EQ(GetParametersSize(state, /*trainable_only=*/true), 9);
  EXPECT_EQ(GetParametersSize(state, /*trainable_only=*/false), 12);  // + the int64 counter and frozen.scale

  absl::StatusOr<Tensor> trainable = GetContiguousParameters(state, /*trainable_only=*/true);
  ASSERT_TRUE(trainable.ok()) << trainable.status();
  EXPECT_EQ(trainable->shape(), (Shape{9}));
  EXPECT_EQ(ValuesOf(*trainable), std::vector<float>({1, 2, 3, 4, 5, 6, -1, -2, -3}));

  // A fleet average comes back; the parameters are updated in place, so aliases (a Module's session) see it.
  const Tensor alias_of_weight = state.parameters[0].data;
  std::vector<float> averaged = ValuesOf(*trainable);
  for (float& value : averaged) value *= 2;
  ASSERT_TRUE(CopyBufferToParameters(averaged, /*trainable_only=*/true, state).ok());
  EXPECT_EQ(ValuesOf(alias_of_weight), std::vector<float>({2, 4, 6, 8, 10, 12}));
  EXPECT_EQ(ValuesOf(state.parameters[1].data), std::vector<float>({-2, -4, -6}));
  EXPECT_EQ(ValuesOf(state.parameters[3].data), std::vector<float>({100, 200}));  // Frozen: untouched.
  EXPECT_EQ(ValuesOf(*GetContiguousParameters(state, true)), averaged);
}

TEST(CheckpointTest, ContiguousBufferErrorsChangeNothing) {
  CheckpointState state = MakeState();
  const std::vector<float> too_short(8, 0.0f);
  const absl::Status mismatch = CopyBufferToParameters(too_short, /*trainable_only=*/true, state);
  EXPECT_EQ(mismatch.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(mismatch.message(), HasSubstr("buffer holds 8 floats but the trainable parameters hold 9"));
  EXPECT_EQ(ValuesOf(state.parameters[0].data), std::vector<float>({1, 2, 3, 4, 5, 6}));

  // Including the frozen int64 counter: not float, refused before any parameter is written.
  const std::vector<float> all(10, 0.0f);
  const absl::Status not_float = CopyBufferToParameters(all, /*trainable_only=*/false, state);
  EXPECT_EQ(not_float.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(not_float.message(), HasSubstr("'bn.num_batches_tracked' is int64, not float"));
  EXPECT_EQ(ValuesOf(state.parameters[0].data), std::vector<float>({1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(GetContiguousParameters(state, /*trainable_only=*/false).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// SaveCheckpoint streams and LoadCheckpoint reads in pieces, but the file is exactly SerializeCheckpoint's bytes,
// and the bit flips ParseCheckpoint calls damaged are damaged when read from a file too (a flip that also makes
// the payload malformed is still reported as damage: the digest decides first).
TEST(CheckpointTest, StreamedSaveAndLoadMatchTheInMemoryFormat) {
  const std::string dir = TestDir("streamed");
  CheckpointState state = MakeState();
  // A tensor larger than the writer's and reader's buffers, so that data goes straight to and from the file.
  std::vector<float> big(3 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>(i % 977) * 0.5f;
  state.parameters.push_back({"big", Floats({static_cast<int64_t>(big.size())}, big), Tensor(), false});
  const std::string bytes = SerializeOrDie(state);
  EXPECT_EQ(*SerializedCheckpointSize(state), static_cast<int64_t>(bytes.size()));
  const std::string path = dir + "/ckpt";
  ASSERT_TRUE(SaveCheckpoint(path, state).ok());
  EXPECT_EQ(*ReadFileLimited(path, int64_t{1} << 30), bytes);
  std::string file_digest;
  absl::StatusOr<CheckpointState> loaded = LoadCheckpoint(path, kDefaultMaxCheckpointBytes, &file_digest);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(file_digest, Sha256Hex(bytes));
  EXPECT_EQ(ValuesOf(loaded->parameters.back().data), big);
  EXPECT_EQ(SerializeOrDie(*loaded), bytes);

  for (size_t offset : {size_t{24}, kHeaderBytes, kHeaderBytes + 5, bytes.size() / 2, bytes.size() - 1}) {
    std::string altered = bytes;
    altered[offset] ^= 0x40;
    ASSERT_TRUE(WriteFileAtomically(path, altered).ok());
    absl::StatusOr<CheckpointState> damaged = LoadCheckpoint(path);
    EXPECT_EQ(damaged.status().code(), absl::StatusCode::kDataLoss) << offset << ": " << damaged.status();
    EXPECT_THAT(damaged.status().message(), HasSubstr("is damaged")) << offset;
  }
}

TEST(CheckpointTest, OversizedFileIsRefusedBeforeReading) {
  const std::string path = TestDir("oversized") + "/ckpt";
  ASSERT_TRUE(SaveCheckpoint(path, MakeState()).ok());
  EXPECT_EQ(LoadCheckpoint(path, /*max_bytes=*/100).status().code(), absl::StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace traind::engine
