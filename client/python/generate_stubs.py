"""Generates traind_client's gRPC stubs from proto/ with Debian's protoc and grpc_python_plugin.

One command for both builds: setup.py's build_py (pip install) and Bazel's genrule call `generate(...)`, so the
installed package and the py_tests run the same generated code. Nothing generated is committed.

The schema is copied into a scratch include root as traind_client/_proto/<name>.proto before protoc runs, so the
generated modules import each other as `traind_client._proto.<name>_pb2` (no top-level `traind` package is
created in the user's environment).
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile

# Generated module stem -> schema file under proto/.
PROTOS = {"training_service": "traind/v1/training_service.proto"}
PACKAGE_DIR = os.path.join("traind_client", "_proto")
PROTOC = os.environ.get("TRAIND_PROTOC", "/usr/bin/protoc")
GRPC_PYTHON_PLUGIN = os.environ.get("TRAIND_GRPC_PYTHON_PLUGIN", "/usr/bin/grpc_python_plugin")


def generate(proto_root, out_dir):
    """Writes traind_client/_proto/<stem>_pb2.py and <stem>_pb2_grpc.py under `out_dir`."""
    for tool in (PROTOC, GRPC_PYTHON_PLUGIN):
        if not os.access(tool, os.X_OK):
            raise RuntimeError(f"{tool} is missing: install protobuf-compiler and protobuf-compiler-grpc "
                               "(deploy/setup.sh does)")
    os.makedirs(os.path.join(out_dir, PACKAGE_DIR), exist_ok=True)
    with tempfile.TemporaryDirectory() as include_root:
        package = os.path.join(include_root, PACKAGE_DIR)
        os.makedirs(package)
        sources = []
        for stem, schema in PROTOS.items():
            source = os.path.join(proto_root, schema)
            if not os.path.isfile(source):
                raise RuntimeError(f"{source} is missing: build from a traind checkout (proto/ beside client/)")
            shutil.copyfile(source, os.path.join(package, stem + ".proto"))
            sources.append(os.path.join(PACKAGE_DIR, stem + ".proto"))
        subprocess.run([PROTOC, f"-I{include_root}", f"--python_out={out_dir}", f"--grpc_python_out={out_dir}",
                        f"--plugin=protoc-gen-grpc_python={GRPC_PYTHON_PLUGIN}", *sources], check=True)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proto_root", required=True, help="the repository's proto/ directory")
    parser.add_argument("--out", required=True, help="directory that receives traind_client/_proto/*.py")
    args = parser.parse_args(argv)
    generate(args.proto_root, args.out)


if __name__ == "__main__":
    main(sys.argv[1:])
