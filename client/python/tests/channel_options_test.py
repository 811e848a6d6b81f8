"""The Python client's HTTP/2 channel settings are the C++ client's (client/connection.cc), value for value: a
batch travels the same way from trainctl and from Python."""

import os
import re
import unittest

from traind_client import _channel

# grpc_types.h's macro names -> the channel argument strings Python takes.
_ARGUMENT_NAMES = {
    "GRPC_ARG_HTTP2_MAX_FRAME_SIZE": "grpc.http2.max_frame_size",
    "GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES": "grpc.http2.lookahead_bytes",
    "GRPC_ARG_HTTP2_WRITE_BUFFER_SIZE": "grpc.http2.write_buffer_size",
}


def _value(expression):
    """`1 << 20`, `8 << 20` or a plain integer."""
    match = re.fullmatch(r"\s*(\d+)\s*(?:<<\s*(\d+))?\s*", expression)
    if match is None:
        raise ValueError(f"cannot read {expression!r}")
    return int(match.group(1)) << int(match.group(2) or 0)


class ChannelOptionsTest(unittest.TestCase):
    def test_the_http2_settings_equal_the_cpp_clients(self):
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "connection.cc")
        with open(path) as f:
            source = f.read()
        cpp = {_ARGUMENT_NAMES[name]: _value(value)
               for name, value in re.findall(r"SetInt\((GRPC_ARG_HTTP2_\w+),\s*([^)]+)\)", source)}
        self.assertEqual(len(cpp), 3, "client/connection.cc sets three HTTP/2 arguments")
        self.assertEqual(dict(_channel.HTTP2_OPTIONS), cpp)


if __name__ == "__main__":
    unittest.main()
