"""generate_artifacts' mapping of ONNX Runtime's arguments onto GenerateArtifactsRequest (no daemon needed: every
check here happens before a call)."""

import unittest

import onnx
from google.protobuf import json_format

import traind_client.training.onnxblock as onnxblock
from traind_client import v1
from traind_client.training import artifacts
from testing_models import WeightedAverageLoss, two_head_model


def optimizer(spec):
    return json_format.ParseDict(artifacts._optimizer_spec(spec), v1.OptimizerSpec())


class ArtifactOptionsTest(unittest.TestCase):
    def test_optim_type_takes_onnx_runtimes_defaults(self):
        adamw = optimizer(artifacts.OptimType.AdamW)
        self.assertEqual(adamw.WhichOneof("kind"), "adamw")
        self.assertAlmostEqual(adamw.adamw.lr, 1e-3)
        self.assertAlmostEqual(adamw.adamw.beta1, 0.9)
        self.assertAlmostEqual(adamw.adamw.beta2, 0.999)
        self.assertAlmostEqual(adamw.adamw.eps, 1e-6)
        self.assertTrue(adamw.adamw.HasField("weight_decay"))
        self.assertEqual(adamw.adamw.weight_decay, 0.0)
        self.assertTrue(adamw.adamw.bias_correction)
        self.assertFalse(adamw.HasField("max_grad_norm"))
        sgd = optimizer(artifacts.OptimType.SGD)
        self.assertEqual(sgd.WhichOneof("kind"), "sgd")
        self.assertAlmostEqual(sgd.sgd.lr, 1e-3)
        self.assertEqual((sgd.sgd.momentum, sgd.sgd.dampening, sgd.sgd.nesterov, sgd.sgd.weight_decay),
                         (0, 0, False, 0))

    def test_traind_optimizers_take_pytorchs_defaults_and_every_option(self):
        adamw = optimizer(artifacts.AdamW())
        self.assertAlmostEqual(adamw.adamw.eps, 1e-8)
        self.assertAlmostEqual(adamw.adamw.weight_decay, 0.01)
        clipped = optimizer(artifacts.AdamW(lr=0.1, betas=(0.8, 0.99), max_grad_norm=1.5))
        self.assertAlmostEqual(clipped.adamw.beta1, 0.8)
        self.assertAlmostEqual(clipped.max_grad_norm, 1.5)
        sgd = optimizer(artifacts.SGD(lr=0.05, momentum=0.9, dampening=0.1, nesterov=True, weight_decay=1e-4))
        self.assertAlmostEqual(sgd.sgd.lr, 0.05)
        self.assertAlmostEqual(sgd.sgd.momentum, 0.9)
        self.assertTrue(sgd.sgd.nesterov)
        self.assertAlmostEqual(artifacts.SGD().lr, 0.01)
        with self.assertRaisesRegex(RuntimeError, "Unknown optimizer"):
            artifacts._optimizer_spec("adam")

    def test_loss_types_are_the_daemons_builtin_losses_on_the_loss_input(self):
        model = two_head_model()
        spec, extra = artifacts._loss_spec(model, artifacts.LossType.CrossEntropyLoss, ["output2"], [])
        self.assertEqual(spec, v1.LossSpec(builtin=v1.BuiltinLoss(type=v1.CROSS_ENTROPY, output_name="output2",
                                                                   target_name="labels")))
        self.assertEqual(extra, [])
        spec, _ = artifacts._loss_spec(model, artifacts.LossType.MSELoss, ["output1"], [])
        self.assertEqual(spec.builtin.target_name, "target")

    def test_a_loss_type_over_two_names_is_onnx_runtimes_graph(self):
        # ONNX Runtime passes every loss input to the loss block: the second becomes the target.
        spec, _ = artifacts._loss_spec(two_head_model(), artifacts.LossType.L1Loss, ["output1", "output1"], [])
        self.assertEqual(spec.WhichOneof("kind"), "custom")
        self.assertEqual(list(spec.custom.target_names), [])

    def test_a_block_becomes_a_custom_loss_and_none_the_model_output(self):
        spec, _ = artifacts._loss_spec(two_head_model(), WeightedAverageLoss(), None, [])
        self.assertEqual(list(spec.custom.target_names), ["target1", "target2"])
        loss_graph = onnx.load_from_string(spec.custom.graph.onnx_bytes)  # real ONNX bytes, as the daemon reads
        self.assertEqual([value.name for value in loss_graph.graph.input], ["output1", "output2", "target1",
                                                                            "target2"])
        spec, _ = artifacts._loss_spec(two_head_model(), None, ["output1"], [])
        self.assertEqual(spec.WhichOneof("kind"), "custom")
        with self.assertRaisesRegex(RuntimeError, "Unknown loss"):
            artifacts._loss_spec(two_head_model(), "mse", None, [])

    def test_a_block_returning_more_names_adds_them_as_outputs(self):
        class LossAndLogits(onnxblock.Block):
            def build(self, name):
                return onnxblock.loss.MSELoss()(name), "output2"
        spec, extra = artifacts._loss_spec(two_head_model(), LossAndLogits(), ["output1"], [])
        self.assertEqual(extra, ["output2"])
        _, extra = artifacts._loss_spec(two_head_model(), LossAndLogits(), ["output1"], ["output2"])
        self.assertEqual(extra, [])

    def test_bad_options_are_refused_before_any_call(self):
        model = two_head_model()
        with self.assertRaisesRegex(RuntimeError, "frozen and require"):
            artifacts.generate_artifacts(model, requires_grad=["weight1"], frozen_params=["weight1"],
                                         loss=artifacts.LossType.MSELoss)
        with self.assertRaisesRegex(RuntimeError, "Unknown extra options"):
            artifacts.generate_artifacts(model, loss=artifacts.LossType.MSELoss, ort_fromat=False)
        with self.assertRaisesRegex(RuntimeError, "ort_format"):
            artifacts.generate_artifacts(model, loss=artifacts.LossType.MSELoss, ort_format=True)
        with self.assertRaisesRegex(RuntimeError, "additional_output_names"):
            artifacts.generate_artifacts(model, loss=artifacts.LossType.MSELoss, additional_output_names="output2")


if __name__ == "__main__":
    unittest.main()
