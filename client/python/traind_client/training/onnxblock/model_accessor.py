"""The model blocks build on: `with onnxblock.base(model):` makes a copy of `model` the base every block called
inside appends its nodes to (as onnxruntime.training.onnxblock does)."""

import contextlib
import copy

import onnx


class ModelAccessor:
    def __init__(self, model):
        self._model = model

    @property
    def model(self):
        if self._model is None:
            raise RuntimeError("no base model: call blocks inside `with onnxblock.base(model):`")
        return self._model


_GLOBAL_ACCESSOR = None


def current():
    if _GLOBAL_ACCESSOR is None:
        raise RuntimeError("no base model: call blocks inside `with onnxblock.base(model):` (or "
                           "onnxblock.empty_base())")
    return _GLOBAL_ACCESSOR


@contextlib.contextmanager
def base(model):
    """Blocks called inside build on a copy of `model` (an onnx.ModelProto); the caller's model is unchanged."""
    global _GLOBAL_ACCESSOR
    previous = _GLOBAL_ACCESSOR
    _GLOBAL_ACCESSOR = ModelAccessor(copy.deepcopy(model))
    try:
        yield _GLOBAL_ACCESSOR
    finally:
        _GLOBAL_ACCESSOR = previous


@contextlib.contextmanager
def empty_base(opset_version=None):
    """Blocks called inside build on an empty model (ai.onnx opset `opset_version`, default onnx's newest)."""
    model = onnx.helper.make_model(onnx.helper.make_graph([], "empty", [], []),
                                   opset_imports=[onnx.helper.make_opsetid("", opset_version or
                                                                           onnx.defs.onnx_opset_version())])
    with base(model) as accessor:
        yield accessor
