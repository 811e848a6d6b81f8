"""traind's checkpoint format in Python against the C++ engine's reader and writer (engine_checkpoint_tool):
byte-identical files both ways, every damage detected, hostile sizes refused before they allocate."""

import hashlib
import os
import struct
import subprocess
import tempfile
import unittest

import numpy as np

from traind_client import _checkpoint as ckpt


def _tool():
    if "TEST_SRCDIR" in os.environ:
        return os.path.join(os.environ["TEST_SRCDIR"], os.environ["TEST_WORKSPACE"],
                            "client/python/tests/engine_checkpoint_tool")
    return os.environ["ENGINE_CHECKPOINT_TOOL"]


def _sample():
    """The state engine_checkpoint_tool.cc writes, built in Python."""
    t = ckpt.StoredTensor.from_array
    w = ckpt.CheckpointParameter("w", t(0.5 + 0.25 * np.arange(6, dtype=np.float32).reshape(2, 3)), True,
                                 t(-1.0 + 0.125 * np.arange(6, dtype=np.float32).reshape(2, 3)))
    parameters = [
        w,
        ckpt.CheckpointParameter("b", t(0.1 + 0.2 * np.arange(3, dtype=np.float64))),
        ckpt.CheckpointParameter("steps", t(np.array(-7, np.int64)), False),
        ckpt.CheckpointParameter("mask", t(np.array([True, False, True, True])), False),
        ckpt.CheckpointParameter("half", t(np.array([1.5, -2.0], np.float16))),
        ckpt.CheckpointParameter("emb.\u00fc", t(np.array([[1, 4], [7, 10]], np.uint8)), False),
        ckpt.CheckpointParameter("i32", t(np.array([100, 50, 0], np.int32)), False),
        ckpt.CheckpointParameter("empty", t(np.zeros((0, 4), np.float32))),
    ]
    optimizer = ckpt.OptimizerState(step=7, learning_rate=0.25, initial_learning_rate=0.5, parameter_states={
        "w": {"momentum0": t(np.float32(0.01) + np.float32(0.01) * np.arange(6, dtype=np.float32).reshape(2, 3)),
              "momentum1": t(np.float32(0.001) + np.float32(0.001) * np.arange(6, dtype=np.float32).reshape(2, 3))},
        "b": {"momentum0": t(1.0 - np.arange(3, dtype=np.float64))},
    })
    return ckpt.Checkpoint(parameters, optimizer, "linear_warmup_decay", {"warmup_steps": 2, "total_steps": 10},
                           {"epoch": 3, "loss": 0.125, "name": "mnist", "neg": -5, "Zeta": ""})


class CheckpointFormatTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.full = os.path.join(self.dir, "full")
        self.nominal = os.path.join(self.dir, "nominal")
        subprocess.run([_tool(), "write", self.full, self.nominal], check=True)

    def read(self, path):
        with open(path, "rb") as file:
            return file.read()

    def engine_copy(self, data):
        """The bytes the engine writes after reading `data`."""
        source, target = os.path.join(self.dir, "in"), os.path.join(self.dir, "out")
        with open(source, "wb") as file:
            file.write(data)
        subprocess.run([_tool(), "copy", source, target], check=True)
        return self.read(target)

    def test_reads_what_the_engine_wrote(self):
        state = ckpt.load_checkpoint(self.full)
        expected = _sample()
        self.assertEqual([p.name for p in state.parameters], [p.name for p in expected.parameters])
        for got, want in zip(state.parameters, expected.parameters):
            self.assertEqual(got, want, got.name)
        self.assertEqual(state.optimizer, expected.optimizer)
        self.assertEqual(state.scheduler_kind, "linear_warmup_decay")
        self.assertEqual(state.scheduler_values, {"warmup_steps": 2, "total_steps": 10})
        self.assertEqual(state.properties, expected.properties)
        self.assertIsInstance(state.properties["epoch"], int)
        self.assertIsInstance(state.properties["loss"], float)
        np.testing.assert_array_equal(state.parameter("mask").data.array, [True, False, True, True])
        self.assertEqual(state.parameter("steps").data.array.shape, ())

    def test_writes_exactly_the_engines_bytes(self):
        self.assertEqual(ckpt.serialize_checkpoint(_sample()), self.read(self.full))
        self.assertEqual(ckpt.serialize_checkpoint(_sample(), nominal=True), self.read(self.nominal))
        # Read and written again, unchanged (maps sorted by bytes: "Zeta" before "epoch").
        self.assertEqual(ckpt.serialize_checkpoint(ckpt.load_checkpoint(self.full)), self.read(self.full))

    def test_the_engine_reads_what_python_writes(self):
        state = _sample()
        state.properties["added"] = 1.0
        state.parameters[1].grad = ckpt.StoredTensor.from_array(np.full(3, 0.5))
        data = ckpt.serialize_checkpoint(state)
        self.assertEqual(self.engine_copy(data), data)
        without = ckpt.serialize_checkpoint(state, include_optimizer_state=False)
        self.assertEqual(self.engine_copy(without), without)
        self.assertIsNone(ckpt.parse_checkpoint(without).optimizer)

    def test_nominal_checkpoints_have_shapes_only(self):
        state = ckpt.load_checkpoint(self.nominal)
        self.assertTrue(state.nominal)
        self.assertEqual(state.parameter("w").data.shape, (2, 3))
        self.assertIsNone(state.parameter("w").data.array)
        with self.assertRaisesRegex(ckpt.CheckpointError, "no data"):
            ckpt.serialize_checkpoint(state)
        self.assertEqual(ckpt.serialize_checkpoint(state, nominal=True), self.read(self.nominal))

    def test_every_damage_is_detected(self):
        data = self.read(self.full)
        for position in (0, 9, 20, 30, 100, len(data) // 2, len(data) - 1):
            damaged = bytearray(data)
            damaged[position] ^= 0x01
            with self.assertRaises(ckpt.CheckpointError, msg=f"byte {position}"):
                ckpt.parse_checkpoint(bytes(damaged))
        for length in (0, 5, 87, 88, len(data) - 1):
            with self.assertRaises(ckpt.CheckpointError, msg=f"length {length}"):
                ckpt.parse_checkpoint(data[:length])
        with self.assertRaisesRegex(ckpt.CheckpointDamagedError, "SHA-256"):
            ckpt.parse_checkpoint(data[:-1] + bytes([data[-1] ^ 0xFF]))
        with self.assertRaisesRegex(ckpt.CheckpointDamagedError, "unexpected bytes"):
            ckpt.parse_checkpoint(data + b"\0")
        with self.assertRaisesRegex(ckpt.CheckpointDamagedError, "truncated"):
            ckpt.parse_checkpoint(data[:-1])
        with self.assertRaisesRegex(ckpt.CheckpointError, "magic"):
            ckpt.parse_checkpoint(b"PK\x03\x04" + data[4:])
        newer = data[:8] + struct.pack("<I", 2) + data[12:]
        with self.assertRaises(ckpt.CheckpointVersionError):
            ckpt.parse_checkpoint(newer)

    def _with_payload(self, payload):
        header = ckpt.MAGIC + struct.pack("<IIQ", 1, 0, len(payload))
        return header + hashlib.sha256(header + payload).hexdigest().encode() + payload

    def test_hostile_payloads_with_a_valid_digest_are_refused(self):
        cases = {
            "unknown flags": struct.pack("<I", 4),
            "parameter count": struct.pack("<IQ", 0, 1 << 40),
            "bytes remain": struct.pack("<IQ", 0, 1000),
            "more than the limit": struct.pack("<IQI", 0, 1, 1 << 30) + bytes(20),
            "rank": struct.pack("<IQI1sBiI", 0, 1, 1, b"w", 1, 1, 65),
            "negative": struct.pack("<IQI1sBiIq", 0, 1, 1, b"w", 1, 1, 1, -1),
            "elements": struct.pack("<IQI1sBiIqq", 0, 1, 1, b"w", 1, 1, 2, 1 << 30, 1 << 30),
            "needs": struct.pack("<IQI1sBiIq", 0, 1, 1, b"w", 1, 1, 1, 1 << 20),
            "ONNX data type": struct.pack("<IQI1sBiI", 0, 1, 1, b"w", 1, 8, 0),
            "not 0 or 1": struct.pack("<IQI1sBiIf", 0, 1, 1, b"w", 7, 1, 0, 1.0),
            "unread": struct.pack("<IQQ", 0, 0, 0) + b"x",
            "unknown kind": struct.pack("<IQQI1sB", 0, 0, 1, 1, b"p", 9) + bytes(4),
            "appears twice": struct.pack("<IQI1sBiIfBI1sBiIfBQ", 0, 2, 1, b"w", 1, 1, 0, 1.0, 0, 1, b"w", 1, 1, 0,
                                         1.0, 0, 0),
        }
        for message, payload in cases.items():
            with self.assertRaisesRegex(ckpt.CheckpointError, message):
                ckpt.parse_checkpoint(self._with_payload(payload))

    def test_invalid_states_are_not_written(self):
        state = _sample()
        state.parameters.append(ckpt.CheckpointParameter("w", state.parameters[0].data))
        with self.assertRaisesRegex(ckpt.CheckpointError, "twice"):
            ckpt.serialize_checkpoint(state)
        state = _sample()
        state.optimizer.parameter_states["ghost"] = {}
        with self.assertRaisesRegex(ckpt.CheckpointError, "no such parameter"):
            ckpt.serialize_checkpoint(state)
        state = _sample()
        state.parameters[0].grad = ckpt.StoredTensor.from_array(np.zeros(6, np.float32))
        with self.assertRaisesRegex(ckpt.CheckpointError, "grad"):
            ckpt.serialize_checkpoint(state)
        state = _sample()
        state.properties["flag"] = True
        with self.assertRaisesRegex(ckpt.CheckpointError, "int, float or str"):
            ckpt.serialize_checkpoint(state)

    def test_save_is_atomic_and_complete(self):
        path = os.path.join(self.dir, "saved")
        ckpt.save_checkpoint(path, _sample())
        self.assertEqual(self.read(path), self.read(self.full))
        self.assertEqual(sorted(os.listdir(self.dir)), ["full", "nominal", "saved"])


if __name__ == "__main__":
    unittest.main()
