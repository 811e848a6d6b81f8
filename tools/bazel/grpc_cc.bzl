"""C++ code generation for .proto files with Debian's protoc and grpc_cpp_plugin (offline, no @com_google_protobuf).

The calling package is the import root: a file `<pkg>/traind/v1/x.proto` is imported as "traind/v1/x.proto"
and its generated header is included as "traind/v1/x.pb.h". Imports of google/protobuf/*.proto resolve to
/usr/include, and their code to Debian's libprotobuf.
"""

def cc_grpc_library(name, srcs, with_grpc = True, deps = [], proto_deps = [], visibility = None):
    """Generates and compiles C++ messages (and, with `with_grpc`, gRPC service stubs) for `srcs`.

    `proto_deps` are the .proto files `srcs` import (for the code generator), `deps` their cc_grpc_library targets.
    """
    pkg = native.package_name()
    outs = []
    for src in srcs:
        stem = src[:-len(".proto")]
        outs += [stem + ".pb.h", stem + ".pb.cc"]
        if with_grpc:
            outs += [stem + ".grpc.pb.h", stem + ".grpc.pb.cc"]
    grpc_flags = ""
    if with_grpc:
        grpc_flags = "--plugin=protoc-gen-grpc=/usr/bin/grpc_cpp_plugin --grpc_out=$(GENDIR)/%s " % pkg
    native.genrule(
        name = name + "_codegen",
        srcs = srcs + proto_deps,
        outs = outs,
        cmd = "/usr/bin/protoc -I%s --cpp_out=$(GENDIR)/%s %s%s" % (
            pkg,
            pkg,
            grpc_flags,
            " ".join(["%s/%s" % (pkg, s) for s in srcs]),
        ),
    )
    native.cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        includes = ["."],
        deps = ["@grpc//:lib"] + deps,
        visibility = visibility,
    )
