#include "engine/training/checkpoint.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/io/file_util.h"

namespace traind::engine {
namespace {

// Tensor elements are copied with memcpy, so the host must share the file's byte order.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "checkpoint tensor data is little-endian");

constexpr char kMagic[8] = {'T', 'R', 'D', 'C', 'K', 'P', 'T', '\n'};
constexpr uint32_t kFormatVersion = 1;
constexpr size_t kDigestedHeaderBytes = 24;  // magic, version, reserved, payload length
constexpr size_t kDigestHexBytes = 64;
constexpr size_t kHeaderBytes = kDigestedHeaderBytes + kDigestHexBytes;

constexpr uint32_t kFlagNominal = 1u << 0;
constexpr uint32_t kFlagOptimizer = 1u << 1;
constexpr uint32_t kKnownFlags = kFlagNominal | kFlagOptimizer;

constexpr uint8_t kPropertyInt64 = 0;
constexpr uint8_t kPropertyFloat = 1;
constexpr uint8_t kPropertyString = 2;

// Limits on hostile input, far above anything real, so that counts and lengths are refused before
// they drive allocations or loops.
constexpr uint64_t kMaxEntries = uint64_t{1} << 20;  // parameters, states, properties
constexpr uint32_t kMaxNameBytes = 4096;
constexpr uint32_t kMaxStringValueBytes = uint32_t{1} << 20;
constexpr uint32_t kMaxRank = 64;

// ---------------------------------------------------------------------------------------------------------
// Writing

// Where serialized bytes go: a string (SerializeCheckpoint), nowhere but a count (the payload length, needed before
// the digest can start), or a file with the digest computed on the way (SaveCheckpoint).
class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual void Append(const char* data, size_t size) = 0;
};

class StringSink : public ByteSink {
 public:
  void Append(const char* data, size_t size) override { out_.append(data, size); }
  std::string& bytes() { return out_; }

 private:
  std::string out_;
};

class CountingSink : public ByteSink {
 public:
  void Append(const char*, size_t size) override { count_ += size; }
  uint64_t count() const { return count_; }

 private:
  uint64_t count_ = 0;
};

// Buffers small writes; large ones (tensor data) go to the file directly. The first error sticks.
class FileSink : public ByteSink {
 public:
  FileSink(AtomicFileWriter* file, Sha256* digest) : file_(file), digest_(digest) { buffer_.reserve(kBufferBytes); }
  void Append(const char* data, size_t size) override {
    if (!status_.ok()) return;
    digest_->Update(absl::string_view(data, size));
    if (buffer_.size() + size <= kBufferBytes) {
      buffer_.append(data, size);
      return;
    }
    Flush();
    if (size < kBufferBytes) {
      buffer_.append(data, size);
    } else if (status_.ok()) {
      status_ = file_->Append(absl::string_view(data, size));
    }
  }
  absl::Status Finish() {
    Flush();
    return status_;
  }

 private:
  static constexpr size_t kBufferBytes = size_t{1} << 20;
  void Flush() {
    if (status_.ok() && !buffer_.empty()) status_ = file_->Append(buffer_);
    buffer_.clear();
  }
  AtomicFileWriter* file_;
  Sha256* digest_;
  std::string buffer_;
  absl::Status status_;
};

class ByteWriter {
 public:
  explicit ByteWriter(ByteSink& sink) : sink_(sink) {}
  void U8(uint8_t value) {
    const char byte = static_cast<char>(value);
    sink_.Append(&byte, 1);
  }
  void U32(uint32_t value) {
    for (int shift = 0; shift < 32; shift += 8) U8(static_cast<uint8_t>(value >> shift));
  }
  void U64(uint64_t value) {
    for (int shift = 0; shift < 64; shift += 8) U8(static_cast<uint8_t>(value >> shift));
  }
  void I32(int32_t value) { U32(static_cast<uint32_t>(value)); }
  void I64(int64_t value) { U64(static_cast<uint64_t>(value)); }
  void F32(float value) {
    uint32_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    U32(bits);
  }
  void String(absl::string_view value) {
    U32(static_cast<uint32_t>(value.size()));  // Lengths were validated against the limits before writing.
    sink_.Append(value.data(), value.size());
  }
  void Bytes(const void* data, size_t size) { sink_.Append(static_cast<const char*>(data), size); }

 private:
  ByteSink& sink_;
};

void WriteTensor(const Tensor& tensor, bool nominal, ByteWriter& writer) {
  writer.I32(static_cast<int32_t>(tensor.dtype()));
  writer.U32(static_cast<uint32_t>(tensor.rank()));
  for (int64_t dim : tensor.shape()) writer.I64(dim);
  if (!nominal) writer.Bytes(tensor.raw_data(), tensor.byte_size());
}

void WritePropertyBag(const PropertyBag& bag, ByteWriter& writer) {
  writer.U64(bag.size());
  for (const auto& [name, value] : bag) {
    writer.String(name);
    if (const int64_t* integer = std::get_if<int64_t>(&value)) {
      writer.U8(kPropertyInt64);
      writer.I64(*integer);
    } else if (const float* real = std::get_if<float>(&value)) {
      writer.U8(kPropertyFloat);
      writer.F32(*real);
    } else {
      writer.U8(kPropertyString);
      writer.String(std::get<std::string>(value));
    }
  }
}

absl::Status ValidateName(absl::string_view name, absl::string_view what) {
  if (name.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " has an empty name"));
  if (name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " name has ", name.size(), " bytes, more than the limit of ", kMaxNameBytes));
  }
  return absl::OkStatus();
}

