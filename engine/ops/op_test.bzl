"""One cc_test per op test file, all with the same dependencies."""

def op_tests(srcs):
    for src in srcs:
        native.cc_test(
            name = src[:-len(".cc")],
            srcs = [src],
            deps = [
                "//engine/ops",
                "//engine/runtime",
                "//engine/testing:op_tester",
                "@gtest//:lib",
            ],
        )
