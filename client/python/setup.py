"""traind_client: the Python client of traind (see README.md).

Installs offline over Debian's python3-grpcio, python3-protobuf, python3-numpy and python3-onnx:

    /usr/bin/python3 -m venv --system-site-packages VENV && VENV/bin/pip install ./client/python

The gRPC stubs are generated while building (build_py runs generate_stubs.py with /usr/bin/protoc and
/usr/bin/grpc_python_plugin into the build directory); only setuptools is needed to build.
"""

import os
import sys

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate_stubs  # noqa: E402  (beside this file)


def proto_root():
    """proto/ of the traind checkout this package is built from (or $TRAIND_PROTO_ROOT)."""
    for candidate in (os.environ.get("TRAIND_PROTO_ROOT"), os.path.join(HERE, "proto"),
                      os.path.join(HERE, "..", "..", "proto")):
        if candidate and os.path.isfile(os.path.join(candidate, "traind", "v1", "training_service.proto")):
            return candidate
    raise RuntimeError("proto/traind/v1/training_service.proto not found: build client/python inside a traind "
                       "checkout, or set TRAIND_PROTO_ROOT")


class BuildPyWithStubs(build_py):
    """build_py that also writes the generated stubs into the build directory."""

    def run(self):
        super().run()
        if not self.dry_run:
            generate_stubs.generate(proto_root(), self.build_lib)


setup(
    name="traind-client",
    version="0.1.0",
    description="Python client of traind, a drop-in for onnxruntime.training",
    packages=find_packages(include=["traind_client", "traind_client.*"]),
    python_requires=">=3.9",
    # Debian's python3-grpcio / python3-protobuf / python3-numpy / python3-onnx provide these; pip sees them
    # in a venv made with --system-site-packages and downloads nothing.
    install_requires=["grpcio", "protobuf", "numpy", "onnx"],
    cmdclass={"build_py": BuildPyWithStubs},
)