absl::Status ValidatePropertyBag(const PropertyBag& bag, absl::string_view what) {
  if (bag.size() > kMaxEntries) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has ", bag.size(), " entries, more than ", kMaxEntries));
  }
  for (const auto& [name, value] : bag) {
    TRAIND_RETURN_IF_ERROR(ValidateName(name, absl::StrCat(what, " entry '", name, "'")));
    if (const std::string* text = std::get_if<std::string>(&value); text && text->size() > kMaxStringValueBytes) {
      return absl::InvalidArgumentError(absl::StrCat(what, " '", name, "' has ", text->size(),
                                                     " bytes, more than the limit of ", kMaxStringValueBytes));
    }
  }
  return absl::OkStatus();
}

// A tensor of a state being saved or just parsed: storable dtype, sane rank, data present unless allowed.
absl::Status ValidateTensor(const Tensor& tensor, bool allow_shape_only, absl::string_view what) {
  if (!IsStorableType(tensor.dtype())) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has unsupported dtype ", DataTypeName(tensor.dtype())));
  }
  if (tensor.rank() > kMaxRank) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has rank ", tensor.rank(), ", more than ", kMaxRank));
  }
  if (!tensor.defined() && !allow_shape_only) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has no data (a nominal state; save it with the nominal option)"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------------------
// Reading

// Where a payload is read from: bytes in memory, or a file read front to back (LoadCheckpoint), whose digest is
// computed on the way. Callers check sizes against remaining() first.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t remaining() const = 0;
  // The next `size` bytes (small values: numbers, names), valid until the next call.
  virtual absl::Status Next(uint64_t size, absl::string_view* bytes) = 0;
  // The next `size` bytes copied into `out` (tensor data).
  virtual absl::Status CopyTo(void* out, uint64_t size) = 0;
};

class MemorySource : public ByteSource {
 public:
  explicit MemorySource(absl::string_view bytes) : rest_(bytes) {}
  uint64_t remaining() const override { return rest_.size(); }
  absl::Status Next(uint64_t size, absl::string_view* bytes) override {
    *bytes = rest_.substr(0, static_cast<size_t>(size));
    rest_.remove_prefix(static_cast<size_t>(size));
    return absl::OkStatus();
  }
  absl::Status CopyTo(void* out, uint64_t size) override {
    if (size > 0) std::memcpy(out, rest_.data(), static_cast<size_t>(size));
    rest_.remove_prefix(static_cast<size_t>(size));
    return absl::OkStatus();
  }

 private:
  absl::string_view rest_;
};

// `length` bytes of a file from its current position, fed to `digests` as they are read; tensor data goes straight
// into the tensors' buffers (one copy of the checkpoint in memory, never two).
class FileSource : public ByteSource {
 public:
  FileSource(FileReader* file, uint64_t length, std::vector<Sha256*> digests)
      : file_(file), left_(length), digests_(std::move(digests)) {}
  uint64_t remaining() const override { return left_ + (buffer_.size() - position_); }
  absl::Status Next(uint64_t size, absl::string_view* bytes) override {
    if (buffer_.size() - position_ < size) TRAIND_RETURN_IF_ERROR(Fill(static_cast<size_t>(size)));
    *bytes = absl::string_view(buffer_).substr(position_, static_cast<size_t>(size));
    position_ += static_cast<size_t>(size);
    return absl::OkStatus();
  }
  absl::Status CopyTo(void* out, uint64_t size) override {
    char* target = static_cast<char*>(out);
    const size_t buffered = std::min<size_t>(buffer_.size() - position_, static_cast<size_t>(size));
    if (buffered > 0) std::memcpy(target, buffer_.data() + position_, buffered);
    position_ += buffered;
    const uint64_t rest = size - buffered;
    if (rest == 0) return absl::OkStatus();
    TRAIND_RETURN_IF_ERROR(ReadHashed(target + buffered, static_cast<size_t>(rest)));
    return absl::OkStatus();
  }
  // Reads (and digests) whatever is left: a payload that fails to parse is still told damaged from malformed.
  absl::Status Drain() {
    position_ = buffer_.size();
    std::string scratch(std::min<uint64_t>(left_, kBufferBytes), '\0');
    while (left_ > 0) {
      const size_t piece = static_cast<size_t>(std::min<uint64_t>(left_, scratch.size()));
      TRAIND_RETURN_IF_ERROR(ReadHashed(scratch.data(), piece));
    }
    return absl::OkStatus();
  }

