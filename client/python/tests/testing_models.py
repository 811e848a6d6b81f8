"""Models and blocks the client tests share: a two-head model whose parameters carry the names of ONNX Runtime's
custom-loss documentation (weight1..3, bias1..3), and that documentation's WeightedAverageLoss, unchanged."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import traind_client.training.onnxblock as onnxblock


def two_head_model(batch=4):
    """x -> Gemm(weight3, bias3) -> Relu -> Gemm(weight1, bias1) = output1 and Gemm(weight2, bias2) = output2."""
    rng = np.random.default_rng(1)
    init = lambda name, *shape: numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
    nodes = [helper.make_node("Gemm", ["x", "weight3", "bias3"], ["h"], transB=1),
             helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "weight1", "bias1"], ["output1"], transB=1),
             helper.make_node("Gemm", ["r", "weight2", "bias2"], ["output2"], transB=1)]
    graph = helper.make_graph(
        nodes, "two_heads", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3])],
        [helper.make_tensor_value_info("output1", TensorProto.FLOAT, [batch, 2]),
         helper.make_tensor_value_info("output2", TensorProto.FLOAT, [batch, 5])],
        [init("weight3", 6, 3), init("bias3", 6), init("weight1", 2, 6), init("bias1", 2), init("weight2", 5, 6),
         init("bias2", 5)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


# The documented custom loss of ONNX Runtime's "Prepare for training", verbatim:
# Define a custom loss block that takes in two inputs
# and performs a weighted average of the losses from these
# two inputs.
class WeightedAverageLoss(onnxblock.Block):
    def __init__(self):
        self._loss1 = onnxblock.loss.MSELoss()
        self._loss2 = onnxblock.loss.MSELoss()
        self._w1 = onnxblock.blocks.Constant(0.4)
        self._w2 = onnxblock.blocks.Constant(0.6)
        self._add = onnxblock.blocks.Add()
        self._mul = onnxblock.blocks.Mul()

    def build(self, loss_input_name1, loss_input_name2):
        # The build method defines how the block should be stacked on top of
        # loss_input_name1 and loss_input_name2

        # Returns weighted average of the two losses
        return self._add(
            self._mul(self._w1(), self._loss1(loss_input_name1, target_name="target1")),
            self._mul(self._w2(), self._loss2(loss_input_name2, target_name="target2"))
        )
