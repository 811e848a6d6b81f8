#include "client/tensor_files.h"

#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "engine/core/dtype.h"
#include "engine/core/tensor.h"
#include "engine/core/tensor_bytes.h"
#include "engine/io/npy.h"

namespace traind::cli {
namespace {

struct DtypePair {
  v1::DataType wire;
  engine::DataType engine;
  const char* name;
};
// The wire's dtypes and the engine's (the .npy reader's) spelling of each.
constexpr DtypePair kDtypes[] = {
    {v1::FLOAT32, engine::DataType::kFloat32, "float32"}, {v1::FLOAT64, engine::DataType::kFloat64, "float64"},
    {v1::INT64, engine::DataType::kInt64, "int64"},       {v1::INT32, engine::DataType::kInt32, "int32"},
    {v1::BOOL, engine::DataType::kBool, "bool"},          {v1::UINT8, engine::DataType::kUint8, "uint8"},
    {v1::INT8, engine::DataType::kInt8, "int8"},          {v1::FLOAT16, engine::DataType::kFloat16, "float16"},
};

const DtypePair* ByWire(v1::DataType dtype) {
  for (const DtypePair& pair : kDtypes) {
    if (pair.wire == dtype) return &pair;
  }
  return nullptr;
}

}  // namespace

absl::StatusOr<v1::Tensor> ReadNpyTensor(const std::string& path, const std::string& name) {
  absl::StatusOr<engine::Tensor> tensor = engine::ReadNpy(path);
  if (!tensor.ok()) return tensor.status();
  const DtypePair* pair = nullptr;
  for (const DtypePair& candidate : kDtypes) {
    if (candidate.engine == tensor->dtype()) pair = &candidate;
  }
  if (pair == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("'", path, "' holds ", engine::DataTypeName(tensor->dtype()),
                                                   " elements, which traind does not take"));
  }
  v1::Tensor wire;
  wire.set_name(name);
  wire.set_dtype(pair->wire);
  for (int64_t dim : tensor->shape()) wire.add_shape(dim);
  wire.set_data(engine::TensorToBytes(*tensor));
  return wire;
}

absl::Status WriteNpyTensor(const std::string& path, const v1::Tensor& tensor) {
  const DtypePair* pair = ByWire(tensor.dtype());
  if (pair == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor '", tensor.name(), "' has dtype ", v1::DataType_Name(tensor.dtype()),
                     ", which has no .npy form here"));
  }
  absl::StatusOr<engine::Tensor> decoded =
      engine::TensorFromBytes(pair->engine, tensor.shape(), tensor.data(), std::numeric_limits<int64_t>::max(),
                              absl::StrCat("tensor '", tensor.name(), "'"));
  if (!decoded.ok()) return decoded.status();
  return engine::WriteNpy(path, *decoded);
}

absl::StatusOr<std::pair<std::string, std::string>> SplitNameAndFile(absl::string_view argument,
                                                                     absl::string_view flag) {
  const size_t equals = argument.find('=');
  if (equals == absl::string_view::npos || equals == 0 || equals + 1 == argument.size()) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, " '", argument, "' is not NAME=FILE"));
  }
  return std::make_pair(std::string(argument.substr(0, equals)), std::string(argument.substr(equals + 1)));
}

v1::Tensor SliceRows(const v1::Tensor& tensor, int64_t begin, int64_t end) {
  v1::Tensor slice;
  slice.set_name(tensor.name());
  slice.set_dtype(tensor.dtype());
  const int64_t rows = tensor.shape(0);
  const size_t row_bytes = rows == 0 ? 0 : tensor.data().size() / static_cast<size_t>(rows);
  slice.add_shape(end - begin);
  for (int i = 1; i < tensor.shape_size(); ++i) slice.add_shape(tensor.shape(i));
  slice.set_data(tensor.data().substr(static_cast<size_t>(begin) * row_bytes,
                                      static_cast<size_t>(end - begin) * row_bytes));
  return slice;
}

std::string DescribeTensor(v1::DataType dtype, const google::protobuf::RepeatedField<int64_t>& shape) {
  const DtypePair* pair = ByWire(dtype);
  const std::string name = pair != nullptr ? pair->name : absl::AsciiStrToLower(v1::DataType_Name(dtype));
  return absl::StrCat(name, "[", absl::StrJoin(shape, ","), "]");
}

std::string ParameterFileName(const std::string& parameter) {
  std::string out;
  for (size_t i = 0; i < parameter.size(); ++i) {
    const char c = parameter[i];
    if (c == '%' || c == '/' || (c == '.' && i == 0)) {
      absl::StrAppend(&out, "%", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
    } else {
      out.push_back(c);
    }
  }
  return out + ".npy";
}

std::string ParameterFromFileName(const std::string& file_name) {
  absl::string_view stem = file_name;
  absl::ConsumeSuffix(&stem, ".npy");
  std::string out;
  for (size_t i = 0; i < stem.size(); ++i) {
    if (stem[i] == '%' && i + 2 < stem.size() && absl::ascii_isxdigit(stem[i + 1]) &&
        absl::ascii_isxdigit(stem[i + 2])) {
      int value = 0;
      (void)absl::SimpleHexAtoi(stem.substr(i + 1, 2), &value);
      out.push_back(static_cast<char>(value));
      i += 2;
    } else {
      out.push_back(stem[i]);
    }
  }
  return out;
}

}  // namespace traind::cli
