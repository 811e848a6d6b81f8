"""traind's checkpoint file, read and written in Python: the format documented at the top of
engine/training/checkpoint.h (version 1), byte for byte.

    header (88 bytes): magic "TRDCKPT\\n", u32 version 1, u32 reserved 0, u64 payload length,
                       64 lower-case hex characters: SHA-256 of bytes [0, 24) followed by the payload
    payload:           u32 flags (bit 0 nominal, bit 1 optimizer section); u64 parameter count, then per parameter
                       string name, u8 requires_grad, tensor data, u8 has_grad, [tensor grad]; if bit 1: i64 step,
                       f32 learning_rate, f32 initial_learning_rate, u64 count, per parameter (sorted) string name,
                       u64 count, per state (sorted) string name, tensor; string scheduler kind, property map
                       scheduler values; then property map properties
    string: u32 length + bytes; tensor: i32 ONNX data type, u32 rank, rank x i64 dims, elements (unless nominal);
    property map: u64 count, per entry (sorted) string name, u8 kind (0 int64, 1 float, 2 string), value.
    Little-endian throughout.

Reading treats the bytes as hostile, as the C++ reader does: every length is checked against what remains,
counts and sizes have the same limits, a SHA-256 mismatch raises CheckpointDamagedError, and nothing half-read
is returned. Maps are written sorted (by UTF-8 bytes, as std::map<std::string> orders them), so equal states
give equal bytes: a file the engine wrote, read and written again here, is identical.
"""

import dataclasses
import hashlib
import os
import struct
import tempfile
from typing import Dict, List, Optional

import numpy as np

MAGIC = b"TRDCKPT\n"
FORMAT_VERSION = 1
_DIGESTED_HEADER_BYTES = 24
_HEADER_BYTES = _DIGESTED_HEADER_BYTES + 64
_FLAG_NOMINAL = 1
_FLAG_OPTIMIZER = 2

# The C++ reader's limits (checkpoint.cc), so that both refuse the same files.
_MAX_ENTRIES = 1 << 20
_MAX_NAME_BYTES = 4096
_MAX_STRING_VALUE_BYTES = 1 << 20
_MAX_RANK = 64
_MAX_ELEMENTS = 1 << 40

_PROPERTY_INT, _PROPERTY_FLOAT, _PROPERTY_STRING = 0, 1, 2

# ONNX TensorProto data types the engine stores -> numpy. bfloat16 has no numpy type: its raw bits are uint16.
ONNX_FLOAT, ONNX_BFLOAT16 = 1, 16
_NUMPY_OF_ONNX = {
    1: np.dtype("<f4"), 2: np.dtype("u1"), 3: np.dtype("i1"), 4: np.dtype("<u2"), 5: np.dtype("<i2"),
    6: np.dtype("<i4"), 7: np.dtype("<i8"), 9: np.dtype("?"), 10: np.dtype("<f2"), 11: np.dtype("<f8"),
    12: np.dtype("<u4"), 13: np.dtype("<u8"), 16: np.dtype("<u2"),
}
_ONNX_OF_NUMPY = {dtype: onnx_type for onnx_type, dtype in _NUMPY_OF_ONNX.items() if onnx_type != ONNX_BFLOAT16}


class CheckpointError(ValueError):
    """A checkpoint could not be read or written."""


class CheckpointDamagedError(CheckpointError):
    """The file is torn or altered (truncated, extra bytes, SHA-256 mismatch): the engine's DataLoss."""


class CheckpointVersionError(CheckpointError):
    """A format version this client cannot read (a newer traind wrote it)."""


@dataclasses.dataclass
class StoredTensor:
    """A tensor of a checkpoint: its ONNX data type, shape, and values (None in a nominal checkpoint)."""
    onnx_type: int
    shape: tuple
    array: Optional[np.ndarray] = None

    @staticmethod
    def from_array(array, onnx_type=None):
        array = np.asarray(array)
        if onnx_type is None:
            try:
                onnx_type = _ONNX_OF_NUMPY[array.dtype.newbyteorder("<")]
            except KeyError:
                raise CheckpointError(f"a {array.dtype} array cannot be stored in a checkpoint") from None
        return StoredTensor(onnx_type, tuple(int(d) for d in array.shape),
                            np.array(array, dtype=_NUMPY_OF_ONNX[onnx_type].newbyteorder("="), order="C"))

    @property
    def nominal(self):
        return self.array is None

    def __eq__(self, other):
        if not isinstance(other, StoredTensor):
            return NotImplemented
        if (self.onnx_type, self.shape, self.nominal) != (other.onnx_type, other.shape, other.nominal):
            return False
        return self.nominal or self.array.tobytes() == other.array.tobytes()


