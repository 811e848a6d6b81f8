"""The Client the ONNX Runtime-compatible layer uses: made on first use with traind_client.connect() (so
$TRAIND_ADDRESS, $TRAIND_TOKEN apply), or set explicitly."""

import threading

from traind_client._channel import connect

_lock = threading.Lock()
_client = None


def default_client():
    global _client
    with _lock:
        if _client is None:
            _client = connect()
        return _client


def set_default_client(client):
    """Makes `client` (a traind_client.Client, or None to connect again on next use) the one the training API
    uses; returns the previous one."""
    global _client
    with _lock:
        previous, _client = _client, client
        return previous
