"""The generated gRPC code (private): training_service_pb2 and training_service_pb2_grpc.

They are written at build time by generate_stubs.py (pip's build_py, or Bazel's genrule) from
proto/traind/v1/training_service.proto; nothing here is committed but this file. Use traind_client.v1 for the
messages; only traind_client._client touches the stub.
"""
