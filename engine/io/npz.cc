#include "engine/io/npz.h"

#include <zlib.h>

#include <cstring>
#include <limits>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/io/npy.h"

namespace traind::engine {
namespace {

constexpr uint32_t kLocalHeader = 0x04034b50;
constexpr uint32_t kCentralHeader = 0x02014b50;
constexpr uint32_t kEndOfCentralDirectory = 0x06054b50;
constexpr uint32_t kZip64EndOfCentralDirectory = 0x06064b50;
constexpr uint32_t kZip64Locator = 0x07064b50;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint16_t kStored = 0, kDeflated = 8;

// Little-endian reads at checked offsets.
class Reader {
 public:
  Reader(absl::string_view bytes, std::string where) : bytes_(bytes), where_(std::move(where)) {}

  absl::Status Need(uint64_t offset, uint64_t size, absl::string_view what) const {
    if (offset > bytes_.size() || size > bytes_.size() - offset) {
      return absl::InvalidArgumentError(absl::StrCat(where_, ": ", what, " lies outside the archive"));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<uint64_t> Read(uint64_t offset, int width, absl::string_view what) const {
    TRAIND_RETURN_IF_ERROR(Need(offset, width, what));
    uint64_t value = 0;
    for (int i = width - 1; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(bytes_[offset + i]);
    return value;
  }
  absl::string_view bytes() const { return bytes_; }

 private:
  absl::string_view bytes_;
  std::string where_;
};

struct Entry {
  std::string name;
  uint16_t method = 0;
  uint32_t crc = 0;
  uint64_t compressed = 0;
  uint64_t uncompressed = 0;
  uint64_t local_offset = 0;
};

absl::Status Invalid(absl::string_view where, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", message));
}

// Replaces 0xFFFFFFFF fields from the zip64 extra field, which lists them in this order.
absl::Status ApplyZip64(const Reader& reader, uint64_t extra, uint64_t extra_length, Entry& entry,
                        bool offset_in_extra) {
  uint64_t position = extra;
  const uint64_t end = extra + extra_length;
  while (position + 4 <= end) {
    TRAIND_ASSIGN_OR_RETURN(const uint64_t id, reader.Read(position, 2, "an extra field"));
    TRAIND_ASSIGN_OR_RETURN(const uint64_t size, reader.Read(position + 2, 2, "an extra field"));
    if (position + 4 + size > end) return reader.Need(end + 1, 0, "an extra field");
    if (id == kZip64ExtraId) {
      uint64_t field = position + 4;
      for (uint64_t* value : {&entry.uncompressed, &entry.compressed}) {
        if (*value != 0xFFFFFFFFu) continue;
        if (field + 8 > position + 4 + size) return reader.Need(end + 1, 0, "the zip64 field");
        TRAIND_ASSIGN_OR_RETURN(*value, reader.Read(field, 8, "the zip64 field"));
        field += 8;
      }
      if (offset_in_extra && entry.local_offset == 0xFFFFFFFFu) {
        if (field + 8 > position + 4 + size) return reader.Need(end + 1, 0, "the zip64 field");
        TRAIND_ASSIGN_OR_RETURN(entry.local_offset, reader.Read(field, 8, "the zip64 field"));
      }
    }
    position += 4 + size;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> Inflate(absl::string_view compressed, uint64_t size, absl::string_view where) {
  std::string out(size, '\0');
  z_stream stream = {};
  if (inflateInit2(&stream, -MAX_WBITS) != Z_OK) return absl::InternalError("zlib inflateInit2 failed");
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(compressed.data()));
  stream.avail_in = static_cast<uInt>(compressed.size());
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  stream.avail_out = static_cast<uInt>(out.size());
  const int result = inflate(&stream, Z_FINISH);
  const uint64_t produced = stream.total_out;
  inflateEnd(&stream);
  // Z_STREAM_END with exactly the declared size: anything else (more data, less data, garbage) is refused.
  if (result != Z_STREAM_END || produced != size) {
    return Invalid(where, "the deflated data does not inflate to its declared size");
  }
  return out;
}

}  // namespace

absl::StatusOr<std::map<std::string, Tensor>> ParseNpz(absl::string_view bytes, const NpzLimits& limits,
                                                       absl::string_view name_for_errors) {
  const std::string where(name_for_errors);
  const Reader reader(bytes, where);
  // The end-of-central-directory record sits in the last 64 KiB + 22 bytes (its comment is at most 65535).
  if (bytes.size() < 22) return Invalid(where, "too short to be a zip archive");
  int64_t eocd = -1;
  const int64_t lowest = std::max<int64_t>(0, static_cast<int64_t>(bytes.size()) - 22 - 65535);
  for (int64_t at = static_cast<int64_t>(bytes.size()) - 22; at >= lowest; --at) {
    if (*reader.Read(at, 4, "") == kEndOfCentralDirectory) {
      eocd = at;
      break;
    }
  }
  if (eocd < 0) return Invalid(where, "not a zip archive (no end-of-central-directory record)");
  TRAIND_ASSIGN_OR_RETURN(uint64_t entries, reader.Read(eocd + 10, 2, "the entry count"));
  TRAIND_ASSIGN_OR_RETURN(uint64_t directory, reader.Read(eocd + 16, 4, "the central directory offset"));
  if (entries == 0xFFFF || directory == 0xFFFFFFFFu) {
    // Zip64: the locator just before the record points at the zip64 end record.
    if (eocd < 20) return Invalid(where, "a zip64 archive without its locator");
    TRAIND_ASSIGN_OR_RETURN(const uint64_t locator, reader.Read(eocd - 20, 4, "the zip64 locator"));
    if (locator != kZip64Locator) return Invalid(where, "a zip64 archive without its locator");
    TRAIND_ASSIGN_OR_RETURN(const uint64_t end64, reader.Read(eocd - 12, 8, "the zip64 end record offset"));
    TRAIND_ASSIGN_OR_RETURN(const uint64_t signature, reader.Read(end64, 4, "the zip64 end record"));
    if (signature != kZip64EndOfCentralDirectory) return Invalid(where, "a damaged zip64 end record");
    TRAIND_ASSIGN_OR_RETURN(entries, reader.Read(end64 + 32, 8, "the zip64 entry count"));
    TRAIND_ASSIGN_OR_RETURN(directory, reader.Read(end64 + 48, 8, "the zip64 central directory offset"));
  }
  if (static_cast<int64_t>(entries) > limits.max_entries) {
    return absl::ResourceExhaustedError(
        absl::StrCat(where, ": ", entries, " entries, more than the limit of ", limits.max_entries));
  }

  std::vector<Entry> list;
  uint64_t position = directory;
  for (uint64_t e = 0; e < entries; ++e) {
    TRAIND_ASSIGN_OR_RETURN(const uint64_t signature, reader.Read(position, 4, "a central directory entry"));
    if (signature != kCentralHeader) return Invalid(where, "a damaged central directory");
    Entry entry;
    TRAIND_ASSIGN_OR_RETURN(const uint64_t flags, reader.Read(position + 8, 2, "an entry"));
    TRAIND_ASSIGN_OR_RETURN(const uint64_t method, reader.Read(position + 10, 2, "an entry"));
    TRAIND_ASSIGN_OR_RETURN(const uint64_t crc, reader.Read(position + 16, 4, "an entry"));
    TRAIND_ASSIGN_OR_RETURN(entry.compressed, reader.Read(position + 20, 4, "an entry"));
    TRAIND_ASSIGN_OR_RETURN(entry.uncompressed, reader.Read(position + 24, 4, "an entry"));
    TRAIND_ASSIGN_OR_RETURN(const uint64_t name_length, reader.Read(position + 28, 2, "an entry"));
    TRAIND_ASSIGN_OR_RETURN(const uint64_t extra_length, reader.Read(position + 30, 2, "an entry"));
    TRAIND_ASSIGN_OR_RETURN(const uint64_t comment_length, reader.Read(position + 32, 2, "an entry"));
    TRAIND_ASSIGN_OR_RETURN(entry.local_offset, reader.Read(position + 42, 4, "an entry"));
    TRAIND_RETURN_IF_ERROR(reader.Need(position + 46, name_length + extra_length + comment_length, "an entry"));
    entry.name = std::string(bytes.substr(position + 46, name_length));
    entry.method = static_cast<uint16_t>(method);
    entry.crc = static_cast<uint32_t>(crc);
    TRAIND_RETURN_IF_ERROR(ApplyZip64(reader, position + 46 + name_length, extra_length, entry, true));
    if (flags & 1) return Invalid(where, absl::StrCat("entry '", absl::CHexEscape(entry.name), "' is encrypted"));
    if (entry.method != kStored && entry.method != kDeflated) {
      return Invalid(where, absl::StrCat("entry '", absl::CHexEscape(entry.name), "' uses compression method ",
                                         entry.method, " (stored and deflated are read)"));
    }
    list.push_back(std::move(entry));
    position += 46 + name_length + extra_length + comment_length;
  }

  uint64_t total = 0;
  for (const Entry& entry : list) {
    if (entry.uncompressed > static_cast<uint64_t>(limits.max_total_bytes) - total) {
      return absl::ResourceExhaustedError(absl::StrCat(where, ": the arrays take more than the limit of ",
                                                       limits.max_total_bytes, " bytes"));
    }
    total += entry.uncompressed;
  }
  std::map<std::string, Tensor> arrays;
  for (const Entry& entry : list) {
    const std::string label = absl::StrCat(where, " entry '", absl::CHexEscape(entry.name), "'");
    if (!absl::EndsWith(entry.name, ".npy") || entry.name.size() == 4) {
      return Invalid(label, "is not a .npy array");
    }
    TRAIND_ASSIGN_OR_RETURN(const uint64_t signature, reader.Read(entry.local_offset, 4, label));
    if (signature != kLocalHeader) return Invalid(label, "has no local header");
    TRAIND_ASSIGN_OR_RETURN(const uint64_t name_length, reader.Read(entry.local_offset + 26, 2, label));
    TRAIND_ASSIGN_OR_RETURN(const uint64_t extra_length, reader.Read(entry.local_offset + 28, 2, label));
    const uint64_t data = entry.local_offset + 30 + name_length + extra_length;
    TRAIND_RETURN_IF_ERROR(reader.Need(data, entry.compressed, label));
    if (entry.compressed > std::numeric_limits<uInt>::max() || entry.uncompressed > std::numeric_limits<uInt>::max()) {
      return absl::ResourceExhaustedError(absl::StrCat(label, " is larger than 4 GiB; split the array"));
    }
    const absl::string_view stored = bytes.substr(data, entry.compressed);
    std::string inflated;
    absl::string_view content = stored;
    if (entry.method == kDeflated) {
      // Deflate cannot expand more than 1032:1: a larger declared size is a lie, refused before allocating it.
      if (entry.uncompressed > entry.compressed * 1032 + 64) {
        return Invalid(label, "declares more data than its deflated size can hold");
      }
      TRAIND_ASSIGN_OR_RETURN(inflated, Inflate(stored, entry.uncompressed, label));
      content = inflated;
    } else if (entry.compressed != entry.uncompressed) {
      return Invalid(label, "is stored with two different sizes");
    }
    const uLong crc = crc32_z(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(content.data()), content.size());
    if (static_cast<uint32_t>(crc) != entry.crc) return Invalid(label, "fails its CRC-32: the archive is damaged");
    TRAIND_ASSIGN_OR_RETURN(Tensor tensor, ParseNpy(content, label));
    const std::string name = entry.name.substr(0, entry.name.size() - 4);
    if (!arrays.emplace(name, std::move(tensor)).second) {
      return Invalid(label, "appears twice");
    }
  }
  return arrays;
}

}  // namespace traind::engine
