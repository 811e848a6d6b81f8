"""onnxblock: loss Blocks built on a forward model become the standalone loss graphs the daemon takes, with the
values ONNX Runtime's blocks compute (checked here by a small numpy evaluator of the ops the blocks emit)."""

import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import traind_client.training.onnxblock as onnxblock
from traind_client.training.onnxblock import _loss_graph
from testing_models import WeightedAverageLoss, two_head_model


def evaluate(model, feeds):
    """Runs a loss graph with numpy (only the ops onnxblock emits)."""
    values = dict(feeds)
    values.update({init.name: numpy_helper.to_array(init) for init in model.graph.initializer})
    for node in model.graph.node:
        x = [values[name] for name in node.input]
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        op = node.op_type
        if op in ("Add", "Sub", "Mul", "Div", "Pow"):
            out = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide, "Pow": np.power}[op](*x)
        elif op in ("ReduceMean", "ReduceSum"):
            out = (np.mean if op == "ReduceMean" else np.sum)(x[0], keepdims=bool(attributes.get("keepdims", 1)))
        elif op in ("Abs", "Log", "Neg", "Identity"):
            out = {"Abs": np.abs, "Log": np.log, "Neg": np.negative, "Identity": np.copy}[op](x[0])
        elif op == "Sigmoid":
            out = 1 / (1 + np.exp(-x[0]))
        elif op == "Reshape":
            out = x[0].reshape(x[1])
        elif op == "SoftmaxCrossEntropyLoss":
            scores, labels = x[0], x[1]
            log_softmax = scores - np.log(np.exp(scores - scores.max(1, keepdims=True)).sum(1, keepdims=True)) \
                - scores.max(1, keepdims=True)
            picked = -log_softmax[np.arange(len(labels)), labels]
            out = {"mean": np.mean, "sum": np.sum, "none": lambda v: v}[attributes["reduction"].decode()](picked)
        else:
            raise NotImplementedError(op)
        values[node.output[0]] = np.asarray(out, dtype=np.float32)
    return values[model.graph.output[0].name]