 private:
  static constexpr size_t kBufferBytes = size_t{4} << 20;
  absl::Status ReadHashed(char* out, size_t size) {
    TRAIND_RETURN_IF_ERROR(file_->Read(out, size));
    for (Sha256* digest : digests_) digest->Update(absl::string_view(out, size));
    left_ -= size;
    return absl::OkStatus();
  }
  // Makes at least `size` unread bytes available in the buffer.
  absl::Status Fill(size_t size) {
    buffer_.erase(0, position_);
    position_ = 0;
    const size_t have = buffer_.size();
    const size_t want = static_cast<size_t>(std::min<uint64_t>(std::max(size, kBufferBytes) - have, left_));
    buffer_.resize(have + want);
    return ReadHashed(buffer_.data() + have, want);
  }
  FileReader* file_;
  uint64_t left_;
  std::vector<Sha256*> digests_;
  std::string buffer_;
  size_t position_ = 0;
};

// A cursor over untrusted bytes. Every read checks the remaining length first; errors name what was being
// read. A failure here means a malformed checkpoint unless its digest turns out wrong (then it is damaged).
class ByteReader {
 public:
  explicit ByteReader(ByteSource& source) : source_(source) {}

  size_t remaining() const { return source_.remaining(); }

  absl::Status U8(uint8_t* value, absl::string_view what) {
    absl::string_view bytes;
    TRAIND_RETURN_IF_ERROR(Take(1, what, &bytes));
    *value = static_cast<uint8_t>(bytes[0]);
    return absl::OkStatus();
  }
  absl::Status U32(uint32_t* value, absl::string_view what) {
    absl::string_view bytes;
    TRAIND_RETURN_IF_ERROR(Take(4, what, &bytes));
    *value = 0;
    for (int i = 3; i >= 0; --i) *value = (*value << 8) | static_cast<uint8_t>(bytes[i]);
    return absl::OkStatus();
  }
  absl::Status U64(uint64_t* value, absl::string_view what) {
    absl::string_view bytes;
    TRAIND_RETURN_IF_ERROR(Take(8, what, &bytes));
    *value = 0;
    for (int i = 7; i >= 0; --i) *value = (*value << 8) | static_cast<uint8_t>(bytes[i]);
    return absl::OkStatus();
  }
  absl::Status I32(int32_t* value, absl::string_view what) {
    uint32_t bits = 0;
    TRAIND_RETURN_IF_ERROR(U32(&bits, what));
    *value = static_cast<int32_t>(bits);
    return absl::OkStatus();
  }
  absl::Status I64(int64_t* value, absl::string_view what) {
    uint64_t bits = 0;
    TRAIND_RETURN_IF_ERROR(U64(&bits, what));
    *value = static_cast<int64_t>(bits);
    return absl::OkStatus();
  }
  absl::Status F32(float* value, absl::string_view what) {
    uint32_t bits = 0;
    TRAIND_RETURN_IF_ERROR(U32(&bits, what));
    std::memcpy(value, &bits, sizeof bits);
    return absl::OkStatus();
  }
  absl::Status Bool(bool* value, absl::string_view what) {
    uint8_t byte = 0;
    TRAIND_RETURN_IF_ERROR(U8(&byte, what));
    if (byte > 1) return Malformed(absl::StrCat(what, " is ", static_cast<int>(byte), ", not 0 or 1"));
    *value = byte == 1;
    return absl::OkStatus();
  }
  absl::Status String(uint32_t max_bytes, std::string* value, absl::string_view what) {
    uint32_t length = 0;
    TRAIND_RETURN_IF_ERROR(U32(&length, absl::StrCat(what, " length")));
    if (length > max_bytes) {
      return Malformed(absl::StrCat(what, " has ", length, " bytes, more than the limit of ", max_bytes));
    }
    absl::string_view bytes;
    TRAIND_RETURN_IF_ERROR(Take(length, what, &bytes));
    value->assign(bytes.data(), bytes.size());
    return absl::OkStatus();
  }
  // A count of entries each at least `min_entry_bytes` long: refused if above kMaxEntries or if that many
  // entries cannot fit in the remaining bytes (so a hostile count never drives a long loop or a reserve()).
  absl::Status Count(size_t min_entry_bytes, uint64_t* count, absl::string_view what) {
    TRAIND_RETURN_IF_ERROR(U64(count, what));
    if (*count > kMaxEntries) return Malformed(absl::StrCat(what, " is ", *count, ", more than ", kMaxEntries));
    if (*count > remaining() / min_entry_bytes) {
      return Malformed(absl::StrCat(what, " is ", *count, " but only ", remaining(), " bytes remain"));
    }
    return absl::OkStatus();
  }
  // Small values (bounded by the name and string limits).
  absl::Status Take(uint64_t size, absl::string_view what, absl::string_view* bytes) {
    TRAIND_RETURN_IF_ERROR(CheckRemaining(size, what));
    return source_.Next(size, bytes);
  }
  // Tensor data, straight into `out`.
  absl::Status CopyTo(void* out, uint64_t size, absl::string_view what) {
    TRAIND_RETURN_IF_ERROR(CheckRemaining(size, what));
    return source_.CopyTo(out, size);
  }
  absl::Status CheckRemaining(uint64_t size, absl::string_view what) const {
    if (size > remaining()) {
      return Malformed(absl::StrCat(what, " needs ", size, " bytes but only ", remaining(), " remain"));
    }
    return absl::OkStatus();
  }

