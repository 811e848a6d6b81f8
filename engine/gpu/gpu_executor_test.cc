// The OpenCL runtime and the GPU executor: device discovery, the program cache on disk, planned placement and
// transfers, device copies shared between runs and streams, errors. Numbers of every GPU kernel are checked against
// the CPU in //engine/ops:gpu_kernels_test; training in //tests/golden:gpu_training_test.
#include "engine/gpu/gpu_executor.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "engine/gpu/blas.h"
#include "engine/gpu/gpu_testing.h"
#include "engine/io/file_util.h"
#include "engine/model/model_loader.h"
#include "engine/runtime/cpu_executor.h"
#include "engine/runtime/plan.h"
#include "engine/testing/op_tester.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace traind::engine::gpu {
namespace {

using ::testing::HasSubstr;

TEST(DeviceTest, ListsTheOpenClDevices) {
  TRAIND_REQUIRE_GPU();
  auto devices = ListDevices();
  ASSERT_TRUE(devices.ok()) << devices.status();
  ASSERT_FALSE(devices->empty());
  for (size_t i = 0; i < devices->size(); ++i) {
    const DeviceInfo& info = (*devices)[i];
    EXPECT_EQ(info.index, static_cast<int>(i));
    EXPECT_FALSE(info.platform.empty());
    EXPECT_FALSE(info.name.empty());
    EXPECT_THAT(info.version, HasSubstr("OpenCL"));
    EXPECT_GT(info.global_memory_bytes, 0);
    EXPECT_GT(info.max_allocation_bytes, 0);
  }
  auto missing = Device::Get(static_cast<int>(devices->size()));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("no OpenCL device"));
}

TEST(DeviceTest, ProgramsAreCachedOnDiskUnderAKeyOfSourceOptionsDeviceAndDriver) {
  TRAIND_REQUIRE_GPU();
  std::shared_ptr<Device> device = testing::TestDevice();
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/opencl-cache";
  RuntimeOptions options = GetRuntimeOptions();
  options.program_cache_dir = dir;
  SetRuntimeOptions(options);
  EXPECT_NE(device->ProgramCacheKey("a", "-cl-std=CL1.2"), device->ProgramCacheKey("b", "-cl-std=CL1.2"));
  EXPECT_NE(device->ProgramCacheKey("a", "-cl-std=CL1.2"), device->ProgramCacheKey("a", ""));
  EXPECT_NE(device->ProgramCacheKey("ab", ""), device->ProgramCacheKey("a", "b"));

  device->ForgetPrograms();
  ProgramCacheStats before = device->program_cache_stats();
  ASSERT_TRUE(device->Program("accumulate_gradient.cl").ok());
  EXPECT_EQ(device->program_cache_stats().compiled, before.compiled + 1);
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) files.push_back(entry.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_EQ(files[0].extension(), ".bin");

  // A new process (here: forgotten programs) loads the binary instead of compiling.
  device->ForgetPrograms();
  before = device->program_cache_stats();
  ASSERT_TRUE(device->Program("accumulate_gradient.cl").ok());
  EXPECT_EQ(device->program_cache_stats().loaded_binaries, before.loaded_binaries + 1);
  EXPECT_EQ(device->program_cache_stats().compiled, before.compiled);

  // A damaged file is noticed (its digest), removed and replaced by a fresh build.
  {
    std::fstream file(files[0], std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(-1, std::ios::end);
    file.put('\x5a');
  }
  device->ForgetPrograms();
  before = device->program_cache_stats();
  ASSERT_TRUE(device->Program("accumulate_gradient.cl").ok());
  EXPECT_EQ(device->program_cache_stats().rejected_binaries, before.rejected_binaries + 1);
  EXPECT_EQ(device->program_cache_stats().compiled, before.compiled + 1);
  device->ForgetPrograms();
  before = device->program_cache_stats();
  ASSERT_TRUE(device->Program("accumulate_gradient.cl").ok());
  EXPECT_EQ(device->program_cache_stats().loaded_binaries, before.loaded_binaries + 1);

  EXPECT_FALSE(device->Program("no_such_file.cl").ok());
  options.program_cache_dir = "";
  SetRuntimeOptions(options);
}

// C = A B on the device with CLBlast's GEMM (blas.h), against the product computed here.
void ExpectGemmRight(Stream& stream) {
  const int64_t m = 3, n = 2, k = 4;
  Tensor a = *Tensor::FromVector<float>({m, k}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  Tensor b = *Tensor::FromVector<float>({k, n}, {1, -1, 2, -2, 0.5f, 3, -4, 0.25f});
  auto c = stream.AllocateTensor(DataType::kFloat32, {m, n});
  ASSERT_TRUE(c.ok()) << c.status();
  auto a_mem = stream.MakeDeviceCurrent(a);
  auto b_mem = stream.MakeDeviceCurrent(b);
  ASSERT_TRUE(a_mem.ok() && b_mem.ok());
  ASSERT_TRUE(Gemm(stream, m, n, k, 1.0f, Matrix{*a_mem, 0, k, false, 0}, Matrix{*b_mem, 0, n, false, 0}, 0.0f,
                   Matrix{stream.MemOf(*c), 0, n, false, 0})
                  .ok());
  ASSERT_TRUE(stream.MakeHostCurrent(*c).ok());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      float expected = 0;
      for (int64_t p = 0; p < k; ++p) expected += a.data<float>()[i * k + p] * b.data<float>()[p * n + j];
      EXPECT_FLOAT_EQ(c->data<float>()[i * n + j], expected) << i << "," << j;
    }
  }
}