@dataclasses.dataclass
class CheckpointParameter:
    name: str
    data: StoredTensor
    requires_grad: bool = True
    grad: Optional[StoredTensor] = None


@dataclasses.dataclass
class OptimizerState:
    step: int = 0
    learning_rate: float = 0.0
    initial_learning_rate: float = 0.0
    # parameter name -> state name ("momentum0", ...) -> tensor
    parameter_states: Dict[str, Dict[str, StoredTensor]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class Checkpoint:
    """engine::CheckpointState as plain data. `parameters` are in checkpoint order (the order of contiguous
    parameter buffers)."""
    parameters: List[CheckpointParameter] = dataclasses.field(default_factory=list)
    optimizer: Optional[OptimizerState] = None
    scheduler_kind: str = ""
    scheduler_values: Dict[str, object] = dataclasses.field(default_factory=dict)
    properties: Dict[str, object] = dataclasses.field(default_factory=dict)

    @property
    def nominal(self):
        return any(p.data.nominal for p in self.parameters)

    def parameter(self, name):
        for parameter in self.parameters:
            if parameter.name == name:
                return parameter
        raise KeyError(name)


# ---------------------------------------------------------------------------------------------------------------
# Reading


class _Reader:
    """A cursor over a payload whose digest was verified: running out of bytes means a malformed file."""

    def __init__(self, data):
        self._data = memoryview(data)
        self._pos = 0

    def remaining(self):
        return len(self._data) - self._pos

    def take(self, size, what):
        if size > self.remaining():
            raise CheckpointError(f"{what} needs {size} bytes but only {self.remaining()} remain")
        chunk = self._data[self._pos:self._pos + size]
        self._pos += size
        return chunk

    def unpack(self, fmt, what):
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))[0]

    def boolean(self, what):
        value = self.unpack("B", what)
        if value > 1:
            raise CheckpointError(f"{what} is {value}, not 0 or 1")
        return value == 1

    def string(self, max_bytes, what):
        length = self.unpack("I", f"{what} length")
        if length > max_bytes:
            raise CheckpointError(f"{what} has {length} bytes, more than the limit of {max_bytes}")
        raw = bytes(self.take(length, what))
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise CheckpointError(f"{what} is not UTF-8") from None

    def count(self, min_entry_bytes, what):
        value = self.unpack("Q", what)
        if value > _MAX_ENTRIES:
            raise CheckpointError(f"{what} is {value}, more than {_MAX_ENTRIES}")
        if value > self.remaining() // min_entry_bytes:
            raise CheckpointError(f"{what} is {value} but only {self.remaining()} bytes remain")
        return value

    def tensor(self, nominal, what):
        onnx_type = self.unpack("i", f"{what} dtype")
        if onnx_type not in _NUMPY_OF_ONNX:
            raise CheckpointError(f"{what}: unsupported ONNX data type {onnx_type}")
        rank = self.unpack("I", f"{what} rank")
        if rank > _MAX_RANK:
            raise CheckpointError(f"{what} has rank {rank}, more than {_MAX_RANK}")
        shape = tuple(self.unpack("q", f"{what} dims") for _ in range(rank))
        count = 1
        for dim in shape:
            if dim < 0:
                raise CheckpointError(f"{what} has a negative dimension in {list(shape)}")
            count *= dim
            if count > _MAX_ELEMENTS:
                raise CheckpointError(f"{what} shape {list(shape)} has more than {_MAX_ELEMENTS} elements")
        if nominal:
            return StoredTensor(onnx_type, shape, None)
        dtype = _NUMPY_OF_ONNX[onnx_type]
        raw = self.take(count * dtype.itemsize, f"{what} data")
        array = np.frombuffer(raw, dtype=dtype, count=count).reshape(shape).astype(dtype.newbyteorder("="))
        if onnx_type == 9 and np.frombuffer(raw, dtype=np.uint8).max(initial=0) > 1:
            raise CheckpointError(f"{what} is bool but holds bytes other than 0 and 1")
        return StoredTensor(onnx_type, shape, array)

    def properties(self, what):
        bag = {}
        for _ in range(self.count(4 + 1 + 4, f"{what} count")):
            name = self.string(_MAX_NAME_BYTES, f"{what} name")
            entry = f"{what} '{name}'"
            kind = self.unpack("B", f"{entry} kind")
            if kind == _PROPERTY_INT:
                value = self.unpack("q", entry)
            elif kind == _PROPERTY_FLOAT:
                value = self.unpack("f", entry)
            elif kind == _PROPERTY_STRING:
                value = self.string(_MAX_STRING_VALUE_BYTES, entry)
            else:
                raise CheckpointError(f"{entry} has unknown kind {kind}")
            if name in bag:
                raise CheckpointError(f"{entry} appears twice")
            bag[name] = value
        return bag