  static absl::Status Malformed(absl::string_view message) { return absl::InvalidArgumentError(message); }

 private:
  ByteSource& source_;
};

// Smallest encodings, for ByteReader::Count.
constexpr size_t kMinStringBytes = 4;
constexpr size_t kMinTensorBytes = 8;  // dtype + rank
constexpr size_t kMinParameterBytes = kMinStringBytes + 1 + kMinTensorBytes + 1;
constexpr size_t kMinPropertyBytes = kMinStringBytes + 1 + 4;
constexpr size_t kMinStateMapBytes = kMinStringBytes + 8;
constexpr size_t kMinStateBytes = kMinStringBytes + kMinTensorBytes;

absl::StatusOr<Tensor> ReadTensor(ByteReader& reader, bool nominal, const std::string& what) {
  int32_t onnx_type = 0;
  TRAIND_RETURN_IF_ERROR(reader.I32(&onnx_type, absl::StrCat(what, " dtype")));
  absl::StatusOr<DataType> dtype = DataTypeFromOnnx(onnx_type);
  if (!dtype.ok()) return ByteReader::Malformed(absl::StrCat(what, ": ", dtype.status().message()));
  uint32_t rank = 0;
  TRAIND_RETURN_IF_ERROR(reader.U32(&rank, absl::StrCat(what, " rank")));
  if (rank > kMaxRank) return ByteReader::Malformed(absl::StrCat(what, " has rank ", rank, ", more than ", kMaxRank));
  Shape shape(rank);
  for (uint32_t i = 0; i < rank; ++i) TRAIND_RETURN_IF_ERROR(reader.I64(&shape[i], absl::StrCat(what, " dims")));
  absl::StatusOr<int64_t> count = ElementCount(shape);  // Refuses negative dims and counts above 2^40.
  if (!count.ok()) {
    return ByteReader::Malformed(
        absl::StrCat(what, " shape ", ShapeToString(shape), ": ", count.status().message()));
  }
  if (nominal) return Tensor(*dtype, std::move(shape), nullptr, *count);

  // count <= 2^40 and element size <= 8, so the product cannot overflow.
  const uint64_t byte_size = static_cast<uint64_t>(*count) * ElementSize(*dtype);
  const std::string data_what = absl::StrCat(what, " data (", DataTypeName(*dtype), ShapeToString(shape), ")");
  // Checked before allocating: a hostile count never allocates more than the file holds.
  TRAIND_RETURN_IF_ERROR(reader.CheckRemaining(byte_size, data_what));
  TRAIND_ASSIGN_OR_RETURN(std::shared_ptr<Buffer> buffer, Buffer::Allocate(static_cast<size_t>(byte_size)));
  TRAIND_RETURN_IF_ERROR(reader.CopyTo(buffer->data(), byte_size, data_what));
  if (*dtype == DataType::kBool) {
    const uint8_t* bytes = static_cast<const uint8_t*>(buffer->data());
    for (uint64_t i = 0; i < byte_size; ++i) {
      if (bytes[i] > 1) {
        return ByteReader::Malformed(absl::StrCat(what, " is bool but holds the byte ", static_cast<int>(bytes[i])));
      }
    }
  }
  return Tensor(*dtype, std::move(shape), std::move(buffer), *count);
}

