"""OrtValue: what ONNX Runtime's training API hands out for buffers and outputs (a tensor with .numpy())."""

import numpy as np

_TYPE_NAMES = {
    np.dtype(np.float32): "float", np.dtype(np.float64): "double", np.dtype(np.float16): "float16",
    np.dtype(np.int64): "int64", np.dtype(np.int32): "int32", np.dtype(np.int8): "int8",
    np.dtype(np.uint8): "uint8", np.dtype(np.bool_): "bool",
}


class OrtValue:
    """A dense CPU tensor, API-compatible with the parts of onnxruntime.OrtValue that training code uses."""

    def __init__(self, array):
        self._array = np.asarray(array)

    @staticmethod
    def ortvalue_from_numpy(numpy_obj, device_type="cpu", device_id=0):
        """Wraps a numpy array (kept by reference, as ORT does on the CPU)."""
        if str(device_type).lower() != "cpu":
            raise ValueError("traind_client OrtValues live on the CPU; the daemon owns device memory")
        return OrtValue(numpy_obj)

    @staticmethod
    def ortvalue_from_shape_and_type(shape, element_type, device_type="cpu", device_id=0):
        return OrtValue.ortvalue_from_numpy(np.zeros(shape, dtype=element_type), device_type, device_id)

    def numpy(self):
        return self._array

    def shape(self):
        return list(self._array.shape)

    def data_type(self):
        return f"tensor({_TYPE_NAMES.get(self._array.dtype, str(self._array.dtype))})"

    def element_type(self):
        return self._array.dtype.type

    def device_name(self):
        return "cpu"

    def is_tensor(self):
        return True

    def has_value(self):
        return True

    def __repr__(self):
        return f"OrtValue({self.data_type()}, shape={self.shape()})"


def as_numpy(value):
    """The array of an OrtValue (or of anything np.asarray takes)."""
    return value.numpy() if isinstance(value, OrtValue) else np.asarray(value)
