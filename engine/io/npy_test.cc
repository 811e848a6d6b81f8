#include "engine/io/npy.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"

namespace traind::engine {
namespace {

// Written by numpy 1.24: np.save(f, np.arange(6, dtype=np.float32).reshape(2, 3)).
std::string NumpyBytes() {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  header.append(128 - 10 - header.size() - 1, ' ');
  header += '\n';
  std::string out("\x93NUMPY\x01\x00", 8);
  out.push_back(static_cast<char>(header.size()));
  out.push_back(0);
  out += header;
  for (int i = 0; i < 6; ++i) {
    float value = static_cast<float>(i);
    out.append(reinterpret_cast<const char*>(&value), 4);
  }
  return out;
}

TEST(NpyTest, ParsesNumpyOutput) {
  auto tensor = ParseNpy(NumpyBytes());
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_EQ(tensor->dtype(), DataType::kFloat32);
  EXPECT_EQ(tensor->shape(), (Shape{2, 3}));
  EXPECT_EQ(tensor->data<float>()[5], 5.0f);
}

TEST(NpyTest, RoundTripsEveryDtypeAndScalarsAndVectors) {
  auto ints = Tensor::FromVector<int64_t>({3}, std::vector<int64_t>{-1, 0, 7});
  auto doubles = Tensor::FromVector<double>({}, std::vector<double>{2.5});
  auto bools = Tensor::FromVector<uint8_t>({2, 1}, std::vector<uint8_t>{1, 0}, DataType::kBool);
  for (const Tensor& original : {*ints, *doubles, *bools}) {
    auto parsed = ParseNpy(SerializeNpy(original));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->dtype(), original.dtype());
    EXPECT_EQ(parsed->shape(), original.shape());
    EXPECT_EQ(std::string(static_cast<const char*>(parsed->raw_data()), parsed->byte_size()),
              std::string(static_cast<const char*>(original.raw_data()), original.byte_size()));
  }
  EXPECT_EQ(SerializeNpy(*ints).size() % 64, 24u);  // 64-byte aligned data start + 3 int64
}

TEST(NpyTest, RejectsMalformedFiles) {
  const std::string good = NumpyBytes();
  EXPECT_FALSE(ParseNpy("not numpy at all").ok());
  EXPECT_FALSE(ParseNpy(good.substr(0, good.size() - 1)).ok());  // truncated data
  std::string fortran = good;
  fortran.replace(fortran.find("False"), 5, "True ");
  EXPECT_FALSE(ParseNpy(fortran).ok());
  std::string big_endian = good;
  big_endian.replace(big_endian.find("<f4"), 3, ">f4");
  EXPECT_FALSE(ParseNpy(big_endian).ok());
  std::string lying_shape = good;
  lying_shape.replace(lying_shape.find("(2, 3)"), 6, "(9, 3)");
  EXPECT_FALSE(ParseNpy(lying_shape).ok());
}

}  // namespace
}  // namespace traind::engine