absl::Status ReadPropertyBag(ByteReader& reader, const std::string& what, PropertyBag* bag) {
  uint64_t count = 0;
  TRAIND_RETURN_IF_ERROR(reader.Count(kMinPropertyBytes, &count, absl::StrCat(what, " count")));
  for (uint64_t i = 0; i < count; ++i) {
    std::string name;
    TRAIND_RETURN_IF_ERROR(reader.String(kMaxNameBytes, &name, absl::StrCat(what, " name")));
    const std::string entry = absl::StrCat(what, " '", name, "'");
    uint8_t kind = 0;
    TRAIND_RETURN_IF_ERROR(reader.U8(&kind, absl::StrCat(entry, " kind")));
    PropertyValue value;
    if (kind == kPropertyInt64) {
      int64_t integer = 0;
      TRAIND_RETURN_IF_ERROR(reader.I64(&integer, entry));
      value = integer;
    } else if (kind == kPropertyFloat) {
      float real = 0;
      TRAIND_RETURN_IF_ERROR(reader.F32(&real, entry));
      value = real;
    } else if (kind == kPropertyString) {
      std::string text;
      TRAIND_RETURN_IF_ERROR(reader.String(kMaxStringValueBytes, &text, entry));
      value = std::move(text);
    } else {
      return ByteReader::Malformed(absl::StrCat(entry, " has unknown kind ", static_cast<int>(kind)));
    }
    if (!bag->emplace(name, std::move(value)).second) {
      return ByteReader::Malformed(absl::StrCat(entry, " appears twice"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<CheckpointState> ParsePayload(ByteSource& payload) {
  ByteReader reader(payload);
  CheckpointState state;
  uint32_t flags = 0;
  TRAIND_RETURN_IF_ERROR(reader.U32(&flags, "flags"));
  if ((flags & ~kKnownFlags) != 0) {
    return ByteReader::Malformed(absl::StrCat("unknown flags 0x", absl::Hex(flags & ~kKnownFlags)));
  }
  const bool nominal = (flags & kFlagNominal) != 0;

  uint64_t parameter_count = 0;
  TRAIND_RETURN_IF_ERROR(reader.Count(kMinParameterBytes, &parameter_count, "parameter count"));
  state.parameters.reserve(parameter_count);
  for (uint64_t i = 0; i < parameter_count; ++i) {
    Parameter parameter;
    TRAIND_RETURN_IF_ERROR(reader.String(kMaxNameBytes, &parameter.name, absl::StrCat("parameter ", i, " name")));
    const std::string what = absl::StrCat("parameter '", parameter.name, "'");
    TRAIND_RETURN_IF_ERROR(reader.Bool(&parameter.requires_grad, absl::StrCat(what, " requires_grad")));
    TRAIND_ASSIGN_OR_RETURN(parameter.data, ReadTensor(reader, nominal, what));
    bool has_grad = false;
    TRAIND_RETURN_IF_ERROR(reader.Bool(&has_grad, absl::StrCat(what, " has_grad")));
    if (has_grad) {
      TRAIND_ASSIGN_OR_RETURN(parameter.grad, ReadTensor(reader, nominal, absl::StrCat(what, " grad")));
    }
    state.parameters.push_back(std::move(parameter));
  }

  if ((flags & kFlagOptimizer) != 0) {
    OptimizerState& optimizer = state.optimizer.emplace();
    TRAIND_RETURN_IF_ERROR(reader.I64(&optimizer.group.step, "optimizer step"));
    TRAIND_RETURN_IF_ERROR(reader.F32(&optimizer.group.learning_rate, "optimizer learning rate"));
    TRAIND_RETURN_IF_ERROR(reader.F32(&optimizer.group.initial_learning_rate, "optimizer initial learning rate"));
    uint64_t map_count = 0;
    TRAIND_RETURN_IF_ERROR(reader.Count(kMinStateMapBytes, &map_count, "optimizer state count"));
    for (uint64_t i = 0; i < map_count; ++i) {
      std::string parameter_name;
      TRAIND_RETURN_IF_ERROR(
          reader.String(kMaxNameBytes, &parameter_name, absl::StrCat("optimizer state ", i, " parameter name")));
      const std::string what = absl::StrCat("optimizer state of '", parameter_name, "'");
      auto [states, inserted] = optimizer.parameter_states.try_emplace(parameter_name);
      if (!inserted) return ByteReader::Malformed(absl::StrCat(what, " appears twice"));
      uint64_t state_count = 0;
      TRAIND_RETURN_IF_ERROR(reader.Count(kMinStateBytes, &state_count, absl::StrCat(what, " count")));
      for (uint64_t j = 0; j < state_count; ++j) {
        std::string state_name;
        TRAIND_RETURN_IF_ERROR(reader.String(kMaxNameBytes, &state_name, absl::StrCat(what, " name")));
        const std::string tensor_what = absl::StrCat(what, " '", state_name, "'");
        TRAIND_ASSIGN_OR_RETURN(Tensor tensor, ReadTensor(reader, nominal, tensor_what));
        if (!states->second.emplace(state_name, std::move(tensor)).second) {
          return ByteReader::Malformed(absl::StrCat(tensor_what, " appears twice"));
        }
      }
    }
    TRAIND_RETURN_IF_ERROR(reader.String(kMaxNameBytes, &state.scheduler.kind, "scheduler kind"));
    TRAIND_RETURN_IF_ERROR(ReadPropertyBag(reader, "scheduler value", &state.scheduler.values));
  }
  TRAIND_RETURN_IF_ERROR(ReadPropertyBag(reader, "property", &state.properties));
  if (reader.remaining() != 0) {
    return ByteReader::Malformed(absl::StrCat(reader.remaining(), " unread bytes at the end of the payload"));
  }
  // Semantic checks (duplicate names, grad shapes, state of unknown parameters) shared with the writer.
  TRAIND_RETURN_IF_ERROR(ValidateCheckpointState(state, /*allow_shape_only=*/nominal));
  return state;
}

uint64_t DecodeU64(absl::string_view bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(bytes[i]);
  return value;
}

uint32_t DecodeU32(absl::string_view bytes) {
  uint32_t value = 0;
  for (int i = 3; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(bytes[i]);
  return value;
}

// Parameters selected by the contiguous-buffer helpers, in checkpoint order.
template <typename State, typename Visit>
void ForEachSelected(State& state, bool trainable_only, Visit visit) {
  for (auto& parameter : state.parameters) {
    if (!trainable_only || parameter.requires_grad) visit(parameter);
  }
}

}  // namespace

absl::Status ValidateCheckpointState(const CheckpointState& state, bool allow_shape_only) {
  if (state.parameters.size() > kMaxEntries) {
    return absl::InvalidArgumentError(
        absl::StrCat("checkpoint has ", state.parameters.size(), " parameters, more than ", kMaxEntries));
  }
  std::set<absl::string_view> names;
  for (const Parameter& parameter : state.parameters) {
    const std::string what = absl::StrCat("parameter '", parameter.name, "'");
    TRAIND_RETURN_IF_ERROR(ValidateName(parameter.name, what));
    if (!names.insert(parameter.name).second) return absl::InvalidArgumentError(absl::StrCat(what, " appears twice"));
    TRAIND_RETURN_IF_ERROR(ValidateTensor(parameter.data, allow_shape_only, what));
    if (parameter.has_grad()) {
      TRAIND_RETURN_IF_ERROR(ValidateTensor(parameter.grad, allow_shape_only, absl::StrCat(what, " grad")));
      if (parameter.grad.dtype() != parameter.data.dtype() || parameter.grad.shape() != parameter.data.shape()) {
        return absl::InvalidArgumentError(absl::StrCat(what, " has grad ", parameter.grad.DebugString(),
                                                       " but data ", parameter.data.DebugString()));
      }
    }
  }
  if (state.optimizer) {
    for (const auto& [parameter_name, states] : state.optimizer->parameter_states) {
      const std::string what = absl::StrCat("optimizer state of '", parameter_name, "'");
      if (names.count(parameter_name) == 0) {
        return absl::InvalidArgumentError(absl::StrCat(what, ": the checkpoint has no such parameter"));
      }
      if (states.size() > kMaxEntries) {
        return absl::InvalidArgumentError(absl::StrCat(what, " has more than ", kMaxEntries, " entries"));
      }
      for (const auto& [state_name, tensor] : states) {
        TRAIND_RETURN_IF_ERROR(ValidateName(state_name, absl::StrCat(what, " entry")));
        TRAIND_RETURN_IF_ERROR(ValidateTensor(tensor, allow_shape_only, absl::StrCat(what, " '", state_name, "'")));
      }
    }
  }
  if (state.scheduler.kind.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("scheduler kind has more than ", kMaxNameBytes, " bytes"));
  }
  TRAIND_RETURN_IF_ERROR(ValidatePropertyBag(state.scheduler.values, "scheduler value"));
  TRAIND_RETURN_IF_ERROR(ValidatePropertyBag(state.properties, "property"));
  return absl::OkStatus();
}

namespace {

void WritePayload(const CheckpointState& state, const CheckpointSaveOptions& options, ByteWriter& payload) {
  const bool with_optimizer = options.include_optimizer_state && state.optimizer.has_value();
  payload.U32((options.nominal ? kFlagNominal : 0) | (with_optimizer ? kFlagOptimizer : 0));
  payload.U64(state.parameters.size());
  for (const Parameter& parameter : state.parameters) {
    payload.String(parameter.name);
    payload.U8(parameter.requires_grad ? 1 : 0);
    WriteTensor(parameter.data, options.nominal, payload);
    payload.U8(parameter.has_grad() ? 1 : 0);
    if (parameter.has_grad()) WriteTensor(parameter.grad, options.nominal, payload);
  }
  if (with_optimizer) {
    const OptimizerState& optimizer = *state.optimizer;
    payload.I64(optimizer.group.step);
    payload.F32(optimizer.group.learning_rate);
    payload.F32(optimizer.group.initial_learning_rate);
    payload.U64(optimizer.parameter_states.size());
    for (const auto& [parameter_name, states] : optimizer.parameter_states) {
      payload.String(parameter_name);
      payload.U64(states.size());
      for (const auto& [state_name, tensor] : states) {
        payload.String(state_name);
        WriteTensor(tensor, options.nominal, payload);
      }
    }
    payload.String(state.scheduler.kind);
    WritePropertyBag(state.scheduler.values, payload);
  }
  WritePropertyBag(state.properties, payload);
}

// Bytes [0, 24) of the header: magic, version, reserved, payload length.
std::string DigestedHeader(uint64_t payload_length) {
  StringSink sink;
  ByteWriter header(sink);
  header.Bytes(kMagic, sizeof kMagic);
  header.U32(kFormatVersion);
  header.U32(0);
  header.U64(payload_length);
  return std::move(sink.bytes());
}

// The header checks shared by ParseCheckpoint and LoadCheckpoint: `header` holds the first
// min(kHeaderBytes, total_bytes) bytes of a file of `total_bytes`.
absl::StatusOr<uint64_t> CheckHeader(absl::string_view header, uint64_t total_bytes, absl::string_view source) {
  const absl::string_view magic(kMagic, sizeof kMagic);
  if (header.substr(0, magic.size()) != magic.substr(0, std::min(header.size(), magic.size()))) {
    return absl::InvalidArgumentError(absl::StrCat(source, " is not a traind checkpoint (wrong magic bytes)"));
  }
  if (total_bytes < kHeaderBytes) {
    return absl::DataLossError(absl::StrCat(source, " is damaged: truncated to ", total_bytes,
                                            " bytes, shorter than the ", kHeaderBytes, "-byte header"));
  }
  const uint32_t version = DecodeU32(header.substr(8, 4));
  if (version != kFormatVersion) {
    return absl::FailedPreconditionError(absl::StrCat(source, " has checkpoint format version ", version,
                                                      "; this build reads version ", kFormatVersion,
                                                      " (a newer traind wrote it, or the file is damaged)"));
  }
  const uint64_t payload_length = DecodeU64(header.substr(16, 8));
  const uint64_t payload_available = total_bytes - kHeaderBytes;
  if (payload_length > payload_available) {
    return absl::DataLossError(absl::StrCat(source, " is damaged: truncated, the header promises ", payload_length,
                                            " payload bytes but only ", payload_available, " follow"));
  }
  if (payload_length < payload_available) {
    return absl::DataLossError(absl::StrCat(source, " is damaged: ", payload_available - payload_length,
                                            " unexpected bytes after the ", payload_length, "-byte payload"));
  }
  return payload_length;
}

// After the payload was digested: the digest, then the reserved field, then the parse result decide.
absl::StatusOr<CheckpointState> Verdict(absl::string_view header, Sha256& digest,
                                        absl::StatusOr<CheckpointState> parsed, absl::string_view source) {
  const std::string actual = digest.FinishHex();
  const absl::string_view expected = header.substr(kDigestedHeaderBytes, kDigestHexBytes);
  if (actual != expected) {
    return absl::DataLossError(absl::StrCat(source, " is damaged: SHA-256 of the content is ", actual,
                                            " but the header records ", absl::CHexEscape(expected)));
  }
  if (DecodeU32(header.substr(12, 4)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": reserved header field is not 0"));
  }
  if (!parsed.ok()) {
    return absl::Status(parsed.status().code(), absl::StrCat(source, " is malformed: ", parsed.status().message()));
  }
  return parsed;
}

}  // namespace

absl::StatusOr<int64_t> SerializedCheckpointSize(const CheckpointState& state, const CheckpointSaveOptions& options) {
  TRAIND_RETURN_IF_ERROR(ValidateCheckpointState(state, /*allow_shape_only=*/options.nominal));
  CountingSink counter;
  ByteWriter payload(counter);
  WritePayload(state, options, payload);
  return static_cast<int64_t>(kHeaderBytes + counter.count());
}

absl::StatusOr<std::string> SerializeCheckpoint(const CheckpointState& state, const CheckpointSaveOptions& options) {
  TRAIND_RETURN_IF_ERROR(ValidateCheckpointState(state, /*allow_shape_only=*/options.nominal));
  StringSink payload_bytes;
  ByteWriter payload(payload_bytes);
  WritePayload(state, options, payload);
  std::string file = DigestedHeader(payload_bytes.bytes().size());
  Sha256 digest;
  digest.Update(file);
  digest.Update(payload_bytes.bytes());
  file += digest.FinishHex();
  file += payload_bytes.bytes();
  return file;
}

absl::StatusOr<CheckpointState> ParseCheckpoint(absl::string_view bytes, absl::string_view source) {
  TRAIND_ASSIGN_OR_RETURN(const uint64_t payload_length,
                          CheckHeader(bytes.substr(0, kHeaderBytes), bytes.size(), source));
  const absl::string_view payload = bytes.substr(kHeaderBytes, payload_length);
  Sha256 digest;
  digest.Update(bytes.substr(0, kDigestedHeaderBytes));
  digest.Update(payload);
  // The digest is checked first: a damaged file is never parsed.
  const std::string actual = digest.FinishHex();
  const absl::string_view expected = bytes.substr(kDigestedHeaderBytes, kDigestHexBytes);
  if (actual != expected) {
    return absl::DataLossError(absl::StrCat(source, " is damaged: SHA-256 of the content is ", actual,
                                            " but the header records ", absl::CHexEscape(expected)));
  }
  if (DecodeU32(bytes.substr(12, 4)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": reserved header field is not 0"));
  }
  MemorySource source_bytes(payload);
  absl::StatusOr<CheckpointState> state = ParsePayload(source_bytes);
  if (!state.ok()) {
    return absl::Status(state.status().code(), absl::StrCat(source, " is malformed: ", state.status().message()));
  }
  return state;
}

absl::Status SaveCheckpoint(const std::string& path, const CheckpointState& state,
                            const CheckpointSaveOptions& options) {
  // Streamed: the payload's length is counted first (its digest covers the header, which holds the length), then
  // the payload goes to the file with its digest computed on the way, and the header is written last.
  TRAIND_ASSIGN_OR_RETURN(const int64_t total_bytes, SerializedCheckpointSize(state, options));
  const uint64_t payload_length = static_cast<uint64_t>(total_bytes) - kHeaderBytes;
  TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<AtomicFileWriter> file, AtomicFileWriter::Create(path));
  const std::string header = DigestedHeader(payload_length);
  TRAIND_RETURN_IF_ERROR(file->Append(std::string(kHeaderBytes, '\0')));
  Sha256 digest;
  digest.Update(header);
  FileSink sink(file.get(), &digest);
  ByteWriter payload(sink);
  WritePayload(state, options, payload);
  TRAIND_RETURN_IF_ERROR(sink.Finish());
  TRAIND_RETURN_IF_ERROR(file->WriteAt(0, header + digest.FinishHex()));
  return file->Commit();
}

absl::StatusOr<CheckpointState> LoadCheckpoint(const std::string& path, int64_t max_bytes,
                                               std::string* file_sha256_hex) {
  const std::string source = absl::StrCat("checkpoint '", path, "'");
  TRAIND_ASSIGN_OR_RETURN(std::unique_ptr<FileReader> file, FileReader::Open(path));
  if (file->size() > max_bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("'", path, "' has ", file->size(), " bytes, more than the limit of ", max_bytes));
  }
  std::string header(static_cast<size_t>(std::min<int64_t>(file->size(), kHeaderBytes)), '\0');
  TRAIND_RETURN_IF_ERROR(file->Read(header.data(), header.size()));
  TRAIND_ASSIGN_OR_RETURN(const uint64_t payload_length,
                          CheckHeader(header, static_cast<uint64_t>(file->size()), source));
  // Parsed while read (tensors straight into their buffers), digested on the way; the verdict waits for the digest.
  Sha256 digest;
  digest.Update(absl::string_view(header).substr(0, kDigestedHeaderBytes));
  Sha256 file_digest;
  file_digest.Update(header);
  std::vector<Sha256*> digests = {&digest};
  if (file_sha256_hex != nullptr) digests.push_back(&file_digest);
  FileSource payload(file.get(), payload_length, digests);
  absl::StatusOr<CheckpointState> parsed = ParsePayload(payload);
  TRAIND_RETURN_IF_ERROR(payload.Drain());
  absl::StatusOr<CheckpointState> state = Verdict(header, digest, std::move(parsed), source);
  if (state.ok() && file_sha256_hex != nullptr) *file_sha256_hex = file_digest.FinishHex();
  return state;
}