class LossGraphTest(unittest.TestCase):
    def test_weighted_average_loss_becomes_a_graph_over_the_model_outputs_and_two_targets(self):
        model = two_head_model()
        graph = _loss_graph.build_loss_graph(model, WeightedAverageLoss(), ["output1", "output2"])
        loss = graph.model
        self.assertEqual([value.name for value in loss.graph.input], ["output1", "output2", "target1", "target2"])
        self.assertEqual(graph.target_names, ["target1", "target2"])
        self.assertEqual(loss.graph.input[2].type, model.graph.output[0].type)  # a target is typed like its output
        self.assertEqual(loss.graph.input[3].type, model.graph.output[1].type)
        output = loss.graph.output[0].type.tensor_type
        self.assertEqual(output.elem_type, TensorProto.FLOAT)
        self.assertEqual(len(output.shape.dim), 0)  # a scalar
        self.assertEqual(list(loss.opset_import), list(model.opset_import))
        onnx.checker.check_model(loss, full_check=True)
        rng = np.random.default_rng(2)
        o1, o2, t1, t2 = (rng.standard_normal(s).astype(np.float32) for s in ((4, 2), (4, 5), (4, 2), (4, 5)))
        value = evaluate(loss, {"output1": o1, "output2": o2, "target1": t1, "target2": t2})
        np.testing.assert_allclose(value, 0.4 * np.mean((o1 - t1) ** 2) + 0.6 * np.mean((o2 - t2) ** 2), rtol=1e-6)
        self.assertEqual(len(model.graph.node), 4)  # the caller's model is untouched

    def test_builtin_loss_blocks_compute_pytorchs_values(self):
        model = two_head_model()
        rng = np.random.default_rng(3)
        out = rng.standard_normal((4, 5)).astype(np.float32)
        target = rng.random((4, 5)).astype(np.float32)
        labels = np.array([0, 4, 2, 2], np.int64)
        sigmoid = 1 / (1 + np.exp(-out))
        cases = [
            (onnxblock.loss.MSELoss(), {"target": target}, np.mean((out - target) ** 2)),
            (onnxblock.loss.MSELoss(reduction="sum"), {"target": target}, np.sum((out - target) ** 2)),
            (onnxblock.loss.L1Loss(), {"target": target}, np.mean(np.abs(out - target))),
            (onnxblock.loss.BCEWithLogitsLoss(), {"target": target},
             np.mean(-(target * np.log(sigmoid) + (1 - target) * np.log(1 - sigmoid)))),
            (onnxblock.loss.CrossEntropyLoss(), {"labels": labels},
             np.mean(np.log(np.exp(out).sum(1)) - out[np.arange(4), labels])),
        ]
        for block, targets, expected in cases:
            graph = _loss_graph.build_loss_graph(model, block, ["output2"])
            self.assertEqual(graph.target_names, list(targets))
            value = evaluate(graph.model, {"output2": out, **targets})
            np.testing.assert_allclose(value, expected, rtol=1e-5, err_msg=type(block).__name__)
        labels_input = _loss_graph.build_loss_graph(model, onnxblock.loss.CrossEntropyLoss(), ["output2"]).model
        labels_type = labels_input.graph.input[1].type.tensor_type
        self.assertEqual(labels_type.elem_type, TensorProto.INT64)
        self.assertEqual([d.dim_value for d in labels_type.shape.dim], [4])

    def test_a_target_that_is_a_model_output_is_bound_not_created(self):
        graph = _loss_graph.build_loss_graph(two_head_model(), onnxblock.loss.L1Loss(), ["output1", "output1"])
        self.assertEqual(graph.target_names, [])
        self.assertEqual([value.name for value in graph.model.graph.input], ["output1"])

    def test_pass_through_makes_the_model_output_the_loss(self):
        graph = _loss_graph.build_loss_graph(two_head_model(), onnxblock.blocks.PassThrough(), ["output1"])
        self.assertEqual([node.op_type for node in graph.model.graph.node], ["Identity"])

    def test_a_one_element_loss_of_higher_rank_is_reshaped_to_a_scalar(self):
        class OrtStyleConstant(onnxblock.Block):  # ONNX Runtime's [1]-shaped constants
            def build(self, name):
                self.base.graph.initializer.append(helper.make_tensor("two", TensorProto.FLOAT, [1], [2.0]))
                mean = onnxblock.blocks.ReduceMean()(name)
                return onnxblock.blocks.Mul()("two", mean)
        graph = _loss_graph.build_loss_graph(two_head_model(), OrtStyleConstant(), ["output1"])
        self.assertEqual(graph.model.graph.node[-1].op_type, "Reshape")
        self.assertEqual(len(graph.model.graph.output[0].type.tensor_type.shape.dim), 0)
        out = np.arange(8, dtype=np.float32).reshape(4, 2)
        self.assertEqual(evaluate(graph.model, {"output1": out}).shape, ())
        self.assertAlmostEqual(float(evaluate(graph.model, {"output1": out})), 2 * out.mean())

    def test_a_loss_that_reads_anything_but_model_outputs_is_refused_with_a_reason(self):
        for name, what in (("x", "an input"), ("weight1", "an initializer"), ("h", "an intermediate value")):
            with self.assertRaisesRegex(RuntimeError, f"'{name}', which is {what}"):
                _loss_graph.build_loss_graph(two_head_model(), onnxblock.blocks.ReduceSum(), [name])

    def test_blocks_need_a_base(self):
        with self.assertRaisesRegex(RuntimeError, "base"):
            onnxblock.blocks.Add()("a", "b")

    def test_forward_block_registers_its_output(self):
        class Doubled(onnxblock.ForwardBlock):
            def build(self, name):
                return onnxblock.blocks.Add()(name, name)
        block = Doubled()
        with onnxblock.base(two_head_model()):
            output = block("output1")
        model = block.to_model_proto()
        self.assertEqual(model.graph.output[-1].name, output)
        self.assertEqual([d.dim_value for d in model.graph.output[-1].type.tensor_type.shape.dim], [4, 2])
        with onnxblock.empty_base() as accessor:
            name = onnxblock.blocks.Constant(1.0)()
            self.assertEqual([init.name for init in accessor.model.graph.initializer], [name])


if __name__ == "__main__":
    unittest.main()
