// A thread that loaded the OpenCL platform first exits cleanly, under AddressSanitizer too (sanitizer_options.cc):
// pocl starts LLVM in its platform's initialisation (the process's first clGetPlatformIDs), and LLVM then replaces
// that thread's alternate signal stack with one of its own from malloc when the thread's is smaller than it wants;
// ASan, were it managing alternate stacks, would fail to unmap that one at the thread's exit and stop the process
// ("unable to unmap"), as daemons did when a gRPC thread that had answered GetServerInfo exited. The thread starts
// with a small alternate stack, what ASan gives threads on CPUs with a small SIGSTKSZ, so that the replacement happens
// whatever this machine's SIGSTKSZ; the test checks that it did. A binary of its own: nothing else in the process may
// have loaded OpenCL before.
#include <signal.h>
#include <sys/mman.h>

#include <thread>

#include "engine/gpu/device.h"
#include "gtest/gtest.h"

namespace traind::engine::gpu {
namespace {

TEST(SanitizerOptionsTest, AThreadThatLoadedOpenClExitsCleanly) {
  absl::Status listed;
  bool replaced = false;
  std::thread worker([&] {
    stack_t small = {};
    small.ss_size = 32 << 10;
    small.ss_sp = mmap(nullptr, small.ss_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(small.ss_sp, MAP_FAILED);
    ASSERT_EQ(sigaltstack(&small, nullptr), 0);
    listed = ListDevices().status();
    stack_t now = {};
    sigaltstack(nullptr, &now);
    replaced = now.ss_sp != small.ss_sp;
    if (replaced) munmap(small.ss_sp, small.ss_size);
  });
  worker.join();  // Without sanitizer_options.cc, an ASan build dies in the worker's exit, before this returns.
  if (!listed.ok()) GTEST_SKIP() << "no OpenCL platform: " << listed;
  EXPECT_TRUE(replaced) << "the OpenCL platform left the thread's small alternate signal stack alone: this test no "
                           "longer exercises the case sanitizer_options.cc is for";
}

}  // namespace
}  // namespace traind::engine::gpu
