"""connect(): a Client over a plaintext, TLS or mutual-TLS channel with explicit options."""

import json
import os

import grpc

from traind_client._client import Client

DEFAULT_ADDRESS = "127.0.0.1:50051"
# The daemon's default --max_message_bytes: messages beyond it are refused there anyway.
DEFAULT_MAX_MESSAGE_BYTES = 64 << 20

# Calls that only read may be retried when the daemon is briefly unavailable (restarting, or a connection that
# dropped); calls that change state are not retried, so that a step is never applied twice.
_READ_ONLY_METHODS = ("GetServerInfo", "GetBlobInfo", "GetSession", "ListSessions", "GetLearningRate",
                      "GetParameters", "ListArtifacts", "GetArtifact", "ListCheckpoints", "GetJob", "ListJobs")
_SERVICE_CONFIG = json.dumps({
    "methodConfig": [{
        "name": [{"service": "traind.v1.TrainingService", "method": method} for method in _READ_ONLY_METHODS],
        "retryPolicy": {
            "maxAttempts": 4,
            "initialBackoff": "0.2s",
            "maxBackoff": "2s",
            "backoffMultiplier": 2,
            "retryableStatusCodes": ["UNAVAILABLE"],
        },
    }],
})


def _pem(value, what):
    """PEM bytes from a path or from the PEM itself (bytes or str)."""
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    text = os.fspath(value)
    if "-----BEGIN" in text:
        return text.encode()
    try:
        with open(text, "rb") as file:
            return file.read()
    except OSError as error:
        raise ValueError(f"{what}: cannot read {text}: {error.strerror}") from None


# The HTTP/2 settings the daemon and the C++ client (client/connection.cc) use: a batch of a few hundred KB goes
# out in one frame, within the first flow-control window, without waiting for the peer's window updates.
HTTP2_OPTIONS = [
    ("grpc.http2.max_frame_size", 1 << 20),
    ("grpc.http2.lookahead_bytes", 8 << 20),
    ("grpc.http2.write_buffer_size", 8 << 20),
]


def connect(address=None, *, tls_ca=None, tls_cert=None, tls_key=None, tls_server_name=None, token=None,
            timeout=None, max_message_bytes=DEFAULT_MAX_MESSAGE_BYTES):
    """A Client for the traind daemon at `address` (default: $TRAIND_ADDRESS, then 127.0.0.1:50051).

    TLS when tls_ca is given (the CA that signed the daemon's certificate; PEM path or bytes); mutual TLS when
    tls_cert and tls_key are given too. tls_server_name overrides the name checked in the daemon's certificate.
    token (default $TRAIND_TOKEN) is sent as "authorization: Bearer <token>" on every call. timeout (seconds)
    replaces every call's default deadline. Connecting is lazy: the first call reaches the daemon.
    """
    address = address or os.environ.get("TRAIND_ADDRESS") or DEFAULT_ADDRESS
    token = token if token is not None else os.environ.get("TRAIND_TOKEN")
    if (tls_cert is None) != (tls_key is None):
        raise ValueError("tls_cert and tls_key go together (mutual TLS)")
    options = [
        ("grpc.max_send_message_length", max_message_bytes),
        ("grpc.max_receive_message_length", max_message_bytes),
        ("grpc.enable_retries", 1),
        ("grpc.service_config", _SERVICE_CONFIG),
    ] + HTTP2_OPTIONS
    if tls_server_name:
        options.append(("grpc.ssl_target_name_override", tls_server_name))
    if tls_ca is not None or tls_cert is not None:
        credentials = grpc.ssl_channel_credentials(root_certificates=_pem(tls_ca, "tls_ca"),
                                                   private_key=_pem(tls_key, "tls_key"),
                                                   certificate_chain=_pem(tls_cert, "tls_cert"))
        channel = grpc.secure_channel(address, credentials, options=options)
    else:
        channel = grpc.insecure_channel(address, options=options)
    metadata = [("authorization", f"Bearer {token}")] if token else []
    return Client(channel, metadata=metadata, timeout=timeout, max_message_bytes=max_message_bytes)
