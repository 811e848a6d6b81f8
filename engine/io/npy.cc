#include "engine/io/npy.h"

#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "engine/core/shape.h"
#include "engine/io/file_util.h"

namespace traind::engine {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr int64_t kMaxNpyBytes = int64_t{4} << 30;

struct DescrMapping {
  const char* descr;
  DataType dtype;
};
constexpr DescrMapping kDescrs[] = {
    {"f4", DataType::kFloat32}, {"f8", DataType::kFloat64}, {"i8", DataType::kInt64}, {"i4", DataType::kInt32},
    {"i2", DataType::kInt16},   {"i1", DataType::kInt8},    {"u1", DataType::kUint8}, {"b1", DataType::kBool},
};

// The value of 'key': in the header dict, up to the next top-level ',' or '}' (tuples kept whole).
absl::StatusOr<std::string> HeaderValue(absl::string_view header, absl::string_view key) {
  const std::string quoted = absl::StrCat("'", key, "'");
  size_t pos = header.find(quoted);
  if (pos == absl::string_view::npos) return absl::InvalidArgumentError(absl::StrCat("no '", key, "' in header"));
  pos = header.find(':', pos + quoted.size());
  if (pos == absl::string_view::npos) return absl::InvalidArgumentError("malformed header");
  ++pos;
  int depth = 0;
  size_t end = pos;
  for (; end < header.size(); ++end) {
    const char c = header[end];
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (depth == 0 && (c == ',' || c == '}')) break;
  }
  return std::string(absl::StripAsciiWhitespace(header.substr(pos, end - pos)));
}

}  // namespace

absl::StatusOr<Tensor> ParseNpy(absl::string_view bytes, absl::string_view name) {
  auto error = [name](absl::string_view what) { return absl::InvalidArgumentError(absl::StrCat(name, ": ", what)); };
  if (bytes.size() < 10 || bytes.substr(0, 6) != absl::string_view(kMagic, 6)) return error("not an .npy file");
  const int major = static_cast<unsigned char>(bytes[6]);
  size_t header_length = 0;
  size_t header_start = 0;
  if (major == 1) {
    header_length = static_cast<unsigned char>(bytes[8]) | (static_cast<unsigned char>(bytes[9]) << 8);
    header_start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return error("truncated header");
    uint32_t length = 0;
    std::memcpy(&length, bytes.data() + 8, 4);
    header_length = length;
    header_start = 12;
  } else {
    return error(absl::StrCat("unsupported format version ", major));
  }
  if (bytes.size() < header_start + header_length) return error("truncated header");
  const absl::string_view header = bytes.substr(header_start, header_length);

  absl::StatusOr<std::string> descr = HeaderValue(header, "descr");
  absl::StatusOr<std::string> fortran = HeaderValue(header, "fortran_order");
  absl::StatusOr<std::string> shape_text = HeaderValue(header, "shape");
  if (!descr.ok() || !fortran.ok() || !shape_text.ok()) return error("header lacks descr/fortran_order/shape");
  if (*fortran != "False") return error("Fortran-order arrays are not supported");
  absl::string_view type = absl::StripSuffix(absl::StripPrefix(*descr, "'"), "'");
  if (type.size() != 3 || (type[0] != '<' && type[0] != '|' && type[0] != '=')) {
    return error(absl::StrCat("unsupported dtype ", *descr, " (little-endian only)"));
  }
  DataType dtype = DataType::kUndefined;
  for (const DescrMapping& mapping : kDescrs) {
    if (type.substr(1) == mapping.descr) dtype = mapping.dtype;
  }
  if (dtype == DataType::kUndefined) return error(absl::StrCat("unsupported dtype ", *descr));

  absl::string_view dims_text = absl::StripSuffix(absl::StripPrefix(*shape_text, "("), ")");
  Shape shape;
  for (absl::string_view dim : absl::StrSplit(dims_text, ',', absl::SkipWhitespace())) {
    int64_t value = 0;
    if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(dim), &value) || value < 0) {
      return error(absl::StrCat("bad shape ", *shape_text));
    }
    shape.push_back(value);
  }
  // The header's promise is checked against the bytes present before anything is allocated: a few bytes of
  // header must not make the reader allocate terabytes.
  absl::StatusOr<int64_t> elements = ElementCount(shape);
  if (!elements.ok()) return error(elements.status().message());
  const size_t data_start = header_start + header_length;
  const size_t data_bytes = bytes.size() - data_start;
  if (static_cast<uint64_t>(*elements) > data_bytes / ElementSize(dtype) ||
      static_cast<uint64_t>(*elements) * ElementSize(dtype) != data_bytes) {
    return error(absl::StrCat("holds ", data_bytes, " data bytes, its header promises ", *elements, " elements of ",
                              ElementSize(dtype), " bytes"));
  }
  absl::StatusOr<Tensor> tensor = Tensor::Allocate(dtype, shape);
  if (!tensor.ok()) return error(tensor.status().message());
  if (bytes.size() - data_start != tensor->byte_size()) {
    return error(absl::StrCat("holds ", bytes.size() - data_start, " data bytes, its header promises ",
                              tensor->byte_size()));
  }
  std::memcpy(tensor->mutable_raw_data(), bytes.data() + data_start, tensor->byte_size());
  return tensor;
}

absl::StatusOr<Tensor> ReadNpy(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFileLimited(path, kMaxNpyBytes);
  if (!bytes.ok()) return bytes.status();
  return ParseNpy(*bytes, path);
}

std::string SerializeNpy(const Tensor& tensor) {
  // Precondition (documented): the dtype is one of kDescrs.
  std::string descr;
  for (const DescrMapping& mapping : kDescrs) {
    if (mapping.dtype == tensor.dtype()) {
      descr = absl::StrCat(ElementSize(tensor.dtype()) == 1 ? "|" : "<", mapping.descr);
    }
  }
  std::string shape = absl::StrJoin(tensor.shape(), ", ");
  if (tensor.rank() == 1) shape += ",";
  std::string header = absl::StrCat("{'descr': '", descr, "', 'fortran_order': False, 'shape': (", shape, "), }");
  // Pad with spaces so that the data starts on a 64-byte boundary, ending the header with '\n'.
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::string out(kMagic, 6);
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>(header.size() >> 8));
  out += header;
  out.append(static_cast<const char*>(tensor.raw_data()), tensor.byte_size());
  return out;
}

absl::Status WriteNpy(const std::string& path, const Tensor& tensor) {
  return WriteFileAtomically(path, SerializeNpy(tensor));
}

}  // namespace traind::engine