def _parse_payload(payload):
    reader = _Reader(payload)
    flags = reader.unpack("I", "flags")
    if flags & ~(_FLAG_NOMINAL | _FLAG_OPTIMIZER):
        raise CheckpointError(f"unknown flags {flags & ~(_FLAG_NOMINAL | _FLAG_OPTIMIZER):#x}")
    nominal = bool(flags & _FLAG_NOMINAL)
    checkpoint = Checkpoint()
    for index in range(reader.count(4 + 1 + 8 + 1, "parameter count")):
        name = reader.string(_MAX_NAME_BYTES, f"parameter {index} name")
        what = f"parameter '{name}'"
        requires_grad = reader.boolean(f"{what} requires_grad")
        data = reader.tensor(nominal, what)
        grad = reader.tensor(nominal, f"{what} grad") if reader.boolean(f"{what} has_grad") else None
        checkpoint.parameters.append(CheckpointParameter(name, data, requires_grad, grad))
    if flags & _FLAG_OPTIMIZER:
        optimizer = checkpoint.optimizer = OptimizerState()
        optimizer.step = reader.unpack("q", "optimizer step")
        optimizer.learning_rate = reader.unpack("f", "optimizer learning rate")
        optimizer.initial_learning_rate = reader.unpack("f", "optimizer initial learning rate")
        for index in range(reader.count(4 + 8, "optimizer state count")):
            parameter = reader.string(_MAX_NAME_BYTES, f"optimizer state {index} parameter name")
            what = f"optimizer state of '{parameter}'"
            if parameter in optimizer.parameter_states:
                raise CheckpointError(f"{what} appears twice")
            states = optimizer.parameter_states[parameter] = {}
            for _ in range(reader.count(4 + 8, f"{what} count")):
                state = reader.string(_MAX_NAME_BYTES, f"{what} name")
                if state in states:
                    raise CheckpointError(f"{what} '{state}' appears twice")
                states[state] = reader.tensor(nominal, f"{what} '{state}'")
        checkpoint.scheduler_kind = reader.string(_MAX_NAME_BYTES, "scheduler kind")
        checkpoint.scheduler_values = reader.properties("scheduler value")
    checkpoint.properties = reader.properties("property")
    if reader.remaining():
        raise CheckpointError(f"{reader.remaining()} unread bytes at the end of the payload")
    validate(checkpoint, allow_nominal=nominal)
    return checkpoint


