// What several command families share: flag groups (scheduler, checkpoint policy, input files) and how a
// session, a job or tensor signatures print for people.
#ifndef TRAIND_CLIENT_COMMANDS_COMMON_H_
#define TRAIND_CLIENT_COMMANDS_COMMON_H_

#include <ostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/command.h"
#include "client/flags.h"
#include "traind/v1/training_service.pb.h"

namespace traind::cli {

// Concatenation of flag tables.
std::vector<FlagSpec> Flags(std::initializer_list<std::vector<FlagSpec>> groups);

FlagSpec SessionFlag();
// --chunk-bytes N of the commands that download (the largest message the daemon should send).
FlagSpec ChunkBytesFlag();
// Its value, or 0 (the daemon's default of 1 MiB); a malformed value is recorded in `flags`.
int64_t ChunkBytesFromFlags(const FlagValues& flags);

// --scheduler linear|constant|cosine|step and its parameters.
std::vector<FlagSpec> SchedulerFlags();
// Leaves `spec` empty when --scheduler is absent; records usage errors in `flags`.
void SchedulerFromFlags(const FlagValues& flags, v1::SchedulerSpec* spec);

// --device cpu|gpu|gpu:N: where a new session trains.
FlagSpec DeviceFlag();
struct Device {
  v1::Executor executor = v1::CPU;
  int32_t index = 0;
};
// cpu without the flag; a malformed value is recorded in `flags`.
Device DeviceFromFlags(const FlagValues& flags);

// --checkpoint-every-steps / --checkpoint-every-seconds.
std::vector<FlagSpec> CheckpointPolicyFlags();
// Whether either flag was given; fills `policy`.
bool CheckpointPolicyFromFlags(const FlagValues& flags, v1::CheckpointPolicy* policy);

// Every "--<flag> NAME=FILE.npy" as a wire tensor named NAME. Errors: malformed arguments (usage), unreadable or
// unparsable files (local file), a name given twice (usage).
absl::StatusOr<std::vector<v1::Tensor>> ReadNamedNpyFiles(const FlagValues& flags, const std::string& flag);

// "input float32[-1,8], target int64[-1]".
std::string DescribeSignature(const google::protobuf::RepeatedPtrField<v1::TensorInfo>& infos);

void PrintSession(std::ostream& out, const v1::Session& session);
// "RUNNING epoch 2/5 step 120/300 loss 0.4321 lr 0.001 350 ex/s ETA 12s".
std::string DescribeJobProgress(const v1::Job& job);
std::string DescribeEval(const v1::EvalMetrics& eval);

// "-" for an empty string.
std::string OrDash(const std::string& text);

// mkdir -p; LocalFileError on failure.
absl::Status MakeDirectory(const std::string& path);

// Reads the whole file (for inline model bytes); LocalFileError on failure.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path, int64_t max_bytes);

}  // namespace traind::cli

#endif  // TRAIND_CLIENT_COMMANDS_COMMON_H_