// CLBlast's programs go through the same cache (blas.cc): a process's first GEMM compiles CLBlast's program and keeps
// the binary; after CLBlast forgets its programs (as a new process has none), the next GEMM gets the binary from the
// cache instead of compiling; a binary the driver refuses (here: an intact file holding no program) is dropped and
// compiled again, the GEMM still right.
TEST(DeviceTest, ClBlastProgramsGoThroughTheProgramCache) {
  TRAIND_REQUIRE_GPU();
  ASSERT_TRUE(ClBlastProgramsCached()) << "this libclblast does not export the cache functions blas.cc uses";
  std::shared_ptr<Device> device = testing::TestDevice();
  const std::string dir = std::string(std::getenv("TEST_TMPDIR")) + "/clblast-cache";
  RuntimeOptions options = GetRuntimeOptions();
  options.program_cache_dir = dir;
  SetRuntimeOptions(options);
  auto stream = Stream::Create(device, StreamOptions{});
  ASSERT_TRUE(stream.ok()) << stream.status();

  ForgetClBlastPrograms();
  ProgramCacheStats before = device->program_cache_stats();
  ExpectGemmRight(**stream);
  EXPECT_EQ(device->program_cache_stats().compiled, before.compiled + 1);
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) files.push_back(entry.path());
  ASSERT_EQ(files.size(), 1u);

  ForgetClBlastPrograms();
  before = device->program_cache_stats();
  ExpectGemmRight(**stream);
  EXPECT_EQ(device->program_cache_stats().loaded_binaries, before.loaded_binaries + 1);
  EXPECT_EQ(device->program_cache_stats().compiled, before.compiled);

  // The same format line and a correct digest, but not a program: the driver refuses it.
  absl::StatusOr<std::string> file = ReadFileLimited(files[0].string(), int64_t{1} << 30);
  ASSERT_TRUE(file.ok());
  const std::string garbage = "not a program";
  ASSERT_TRUE(WriteFileAtomically(files[0].string(), absl::StrCat(file->substr(0, file->find('\n')), "\n",
                                                                  Sha256Hex(garbage), "\n", garbage))
                  .ok());
  ForgetClBlastPrograms();
  before = device->program_cache_stats();
  ExpectGemmRight(**stream);
  EXPECT_EQ(device->program_cache_stats().rejected_binaries, before.rejected_binaries + 1);
  EXPECT_EQ(device->program_cache_stats().compiled, before.compiled + 1);
  ForgetClBlastPrograms();
  before = device->program_cache_stats();
  ExpectGemmRight(**stream);
  EXPECT_EQ(device->program_cache_stats().loaded_binaries, before.loaded_binaries + 1);

  options.program_cache_dir = "";
  SetRuntimeOptions(options);
}

// x -> Relu -> Shape (CPU, reads no bytes) ; Relu -> Softmax -> Dropout (CPU) -> Add(w) -> y
onnx::ModelProto MixedModel() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto* graph = model.mutable_graph();
  graph->set_name("mixed");
  auto declare = [](onnx::ValueInfoProto* info, const std::string& name, Shape shape, int type) {
    info->set_name(name);
    info->mutable_type()->mutable_tensor_type()->set_elem_type(type);
    for (int64_t dim : shape) info->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(dim);
  };
  declare(graph->add_input(), "x", {4, 6}, onnx::TensorProto::FLOAT);
  declare(graph->add_input(), "w", {6}, onnx::TensorProto::FLOAT);
  declare(graph->add_output(), "y", {4, 6}, onnx::TensorProto::FLOAT);
  declare(graph->add_output(), "shape", {2}, onnx::TensorProto::INT64);
  auto node = [&](const char* op, std::vector<std::string> inputs, std::string output) {
    onnx::NodeProto* n = graph->add_node();
    n->set_op_type(op);
    n->set_name(output);
    for (const auto& input : inputs) n->add_input(input);
    n->add_output(output);
    return n;
  };
  node("Relu", {"x"}, "r");
  node("Shape", {"r"}, "shape");
  node("Softmax", {"r"}, "s");
  node("Dropout", {"s"}, "d");  // inference: identity, but placed on the CPU (no GPU kernel)
  node("Add", {"d", "w"}, "y");
  // Through the loader, as every model the engine runs: shape inference declares the values' dtypes, which the GPU
  // kernels are chosen by.
  return *LoadModelFromBytes(model.SerializeAsString());
}