int64_t GetParametersSize(const CheckpointState& state, bool trainable_only) {
  // Each count is at most 2^40 (Tensor's limit); overflowing int64 would take 2^23 such tensors.
  int64_t total = 0;
  ForEachSelected(state, trainable_only, [&](const Parameter& parameter) { total += parameter.data.num_elements(); });
  return total;
}

absl::StatusOr<Tensor> GetContiguousParameters(const CheckpointState& state, bool trainable_only) {
  absl::Status error;
  ForEachSelected(state, trainable_only, [&](const Parameter& parameter) {
    if (!error.ok()) return;
    if (parameter.data.dtype() != DataType::kFloat32) {
      error = absl::InvalidArgumentError(absl::StrCat("parameter '", parameter.name, "' is ",
                                                      DataTypeName(parameter.data.dtype()), ", not float"));
    } else if (!parameter.data.defined()) {
      error = absl::FailedPreconditionError(
          absl::StrCat("parameter '", parameter.name, "' has no data (nominal checkpoint)"));
    }
  });
  TRAIND_RETURN_IF_ERROR(error);
  TRAIND_ASSIGN_OR_RETURN(Tensor buffer,
                          Tensor::Allocate(DataType::kFloat32, {GetParametersSize(state, trainable_only)}));
  float* out = buffer.mutable_data<float>();
  ForEachSelected(state, trainable_only, [&](const Parameter& parameter) {
    out = std::copy_n(parameter.data.data<float>(), parameter.data.num_elements(), out);
  });
  return buffer;
}