def parse_checkpoint(data, source="checkpoint"):
    """A Checkpoint from the bytes of a checkpoint file. `source` names it in errors."""
    data = bytes(data)
    if data[:len(MAGIC)] != MAGIC[:min(len(data), len(MAGIC))]:
        raise CheckpointError(f"{source} is not a traind checkpoint (wrong magic bytes)")
    if len(data) < _HEADER_BYTES:
        raise CheckpointDamagedError(f"{source} is damaged: truncated to {len(data)} bytes, shorter than the "
                                     f"{_HEADER_BYTES}-byte header")
    version, reserved, payload_length = struct.unpack_from("<IIQ", data, 8)
    if version != FORMAT_VERSION:
        raise CheckpointVersionError(f"{source} has checkpoint format version {version}; this client reads "
                                     f"version {FORMAT_VERSION}")
    available = len(data) - _HEADER_BYTES
    if payload_length > available:
        raise CheckpointDamagedError(f"{source} is damaged: truncated, the header promises {payload_length} "
                                     f"payload bytes but only {available} follow")
    if payload_length < available:
        raise CheckpointDamagedError(f"{source} is damaged: {available - payload_length} unexpected bytes after "
                                     f"the {payload_length}-byte payload")
    payload = data[_HEADER_BYTES:]
    actual = hashlib.sha256(data[:_DIGESTED_HEADER_BYTES] + payload).hexdigest().encode()
    expected = data[_DIGESTED_HEADER_BYTES:_HEADER_BYTES]
    if actual != expected:
        raise CheckpointDamagedError(f"{source} is damaged: SHA-256 of the content is {actual.decode()} but the "
                                     f"header records {expected!r}")
    if reserved != 0:
        raise CheckpointError(f"{source}: reserved header field is not 0")
    try:
        return _parse_payload(payload)
    except CheckpointError as error:
        raise type(error)(f"{source} is malformed: {error}") from None


def load_checkpoint(path):
    with open(path, "rb") as file:
        return parse_checkpoint(file.read(), source=f"checkpoint '{path}'")


# ---------------------------------------------------------------------------------------------------------------
# Writing


def _sorted(mapping):
    return sorted(mapping.items(), key=lambda item: item[0].encode("utf-8"))


def _check_name(name, what):
    if not isinstance(name, str) or not name:
        raise CheckpointError(f"{what} has an empty name")
    if len(name.encode("utf-8")) > _MAX_NAME_BYTES:
        raise CheckpointError(f"{what} name is longer than {_MAX_NAME_BYTES} bytes")


def _check_tensor(tensor, allow_nominal, what):
    if tensor.onnx_type not in _NUMPY_OF_ONNX:
        raise CheckpointError(f"{what} has unsupported ONNX data type {tensor.onnx_type}")
    if len(tensor.shape) > _MAX_RANK:
        raise CheckpointError(f"{what} has rank {len(tensor.shape)}, more than {_MAX_RANK}")
    if tensor.nominal:
        if not allow_nominal:
            raise CheckpointError(f"{what} has no data (a nominal state; save it with nominal=True)")
    elif tuple(tensor.array.shape) != tuple(tensor.shape) or \
            tensor.array.dtype.newbyteorder("<") != _NUMPY_OF_ONNX[tensor.onnx_type]:
        raise CheckpointError(f"{what}: its array ({tensor.array.dtype} {list(tensor.array.shape)}) does not match "
                              f"ONNX type {tensor.onnx_type} {list(tensor.shape)}")


def _check_properties(bag, what):
    if len(bag) > _MAX_ENTRIES:
        raise CheckpointError(f"{what} has more than {_MAX_ENTRIES} entries")
    for name, value in bag.items():
        _check_name(name, f"{what} entry '{name}'")
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise CheckpointError(f"{what} '{name}' must be an int, float or str, got {type(value).__name__}")
        if isinstance(value, int) and not -(1 << 63) <= value < (1 << 63):
            raise CheckpointError(f"{what} '{name}' does not fit in int64")
        if isinstance(value, str) and len(value.encode("utf-8")) > _MAX_STRING_VALUE_BYTES:
            raise CheckpointError(f"{what} '{name}' is longer than {_MAX_STRING_VALUE_BYTES} bytes")


