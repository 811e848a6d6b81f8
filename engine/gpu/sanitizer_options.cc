// Sanitizer settings for every binary that loads an OpenCL platform (the daemon, the GPU tests). They matter only
// in sanitizer builds (--config=asan, --config=fuzz): elsewhere nothing calls these functions.
//
// pocl compiles kernels with LLVM and starts it when its platform initialises (the process's first clGetPlatformIDs:
// ListDevices). LLVM then installs its crash handlers and replaces the calling thread's alternate signal stack with a
// larger one of its own, from malloc, when the thread's is smaller than SIGSTKSZ + 64 KiB
// (llvm/lib/Support/Unix/Signals.inc, CreateSigAltStack). ASan gives every thread an alternate stack of
// 4 x SIGSTKSZ, mmap'd, and at the thread's exit unmaps whatever alternate stack the thread then has
// (UnsetAlternateSignalStack); for LLVM's malloc'd one that fails and ASan stops the process with "CHECK failed: ...
// unable to unmap". Whether LLVM replaces the stack depends on the CPU: SIGSTKSZ is sysconf's (glibc >= 2.34),
// derived from the kernel's AT_MINSIGSTKSZ, so 4 x SIGSTKSZ >= SIGSTKSZ + 64 KiB only where the CPU's signal frame is
// large (SIGSTKSZ 47,808 on the Zen 5 machine of 2026-11-26, where the daemons lived); elsewhere a daemon died once
// the thread that had first listed the OpenCL devices (a gRPC thread answering GetServerInfo or CreateSession)
// exited. Without ASan's own alternate stacks
// (use_sigaltstack=0) nothing unmaps LLVM's; ASan then reports a stack overflow as a plain SEGV, which is all that is
// lost.
//
// LeakSanitizer: pocl and LLVM keep compiler state for the life of the process.

extern "C" const char* __asan_default_options() { return "use_sigaltstack=0"; }

extern "C" const char* __lsan_default_suppressions() { return "leak:libpocl.so\nleak:libLLVM\nleak:libclang\n"; }
