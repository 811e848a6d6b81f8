"""traind_fuzz_test: one libFuzzer target that is also a test in every build.

Under --config=asan (= --config=fuzz: clang 14, libFuzzer, ASan + UBSan; see .bazelrc) the test fuzzes for `seconds`,
starting from its corpus (tests/fuzz/corpus/<name>/); in the other builds (optimised, UBSan alone) it replays that
corpus. Tagged "external": Bazel never caches its result, since a cached pass would have fuzzed nothing.
"""

def traind_fuzz_test(name, srcs, deps = [], seconds = 10, size = "small", tags = []):
    native.cc_binary(
        name = name + "_bin",
        testonly = True,
        srcs = srcs,
        deps = deps + select({
            "//tests/fuzz:fuzzing": [],
            "//conditions:default": ["//tests/fuzz:replay_main"],
        }),
        linkopts = select({
            "//tests/fuzz:fuzzing": ["-fsanitize=fuzzer"],
            "//conditions:default": [],
        }),
    )
    native.filegroup(
        name = name + "_corpus",
        srcs = native.glob(["corpus/%s/**" % name]),
    )
    native.sh_test(
        name = name,
        size = size,
        srcs = ["//tests/fuzz:fuzz_test.sh"],
        args = ["$(location :%s_bin)" % name, "tests/fuzz/corpus/" + name] + select({
            "//tests/fuzz:fuzzing": ["fuzz", str(seconds)],
            "//conditions:default": ["replay"],
        }),
        data = [":" + name + "_bin", ":" + name + "_corpus"],
        tags = tags + ["fuzz", "external"],
    )
