"""Building blocks: each appends ONNX nodes (and initializers) to the base model and returns the names of the
values it made, so blocks stack by passing names (onnxruntime.training.onnxblock.blocks' API).

traind's loss values are scalars: Constant makes a scalar, Pow's exponent is a scalar and ReduceMean / ReduceSum
reduce every axis without keeping them (keepdims=0), so a loss built from them is a float scalar as the daemon
requires.
"""

import abc
import copy
import logging

import onnx

from traind_client.training.onnxblock import _graph_utils, model_accessor


class Block(abc.ABC):
    """Base class of every block. A subclass implements build(*input_names) -> output name(s), appending to
    `self.base` (the onnx.ModelProto being built, set when the block is called)."""

    def __init__(self):
        self.base = None

    @abc.abstractmethod
    def build(self, *args, **kwargs):
        """Stacks this block on the named inputs; returns the name(s) of its output(s)."""

    def __call__(self, *args, **kwargs):
        self.base = model_accessor.current().model
        logging.debug("Building block: %s", self.__class__.__name__)
        return self.build(*args, **kwargs)


def _append_node(model, op_type, inputs, token, **attributes):
    output = _graph_utils.generate_graph_name(f"{token}_output")
    model.graph.node.append(onnx.helper.make_node(op_type, list(inputs), [output],
                                                  name=_graph_utils.generate_graph_name(op_type), **attributes))
    return output


def _append_scalar(model, token, value):
    name = _graph_utils.generate_graph_name(token)
    model.graph.initializer.append(onnx.helper.make_tensor(name, onnx.TensorProto.FLOAT, [], [value]))
    return name


class _BinaryOp(Block):
    def __init__(self, op_name):
        super().__init__()
        self._op_name = op_name

    def build(self, input_name1, input_name2):
        return _append_node(self.base, self._op_name, [input_name1, input_name2], self._op_name.lower())


class Add(_BinaryOp):
    def __init__(self):
        super().__init__("Add")


class Sub(_BinaryOp):
    def __init__(self):
        super().__init__("Sub")


class Mul(_BinaryOp):
    def __init__(self):
        super().__init__("Mul")


class Div(_BinaryOp):
    def __init__(self):
        super().__init__("Div")


class _UnaryOp(Block):
    def __init__(self, op_name, **attributes):
        super().__init__()
        self._op_name = op_name
        self._attributes = attributes

    def build(self, input_name):
        return _append_node(self.base, self._op_name, [input_name], self._op_name.lower(), **self._attributes)


class ReduceMean(_UnaryOp):
    """Mean over every element: a scalar."""

    def __init__(self):
        super().__init__("ReduceMean", keepdims=0)


class ReduceSum(_UnaryOp):
    """Sum over every element: a scalar."""

    def __init__(self):
        super().__init__("ReduceSum", keepdims=0)


class Sigmoid(_UnaryOp):
    def __init__(self):
        super().__init__("Sigmoid")


class Log(_UnaryOp):
    def __init__(self):
        super().__init__("Log")


class Neg(_UnaryOp):
    def __init__(self):
        super().__init__("Neg")


class Abs(_UnaryOp):
    def __init__(self):
        super().__init__("Abs")


class Pow(Block):
    """x ** exponent, the exponent a float constant."""

    def __init__(self, exponent):
        super().__init__()
        self._exponent = float(exponent)

    def build(self, pow_input_name):
        exponent = _append_scalar(self.base, "pow_exponent", self._exponent)
        return _append_node(self.base, "Pow", [pow_input_name, exponent], "pow")


class Constant(Block):
    """A float scalar constant (an initializer of the loss graph)."""

    def __init__(self, value_float):
        super().__init__()
        self._value = float(value_float)

    def build(self):
        return _append_scalar(self.base, "initializer", self._value)


class PassThrough(Block):
    """Returns its input names unchanged."""

    def build(self, *input_names):
        return input_names[0] if len(input_names) == 1 else input_names


class InputLike(Block):
    """Adds a graph input typed like the graph input or output `like` (how losses create their targets)."""

    def __init__(self, like):
        super().__init__()
        self._like = like

    def build(self, input_name=None):
        cloned = None
        for lookup in (_graph_utils.get_input_from_input_name, _graph_utils.get_output_from_output_name):
            try:
                cloned = copy.deepcopy(lookup(self.base, self._like))
            except LookupError:
                pass
        if cloned is None:
            raise LookupError(f"could not find an input or output named {self._like}")
        cloned.name = input_name or _graph_utils.generate_graph_name("user_input")
        self.base.graph.input.append(cloned)
        return cloned.name
