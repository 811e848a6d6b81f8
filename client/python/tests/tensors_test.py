"""numpy <-> traind.v1.Tensor: every wire dtype, byte order, layout, and refusal of what does not fit."""

import unittest

import numpy as np

from traind_client import _tensors, v1


class TensorsTest(unittest.TestCase):
    def test_every_wire_dtype_round_trips_exactly(self):
        cases = {
            v1.FLOAT32: np.array([[1.5, -0.0], [np.inf, np.nan]], np.float32),
            v1.FLOAT64: np.array([1e-300, -2.5], np.float64),
            v1.INT64: np.array([-(2 ** 63), 2 ** 63 - 1], np.int64),
            v1.INT32: np.array([[-7], [2 ** 31 - 1]], np.int32),
            v1.BOOL: np.array([True, False, True]),
            v1.UINT8: np.array([0, 255], np.uint8),
            v1.INT8: np.array([-128, 127], np.int8),
            v1.FLOAT16: np.array([0.5, 65504], np.float16),
        }
        for wire, array in cases.items():
            tensor = _tensors.to_wire(array, "x")
            self.assertEqual(tensor.dtype, wire)
            self.assertEqual(list(tensor.shape), list(array.shape))
            self.assertEqual(len(tensor.data), array.nbytes)
            back = _tensors.from_wire(tensor)
            self.assertEqual(back.dtype, array.dtype)
            self.assertEqual(back.tobytes(), array.tobytes())
            self.assertTrue(back.flags.writeable)

    def test_data_is_little_endian_row_major(self):
        tensor = _tensors.to_wire(np.array([[1, 2], [3, 4]], np.int32).T)  # a transposed (column-major) view
        self.assertEqual(tensor.data, b"".join(v.to_bytes(4, "little") for v in (1, 3, 2, 4)))
        big = np.array([1.0, 2.0], dtype=">f4")
        self.assertEqual(_tensors.to_wire(big).data, np.array([1.0, 2.0], "<f4").tobytes())

    def test_scalars_and_empty_tensors(self):
        scalar = _tensors.to_wire(np.float32(3.25))
        self.assertEqual(list(scalar.shape), [])
        self.assertEqual(_tensors.from_wire(scalar).shape, ())
        self.assertEqual(float(_tensors.from_wire(scalar)), 3.25)
        empty = _tensors.to_wire(np.zeros((0, 5), np.float32))
        self.assertEqual(empty.data, b"")
        self.assertEqual(_tensors.from_wire(empty).shape, (0, 5))

    def test_unsendable_dtypes_are_refused(self):
        for array in (np.array(["a"]), np.array([object()]), np.array([1 + 2j]), np.array([1], np.uint16)):
            with self.assertRaises(TypeError):
                _tensors.to_wire(array)

    def test_a_tensor_whose_data_does_not_match_is_refused(self):
        tensor = _tensors.to_wire(np.zeros((2, 3), np.float32))
        tensor.data = tensor.data[:-1]
        with self.assertRaisesRegex(ValueError, "holds 23 bytes"):
            _tensors.from_wire(tensor)
        tensor = v1.Tensor(dtype=v1.FLOAT32, shape=[-1], data=b"")
        with self.assertRaisesRegex(ValueError, "negative"):
            _tensors.from_wire(tensor)
        with self.assertRaisesRegex(ValueError, "unknown dtype"):
            _tensors.from_wire(v1.Tensor(dtype=v1.DATA_TYPE_UNSPECIFIED))

    def test_named_tensors_keep_their_order_and_need_names(self):
        request = v1.TrainStepRequest()
        _tensors.named_to_wire({"b": np.ones(2, np.float32), "a": np.zeros(1, np.int64)}, request.inputs)
        self.assertEqual([t.name for t in request.inputs], ["b", "a"])
        back = _tensors.named_from_wire(request.inputs)
        self.assertEqual(list(back), ["b", "a"])
        np.testing.assert_array_equal(back["a"], np.zeros(1, np.int64))
        with self.assertRaises(ValueError):
            _tensors.named_to_wire({"": np.ones(1)}, v1.TrainStepRequest().inputs)


if __name__ == "__main__":
    unittest.main()
