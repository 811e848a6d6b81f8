"""Loss blocks with onnxruntime.training.onnxblock.loss's signatures and graphs (reduced to scalars).

Used inside a custom Block (e.g. the documented WeightedAverageLoss); generate_artifacts' LossType losses use
the daemon's built-in, PyTorch-checked losses instead (see traind_client.training.artifacts).
"""

import copy

import numpy as np
import onnx

from traind_client.training.onnxblock import _graph_utils, blocks

_REDUCTIONS = {"mean": blocks.ReduceMean, "sum": blocks.ReduceSum, "none": blocks.PassThrough}


def _reduction_block(reduction):
    if reduction not in _REDUCTIONS:
        raise RuntimeError(f"Reduction {reduction} not supported.")
    return _REDUCTIONS[reduction]()


class MSELoss(blocks.Block):
    """reduce((output - target) ** 2)."""

    def __init__(self, reduction="mean"):
        super().__init__()
        self._reduce = _reduction_block(reduction)
        self._sub = blocks.Sub()
        self._square = blocks.Pow(2.0)

    def build(self, loss_input_name, target_name="target"):
        if not _graph_utils.node_arg_exists(self.base, target_name):
            target_name = blocks.InputLike(loss_input_name)(target_name)
        return self._reduce(self._square(self._sub(loss_input_name, target_name)))


class L1Loss(blocks.Block):
    """reduce(|output - target|)."""

    def __init__(self, reduction="mean"):
        super().__init__()
        self._reduce = _reduction_block(reduction)
        self._abs = blocks.Abs()
        self._sub = blocks.Sub()

    def build(self, loss_input_name, target_name="target"):
        if not _graph_utils.node_arg_exists(self.base, target_name):
            target_name = blocks.InputLike(loss_input_name)(target_name)
        return self._reduce(self._abs(self._sub(loss_input_name, target_name)))


class CrossEntropyLoss(blocks.Block):
    """SoftmaxCrossEntropyLoss over class scores [N, C, ...] and int64 labels [N, ...] (created as a graph input
    when `labels_name` is not a value of the model), with optional class weights and ignore_index."""

    def __init__(self, weight=None, reduction="mean", ignore_index=None):
        super().__init__()
        if reduction not in _REDUCTIONS:
            raise RuntimeError(f"Reduction {reduction} not supported.")
        self._weight = weight
        self._reduction = reduction
        self._ignore_index = ignore_index

    def build(self, scores_input_name, labels_name="labels"):
        inputs = [scores_input_name, labels_name]
        if self._weight is not None:
            weight_name = _graph_utils.generate_graph_name("celoss.weight")
            self.base.graph.initializer.append(
                onnx.numpy_helper.from_array(np.asarray(self._weight, dtype=np.float32), weight_name))
            inputs.append(weight_name)
        if not _graph_utils.node_arg_exists(self.base, labels_name):
            labels = copy.deepcopy(_graph_utils.get_output_from_output_name(self.base, scores_input_name))
            labels.name = labels_name
            labels.type.tensor_type.elem_type = onnx.TensorProto.INT64
            del labels.type.tensor_type.shape.dim[1]  # scores [N, C, ...] -> labels [N, ...]
            self.base.graph.input.append(labels)
        output = _graph_utils.generate_graph_name("loss")
        self.base.graph.node.append(onnx.helper.make_node(
            "SoftmaxCrossEntropyLoss", inputs, [output], reduction=self._reduction, ignore_index=self._ignore_index,
            name=_graph_utils.generate_graph_name("SoftmaxCrossEntropyLoss")))
        return output


class BCEWithLogitsLoss(blocks.Block):
    """reduce(-weight * (pos_weight * target * log(sigmoid(x)) + (1 - target) * log(1 - sigmoid(x))))."""

    def __init__(self, weight=None, reduction="mean", pos_weight=None):
        super().__init__()
        self._reduce = _reduction_block(reduction)
        self._weight = weight
        self._pos_weight = pos_weight
        self._sigmoid = blocks.Sigmoid()
        self._log = blocks.Log()
        self._sub = blocks.Sub()
        self._add = blocks.Add()
        self._mul = blocks.Mul()
        self._neg = blocks.Neg()

    def _constant(self, token, value):
        name = _graph_utils.generate_graph_name(token)
        self.base.graph.initializer.append(onnx.numpy_helper.from_array(np.asarray(value, dtype=np.float32), name))
        return name

    def build(self, loss_input_name, target_name="target"):
        one = self._constant("bceloss.one", 1.0)
        if not _graph_utils.node_arg_exists(self.base, target_name):
            target_name = blocks.InputLike(loss_input_name)(target_name)
        sigmoid = self._sigmoid(loss_input_name)
        positive = self._mul(self._log(sigmoid), target_name)
        if self._pos_weight is not None:
            positive = self._mul(positive, self._constant("bceloss.pos_weight", self._pos_weight))
        negative = self._mul(self._log(self._sub(one, sigmoid)), self._sub(one, target_name))
        loss = self._neg(self._add(positive, negative))
        if self._weight is not None:
            loss = self._mul(self._constant("bceloss.weight", self._weight), loss)
        return self._reduce(loss)