absl::Status CopyBufferToParameters(absl::Span<const float> buffer, bool trainable_only, CheckpointState& state) {
  const int64_t expected = GetParametersSize(state, trainable_only);
  if (static_cast<int64_t>(buffer.size()) != expected) {
    return absl::InvalidArgumentError(absl::StrCat("buffer holds ", buffer.size(), " floats but the ",
                                                   trainable_only ? "trainable " : "", "parameters hold ", expected));
  }
  // Every check and allocation first, so that a failure leaves all parameters unchanged.
  absl::Status error;
  std::vector<Tensor> targets;
  ForEachSelected(state, trainable_only, [&](const Parameter& parameter) {
    if (!error.ok()) return;
    if (parameter.data.dtype() != DataType::kFloat32) {
      error = absl::InvalidArgumentError(absl::StrCat("parameter '", parameter.name, "' is ",
                                                      DataTypeName(parameter.data.dtype()), ", not float"));
      return;
    }
    if (parameter.data.defined()) {
      targets.push_back(parameter.data);  // Shares the buffer: the copy below writes in place.
      return;
    }
    absl::StatusOr<Tensor> storage = Tensor::Allocate(DataType::kFloat32, parameter.data.shape());
    if (!storage.ok()) {
      error = storage.status();
      return;
    }
    targets.push_back(*std::move(storage));
  });
  TRAIND_RETURN_IF_ERROR(error);
  const float* in = buffer.data();
  size_t index = 0;
  ForEachSelected(state, trainable_only, [&](Parameter& parameter) {
    Tensor& target = targets[index++];
    std::copy_n(in, target.num_elements(), target.mutable_data<float>());
    in += target.num_elements();
    parameter.data = target;
  });
  return absl::OkStatus();
}

}  // namespace traind::engine