TEST(GpuExecutorTest, PlacesNodesPlansTransfersAndKeepsInputsOnTheDevice) {
  TRAIND_REQUIRE_GPU();
  const onnx::ModelProto model = MixedModel();
  auto plan = Compile(model);
  ASSERT_TRUE(plan.ok()) << plan.status();
  auto stream = Stream::Create(testing::TestDevice());
  ASSERT_TRUE(stream.ok());
  GpuExecutorOptions options;
  options.stream = *stream;
  auto executor = GpuExecutor::Create(*plan, model, options);
  ASSERT_TRUE(executor.ok()) << executor.status();
  const Placement& placement = (*executor)->placement();
  EXPECT_EQ(placement.gpu_nodes, 3);  // Relu, Softmax, Add
  EXPECT_EQ(placement.cpu_nodes, 2);  // Shape (no bytes needed), Dropout
  EXPECT_THAT(placement.Summary(), HasSubstr("Dropout (no GPU kernel)"));
  // Up: x, w, Dropout's output; down: Softmax's output for Dropout. Shape reads no bytes.
  EXPECT_EQ(placement.planned_uploads, 3);
  EXPECT_EQ(placement.planned_downloads, 1);

  const Tensor x = engine::testing::RandomTensor({4, 6}, -1, 1, 1), w = engine::testing::RandomTensor({6}, -1, 1, 2);
  CpuExecutor cpu;
  auto expected = cpu.Run(**plan, {x, w});
  ASSERT_TRUE(expected.ok());
  // The plan is an upper bound: Dropout in inference forwards its input, whose device copy is still current after
  // the download, so its output needs no upload.
  auto first = (*executor)->Run(**plan, {x, w});
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ((*executor)->last_run_transfers().uploads, 2);
  EXPECT_EQ((*executor)->last_run_transfers().downloads, 1);
  // The same inputs again: their device copies are current, nothing goes up.
  auto second = (*executor)->Run(**plan, {x, w});
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*executor)->last_run_transfers().uploads, 0);
  EXPECT_EQ((*executor)->last_run_transfers().downloads, 1);
  // The output stays on the device until read; the Shape output is made on the host.
  EXPECT_FALSE((*second)[0].buffer()->host_current());
  EXPECT_TRUE((*second)[1].buffer()->host_current());
  engine::testing::ExpectTensorNear((*expected)[0], (*second)[0], 1e-6, 1e-7, "y");
  engine::testing::ExpectTensorNear((*expected)[1], (*second)[1], 0, 0, "shape");
  // Changing an input on the host makes its device copy stale: it goes up again.
  Tensor changed = x;
  changed.mutable_data<float>()[0] = 5;
  ASSERT_TRUE((*executor)->Run(**plan, {changed, w}).ok());
  EXPECT_EQ((*executor)->last_run_transfers().uploads, 1);

  auto other_plan = Compile(model);
  EXPECT_EQ((*executor)->Run(**other_plan, {x, w}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(GpuExecutorTest, ATensorOfAnotherStreamIsUsedCorrectly) {
  TRAIND_REQUIRE_GPU();
  auto a = Stream::Create(testing::TestDevice());
  auto b = Stream::Create(testing::TestDevice());
  ASSERT_TRUE(a.ok() && b.ok());
  Tensor x = engine::testing::RandomTensor({8}, -1, 1, 3);
  const float first = x.data<float>()[0];
  ASSERT_TRUE((*a)->MakeDeviceCurrent(x).ok());
  Tensor on_b = x;
  auto mem = (*b)->MakeDeviceCurrent(on_b);
  ASSERT_TRUE(mem.ok()) << mem.status();
  EXPECT_NE(on_b.buffer(), x.buffer());  // b uploaded its own copy; a's stays with x
  EXPECT_TRUE((*a)->HoldsCopyOf(x));
  EXPECT_TRUE((*b)->HoldsCopyOf(on_b));
  EXPECT_EQ(on_b.data<float>()[0], first);
}

TEST(StreamTest, DeviceMemoryIsAccountedPooledAndLimited) {
  TRAIND_REQUIRE_GPU();
  std::shared_ptr<Device> device = testing::TestDevice();
  const int64_t baseline = device->bytes_reserved();
  {
    auto stream = Stream::Create(device, StreamOptions{1 << 20});
    ASSERT_TRUE(stream.ok());
    {
      auto tensor = (*stream)->AllocateTensor(DataType::kFloat32, {1000});
      ASSERT_TRUE(tensor.ok());
      EXPECT_EQ((*stream)->bytes_in_use(), 4096);
      EXPECT_GE(device->bytes_reserved(), baseline + 4096);
    }
    EXPECT_EQ((*stream)->bytes_in_use(), 0);
    EXPECT_EQ((*stream)->bytes_cached(), 4096);  // pooled for the next run
    auto too_big = (*stream)->AllocateTensor(DataType::kFloat32, {1 << 20});
    EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_THAT(std::string(too_big.status().message()), HasSubstr("device memory"));
    auto beyond_device = (*stream)->Allocate(static_cast<size_t>(device->info().max_allocation_bytes) + 1);
    EXPECT_EQ(beyond_device.status().code(), absl::StatusCode::kResourceExhausted);
  }
  EXPECT_EQ(device->bytes_reserved(), baseline);  // a closed stream gives everything back
}

}  // namespace
}  // namespace traind::engine::gpu