def validate(checkpoint, allow_nominal=False):
    """The invariants every saved or loaded state satisfies (engine ValidateCheckpointState)."""
    if len(checkpoint.parameters) > _MAX_ENTRIES:
        raise CheckpointError(f"checkpoint has more than {_MAX_ENTRIES} parameters")
    names = set()
    for parameter in checkpoint.parameters:
        what = f"parameter '{parameter.name}'"
        _check_name(parameter.name, what)
        if parameter.name in names:
            raise CheckpointError(f"{what} appears twice")
        names.add(parameter.name)
        _check_tensor(parameter.data, allow_nominal, what)
        if parameter.grad is not None:
            _check_tensor(parameter.grad, allow_nominal, f"{what} grad")
            if (parameter.grad.onnx_type, parameter.grad.shape) != (parameter.data.onnx_type, parameter.data.shape):
                raise CheckpointError(f"{what} has a grad of another dtype or shape than its data")
    if checkpoint.optimizer is not None:
        for parameter, states in checkpoint.optimizer.parameter_states.items():
            what = f"optimizer state of '{parameter}'"
            if parameter not in names:
                raise CheckpointError(f"{what}: the checkpoint has no such parameter")
            for state, tensor in states.items():
                _check_name(state, f"{what} entry")
                _check_tensor(tensor, allow_nominal, f"{what} '{state}'")
    if len(checkpoint.scheduler_kind.encode("utf-8")) > _MAX_NAME_BYTES:
        raise CheckpointError(f"scheduler kind has more than {_MAX_NAME_BYTES} bytes")
    _check_properties(checkpoint.scheduler_values, "scheduler value")
    _check_properties(checkpoint.properties, "property")


class _Writer:
    def __init__(self):
        self.parts = []

    def pack(self, fmt, value):
        self.parts.append(struct.pack("<" + fmt, value))

    def string(self, text):
        raw = text.encode("utf-8")
        self.pack("I", len(raw))
        self.parts.append(raw)

    def tensor(self, tensor, nominal):
        self.pack("i", tensor.onnx_type)
        self.pack("I", len(tensor.shape))
        for dim in tensor.shape:
            self.pack("q", dim)
        if not nominal:
            self.parts.append(tensor.array.astype(_NUMPY_OF_ONNX[tensor.onnx_type], copy=False).tobytes())

    def properties(self, bag):
        self.pack("Q", len(bag))
        for name, value in _sorted(bag):
            self.string(name)
            if isinstance(value, int):
                self.pack("B", _PROPERTY_INT)
                self.pack("q", value)
            elif isinstance(value, float):
                self.pack("B", _PROPERTY_FLOAT)
                self.pack("f", value)
            else:
                self.pack("B", _PROPERTY_STRING)
                self.string(value)


def serialize_checkpoint(checkpoint, include_optimizer_state=True, nominal=False):
    """The bytes of a checkpoint file (the engine's SerializeCheckpoint, with the same options)."""
    validate(checkpoint, allow_nominal=nominal)
    with_optimizer = include_optimizer_state and checkpoint.optimizer is not None
    payload = _Writer()
    payload.pack("I", (_FLAG_NOMINAL if nominal else 0) | (_FLAG_OPTIMIZER if with_optimizer else 0))
    payload.pack("Q", len(checkpoint.parameters))
    for parameter in checkpoint.parameters:
        payload.string(parameter.name)
        payload.pack("B", 1 if parameter.requires_grad else 0)
        payload.tensor(parameter.data, nominal)
        payload.pack("B", 1 if parameter.grad is not None else 0)
        if parameter.grad is not None:
            payload.tensor(parameter.grad, nominal)
    if with_optimizer:
        optimizer = checkpoint.optimizer
        payload.pack("q", optimizer.step)
        payload.pack("f", optimizer.learning_rate)
        payload.pack("f", optimizer.initial_learning_rate)
        payload.pack("Q", len(optimizer.parameter_states))
        for parameter, states in _sorted(optimizer.parameter_states):
            payload.string(parameter)
            payload.pack("Q", len(states))
            for state, tensor in _sorted(states):
                payload.string(state)
                payload.tensor(tensor, nominal)
        payload.string(checkpoint.scheduler_kind)
        payload.properties(checkpoint.scheduler_values)
    payload.properties(checkpoint.properties)
    body = b"".join(payload.parts)
    header = MAGIC + struct.pack("<IIQ", FORMAT_VERSION, 0, len(body))
    return header + hashlib.sha256(header + body).hexdigest().encode() + body


def save_checkpoint(path, checkpoint, include_optimizer_state=True, nominal=False):
    """Writes the file atomically (see write_atomically)."""
    write_atomically(path, serialize_checkpoint(checkpoint, include_optimizer_state, nominal))


def write_atomically(path, data):
    """Writes `data` to `path` through a temporary file in the same directory and a rename: a crash leaves the old
    file or the complete new one."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=directory)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise
