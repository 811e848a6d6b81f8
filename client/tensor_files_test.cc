#include "client/tensor_files.h"

#include <cstdlib>
#include <string>

#include "engine/core/tensor.h"
#include "engine/io/npy.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::cli {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir != nullptr ? dir : "/tmp") + "/" + name;
}

TEST(TensorFilesTest, NpyRoundTripKeepsDtypeShapeAndBytes) {
  auto source = engine::Tensor::FromVector<int64_t>({2, 3}, std::vector<int64_t>{1, -2, 3, 4, 5, -6});
  ASSERT_TRUE(source.ok());
  const std::string path = TempPath("ints.npy");
  ASSERT_TRUE(engine::WriteNpy(path, *source).ok());
  absl::StatusOr<v1::Tensor> wire = ReadNpyTensor(path, "target");
  ASSERT_TRUE(wire.ok()) << wire.status();
  EXPECT_EQ(wire->name(), "target");
  EXPECT_EQ(wire->dtype(), v1::INT64);
  EXPECT_EQ(DescribeTensor(wire->dtype(), wire->shape()), "int64[2,3]");
  EXPECT_EQ(wire->data().size(), 6 * sizeof(int64_t));

  const std::string copy = TempPath("ints_copy.npy");
  ASSERT_TRUE(WriteNpyTensor(copy, *wire).ok());
  absl::StatusOr<engine::Tensor> back = engine::ReadNpy(copy);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->shape(), (engine::Shape{2, 3}));
  EXPECT_EQ(back->data<int64_t>()[5], -6);
}

TEST(TensorFilesTest, RefusesDtypesTheWireCannotCarryAndMalformedTensors) {
  auto int16 = engine::Tensor::FromVector<int16_t>({2}, std::vector<int16_t>{1, 2});
  const std::string path = TempPath("int16.npy");
  ASSERT_TRUE(engine::WriteNpy(path, *int16).ok());
  EXPECT_THAT(std::string(ReadNpyTensor(path, "x").status().message()), HasSubstr("int16"));

  v1::Tensor lying;
  lying.set_name("w");
  lying.set_dtype(v1::FLOAT32);
  lying.add_shape(4);
  lying.set_data(std::string(12, '\0'));  // 3 floats for 4
  EXPECT_EQ(WriteNpyTensor(TempPath("lying.npy"), lying).code(), absl::StatusCode::kInvalidArgument);
  lying.set_dtype(v1::DATA_TYPE_UNSPECIFIED);
  EXPECT_EQ(WriteNpyTensor(TempPath("lying.npy"), lying).code(), absl::StatusCode::kInvalidArgument);
}

TEST(TensorFilesTest, SliceRowsTakesWholeRows) {
  v1::Tensor tensor;
  tensor.set_name("x");
  tensor.set_dtype(v1::INT32);
  tensor.add_shape(3);
  tensor.add_shape(2);
  const int32_t values[] = {0, 1, 10, 11, 20, 21};
  tensor.set_data(reinterpret_cast<const char*>(values), sizeof(values));
  const v1::Tensor middle = SliceRows(tensor, 1, 3);
  EXPECT_EQ(DescribeTensor(middle.dtype(), middle.shape()), "int32[2,2]");
  ASSERT_EQ(middle.data().size(), 4 * sizeof(int32_t));
  EXPECT_EQ(reinterpret_cast<const int32_t*>(middle.data().data())[0], 10);
  EXPECT_EQ(reinterpret_cast<const int32_t*>(middle.data().data())[3], 21);
}

TEST(TensorFilesTest, NameAndFile) {
  auto named = SplitNameAndFile("input=data/x=1.npy", "input");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->first, "input");
  EXPECT_EQ(named->second, "data/x=1.npy");
  EXPECT_FALSE(SplitNameAndFile("input", "input").ok());
  EXPECT_FALSE(SplitNameAndFile("=x.npy", "input").ok());
  EXPECT_FALSE(SplitNameAndFile("input=", "input").ok());
}

TEST(TensorFilesTest, ParameterFileNamesAreOnePathComponentAndInvertible) {
  for (const std::string name : {"fc1.weight", "encoder/layer.0/w", ".hidden", "100%", "..", "a%2Fb"}) {
    const std::string file = ParameterFileName(name);
    EXPECT_EQ(file.find('/'), std::string::npos) << file;
    EXPECT_NE(file[0], '.') << file;
    EXPECT_EQ(ParameterFromFileName(file), name) << file;
  }
  EXPECT_EQ(ParameterFileName("fc1.weight"), "fc1.weight.npy");
}

}  // namespace
}  // namespace traind::cli
