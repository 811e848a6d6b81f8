"""numpy arrays <-> traind.v1.Tensor (dense, row-major, little-endian; see the proto's Tensor message)."""

import numpy as np

from traind_client._proto import training_service_pb2 as pb

# Wire dtype <-> numpy dtype (little-endian). BOOL travels as one byte 0/1 per element, as numpy stores it.
_TO_NUMPY = {
    pb.FLOAT32: np.dtype("<f4"),
    pb.FLOAT64: np.dtype("<f8"),
    pb.INT64: np.dtype("<i8"),
    pb.INT32: np.dtype("<i4"),
    pb.BOOL: np.dtype("?"),
    pb.UINT8: np.dtype("u1"),
    pb.INT8: np.dtype("i1"),
    pb.FLOAT16: np.dtype("<f2"),
}
_FROM_NUMPY = {dtype: wire for wire, dtype in _TO_NUMPY.items()}


def wire_dtype(dtype):
    """The traind.v1.DataType of a numpy dtype; TypeError for dtypes the wire has no name for."""
    dtype = np.dtype(dtype)
    try:
        return _FROM_NUMPY[dtype.newbyteorder("<")]  # the kind and size; to_wire converts the byte order
    except KeyError:
        names = ", ".join(sorted(str(d) for d in _FROM_NUMPY))
        raise TypeError(f"a {dtype} array cannot be sent to traind (it takes {names})") from None


def numpy_dtype(wire):
    """The numpy dtype of a traind.v1.DataType; ValueError for an unknown one."""
    try:
        return _TO_NUMPY[wire]
    except KeyError:
        raise ValueError(f"traind sent a tensor of unknown dtype {wire}") from None


def to_wire(array, name="", out=None):
    """A traind.v1.Tensor holding `array` (anything np.asarray accepts; object and string arrays are refused)."""
    array = np.asarray(array)
    wire = wire_dtype(array.dtype)
    little = array.astype(_TO_NUMPY[wire], copy=False)  # a no-op on little-endian hosts
    tensor = out if out is not None else pb.Tensor()
    tensor.name = name
    tensor.dtype = wire
    tensor.shape[:] = array.shape
    tensor.data = np.ascontiguousarray(little).tobytes()
    return tensor


def from_wire(tensor):
    """A writable numpy array (native byte order) from a traind.v1.Tensor; ValueError when the data does not
    match dtype and shape."""
    dtype = numpy_dtype(tensor.dtype)
    shape = tuple(tensor.shape)
    if any(dim < 0 for dim in shape):
        raise ValueError(f"tensor '{tensor.name}' has a negative dimension {shape}")
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if len(tensor.data) != count * dtype.itemsize:
        raise ValueError(f"tensor '{tensor.name}' holds {len(tensor.data)} bytes but {dtype} {list(shape)} needs "
                         f"{count * dtype.itemsize}")
    array = np.frombuffer(tensor.data, dtype=dtype, count=count).reshape(shape)
    return array.astype(dtype.newbyteorder("="), copy=True)


def named_to_wire(arrays, field):
    """Appends one Tensor per (name, array) of a mapping (or iterable of pairs) to the repeated `field`."""
    items = arrays.items() if hasattr(arrays, "items") else arrays
    for name, array in items:
        if not isinstance(name, str) or not name:
            raise ValueError(f"tensor names must be non-empty strings, got {name!r}")
        to_wire(array, name, field.add())


def named_from_wire(tensors):
    """{name: array} of repeated Tensors, in their order."""
    return {tensor.name: from_wire(tensor) for tensor in tensors}
