"""traind_client.training: a drop-in for onnxruntime.training (artifacts, api, onnxblock) that runs on traind.

ONNX Runtime code runs after changing `onnxruntime.training` to `traind_client.training` in its imports; the
daemon's address comes from $TRAIND_ADDRESS (default 127.0.0.1:50051), or set_default_client(connect(...)).
"""

from traind_client.training import api, artifacts, onnxblock
from traind_client.training._connection import default_client, set_default_client

__all__ = ["api", "artifacts", "default_client", "onnxblock", "set_default_client"]
