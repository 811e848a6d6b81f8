"""The rest of ONNX Runtime's training API over a real traind: parameters and properties of a bound
CheckpointState, contiguous buffers as OrtValues (fleet averaging), OrtValue inputs and outputs, the export,
devices, onnxblock's TrainingBlock, and the training loop's deferred calls (one round trip a step)."""

import os
import unittest

import numpy as np
import onnx

import traind_client
import traind_client.training
import traind_client.training.onnxblock as onnxblock
from daemon import Daemon, scratch_dir
from testing_models import WeightedAverageLoss, two_head_model
from traind_client import OrtValue
from traind_client.training import artifacts
from traind_client.training.api import CheckpointState, LinearLRScheduler, Module, Optimizer

BATCH = 4


def batch(seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((BATCH, 3)).astype(np.float32), rng.standard_normal((BATCH, 2)).astype(np.float32),
            rng.standard_normal((BATCH, 5)).astype(np.float32))


class OrtApiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon().__enter__()
        traind_client.training.set_default_client(cls.daemon.connect())
        cls.dir = scratch_dir("artifacts")
        artifacts.generate_artifacts(two_head_model(BATCH), frozen_params=["weight3", "bias3"],
                                     loss=WeightedAverageLoss(), optimizer=artifacts.SGD(lr=0.1),
                                     artifact_directory=cls.dir, additional_output_names=["output1"])

    @classmethod
    def tearDownClass(cls):
        traind_client.training.set_default_client(None).close()
        cls.daemon.__exit__(None, None, None)

    def module(self, optimizer=True):
        state = CheckpointState.load_checkpoint(os.path.join(self.dir, "checkpoint"))
        module = Module(os.path.join(self.dir, "training_model.onnx"), state, os.path.join(self.dir, "eval_model.onnx"))
        self.addCleanup(module.close)
        return state, module, Optimizer(os.path.join(self.dir, "optimizer_model.onnx"), module) if optimizer else None

    def count_calls(self, client):
        """The RPC names `client` sends from now on (until the test ends)."""
        calls = []
        send = client._call

        def counting(method, *args, **kwargs):
            calls.append(method)
            return send(method, *args, **kwargs)

        client._call = counting
        self.addCleanup(setattr, client, "_call", send)
        return calls

    def test_the_training_loop_is_one_round_trip_a_step_and_equals_the_calls_made_one_by_one(self):
        _, module, optimizer = self.module()
        scheduler = LinearLRScheduler(optimizer, warmup_step_count=2, total_step_count=6, initial_lr=0.1)
        # The reference: the same loop as separate RPCs (the low-level client), on a session of its own.
        _, reference, reference_optimizer = self.module()
        LinearLRScheduler(reference_optimizer, warmup_step_count=2, total_step_count=6, initial_lr=0.1)
        client, session = self.daemon.client, reference.session_id
        names = reference.input_names()
        calls = self.count_calls(module._client)
        for step in range(5):
            inputs = batch(step)
            loss, _ = module(*inputs)
            optimizer.step()
            scheduler.step()
            module.lazy_reset_grad()
            expected = client.train_step(session, dict(zip(names, inputs)), accumulate_only=True).loss
            client.optimizer_step(session)
            client.scheduler_step(session)
            client.lazy_reset_grad(session)
            self.assertEqual(float(loss), expected, f"step {step}")
        self.assertEqual(calls, ["TrainStep"] * 5)
        # Reading the session makes the last step's deferred calls first.
        np.testing.assert_array_equal(module.get_contiguous_parameters().numpy(),
                                      client.get_parameters(session).buffer)
        self.assertEqual(calls[5:], ["OptimizerStep", "SchedulerStep", "LazyResetGrad", "GetParameters"])
        self.assertEqual(optimizer.get_learning_rate(), client.get_learning_rate(session).learning_rate)
        self.assertEqual(client.get_session(module.session_id).optimizer_step, 5)

    def test_a_refused_step_keeps_its_deferred_calls_and_the_next_applies_them_once(self):
        _, module, optimizer = self.module()
        client = self.daemon.client
        x, target1, target2 = batch(0)
        module(x, target1, target2)
        session = module.session_id
        before = client.get_parameters(session).buffer
        optimizer.step()
        module.lazy_reset_grad()
        with self.assertRaises(traind_client.InvalidArgumentError):
            module(x[:, :2], target1, target2)
        np.testing.assert_array_equal(client.get_parameters(session).buffer, before)  # nothing applied yet
        self.assertEqual(client.get_session(session).optimizer_step, 0)
        module(*batch(1))
        self.assertEqual(client.get_session(session).optimizer_step, 1)
        self.assertFalse(np.array_equal(client.get_parameters(session).buffer, before))
        module(*batch(2))  # nothing deferred since: no second optimizer step
        self.assertEqual(client.get_session(session).optimizer_step, 1)

    def test_a_deferred_optimizer_step_that_the_daemon_skips_is_logged_when_its_answer_comes(self):
        _, module, optimizer = self.module()
        x, target1, target2 = batch(0)
        target1[0, 0] = np.nan  # a non-finite loss and gradients
        module(x, target1, target2)
        optimizer.step()
        module.lazy_reset_grad()
        with self.assertLogs(level="WARNING") as logged:
            module(*batch(1))
        self.assertIn("traind skipped optimizer step 1", "\n".join(logged.output))
        self.assertEqual(self.daemon.client.get_session(module.session_id).optimizer_step, 0)

    def test_a_bound_state_reads_and_writes_the_session(self):
        state, module, optimizer = self.module()
        self.assertEqual(list(state.parameters), ["weight3", "bias3", "weight1", "bias1", "weight2", "bias2"])
        self.assertFalse(state.parameters["weight3"].requires_grad)
        np.testing.assert_array_equal(state.parameters["weight1"].grad, np.zeros((2, 6), np.float32))  # none yet
        loss, output1 = module(*batch(0))
        self.assertEqual(output1.shape, (BATCH, 2))
        gradient = state.parameters["weight1"].grad
        self.assertTrue(gradient.any())
        before = state.parameters["weight1"].data
        optimizer.step()
        np.testing.assert_allclose(state.parameters["weight1"].data, before - 0.1 * gradient, rtol=1e-6, atol=1e-7)
        with self.assertRaises(RuntimeError):
            state.parameters["weight3"].grad  # frozen: no gradient
        state.parameters["bias1"] = np.array([1.0, -1.0], np.float32)
        np.testing.assert_array_equal(state.parameters["bias1"].data, [1.0, -1.0])
        with self.assertRaises(traind_client.InvalidArgumentError):
            state.parameters["bias1"] = np.zeros(3, np.float32)
        with self.assertRaises(KeyError):
            state.parameters["nope"]
        state.properties["epoch"] = 4
        state.properties["tag"] = "a"
        self.assertEqual((state.properties["epoch"], len(state.properties), "tag" in state.properties), (4, 2, True))
        del state.properties["tag"]
        self.assertEqual(list(state.properties), ["epoch"])
        self.assertEqual(self.daemon.client.get_session(module.session_id).properties["epoch"].int_value, 4)

    def test_fleet_averaging_with_contiguous_buffers(self):
        modules = [self.module()[1:] for _ in range(2)]
        for seed, (module, optimizer) in enumerate(modules):
            module(*batch(seed))
            optimizer.step()
            module.lazy_reset_grad()
        buffers = [module.get_contiguous_parameters(trainable_only=True) for module, _ in modules]
        self.assertIsInstance(buffers[0], OrtValue)
        self.assertEqual(buffers[0].shape(), [modules[0][0].get_parameters_size()])
        self.assertEqual(modules[0][0].get_parameters_size(), 2 * 6 + 2 + 5 * 6 + 5)
        self.assertEqual(modules[0][0].get_parameters_size(trainable_only=False), 2 * 6 + 2 + 5 * 6 + 5 + 6 * 3 + 6)
        average = (buffers[0].numpy() + buffers[1].numpy()) / 2
        for module, _ in modules:
            module.copy_buffer_to_parameters(OrtValue.ortvalue_from_numpy(average))
        for module, _ in modules:
            np.testing.assert_array_equal(module.get_contiguous_parameters(trainable_only=True).numpy(), average)
        everything = modules[0][0].get_contiguous_parameters()
        self.assertEqual(everything.data_type(), "tensor(float)")
        modules[1][0].copy_buffer_to_parameters(everything.numpy(), trainable_only=False)
        np.testing.assert_array_equal(modules[1][0].get_contiguous_parameters().numpy(), everything.numpy())

    def test_ortvalue_inputs_give_ortvalue_outputs_and_eval_mode_runs_the_eval_model(self):
        _, module, _ = self.module(optimizer=False)
        x, t1, t2 = batch(3)
        outputs = module(*(OrtValue.ortvalue_from_numpy(v) for v in (x, t1, t2)))
        self.assertTrue(all(isinstance(v, OrtValue) for v in outputs))
        self.assertEqual(module.output_names(), ["loss", "output1"])
        module.eval()
        self.assertFalse(module.training)
        self.assertEqual(module.input_names(), ["x", "target1", "target2"])
        eval_loss, eval_output1 = module(x, t1, t2)
        np.testing.assert_array_equal(eval_loss, outputs[0].numpy())  # no Dropout or BatchNorm: the same forward
        with self.assertRaisesRegex(RuntimeError, "takes 3 inputs"):
            module(x)

    def test_export_model_for_inferencing(self):
        _, module, _ = self.module(optimizer=False)
        path = os.path.join(scratch_dir("export"), "inference.onnx")
        module.export_model_for_inferencing(path, ["output2"])
        model = onnx.load(path)
        onnx.checker.check_model(model, full_check=True)
        self.assertEqual([o.name for o in model.graph.output], ["output2"])
        self.assertEqual([i.name for i in model.graph.input], ["x"])

    def test_devices(self):
        state = CheckpointState.load_checkpoint(os.path.join(self.dir, "checkpoint"))
        with self.assertRaisesRegex(ValueError, "unknown device"):
            Module(os.path.join(self.dir, "training_model.onnx"), state, device="tpu")
        with self.assertRaisesRegex(ValueError, "unknown device"):
            Module(os.path.join(self.dir, "training_model.onnx"), state, device="gpu:first")
        # Sessions on the GPU executor are tested in gpu_module_test; here only the binding of the state.
        Module(os.path.join(self.dir, "training_model.onnx"), state, device="cuda:0")
        with self.assertRaisesRegex(RuntimeError, "another Module"):
            Module(os.path.join(self.dir, "training_model.onnx"), state)

    def test_a_nominal_checkpoint_gets_its_values_from_a_buffer(self):
        directory = scratch_dir("nominal")
        artifacts.generate_artifacts(two_head_model(BATCH), loss=WeightedAverageLoss(),
                                     optimizer=artifacts.OptimType.AdamW, artifact_directory=directory,
                                     nominal_checkpoint=True)
        state = CheckpointState.load_checkpoint(os.path.join(directory, "checkpoint"))
        with self.assertRaisesRegex(RuntimeError, "no data"):
            state.parameters["weight1"].data
        module = Module(os.path.join(directory, "training_model.onnx"), state)
        self.addCleanup(module.close)
        full = CheckpointState.load_checkpoint(os.path.join(self.dir, "checkpoint"))  # the same model's values
        buffer = np.concatenate([full.parameters[name].data.ravel() for name in full.parameters])
        self.assertEqual(module.get_parameters_size(trainable_only=False), buffer.size)
        module.copy_buffer_to_parameters(buffer, trainable_only=False)
        np.testing.assert_array_equal(state.parameters["weight2"].data, full.parameters["weight2"].data)
        self.assertTrue(np.isfinite(module(*batch(0))))  # the loss (this model has no additional output)

    def test_a_training_block_builds_training_and_eval_models_with_the_daemon(self):
        class WeightedTraining(onnxblock.TrainingBlock):
            def __init__(self):
                super().__init__()
                self.loss = WeightedAverageLoss()

            def build(self, output1, output2):
                return self.loss(output1, output2)

        block = WeightedTraining()
        for name in ("weight1", "bias1"):
            block.requires_grad(name)
        block.requires_grad("weight3", False)
        with onnxblock.base(two_head_model(BATCH)):
            block("output1", "output2")
            training_model, eval_model = block.to_model_proto()
            trainable, frozen = block.parameters()
        self.assertEqual([p.name for p in trainable], ["weight1", "bias1"])
        self.assertEqual(sorted(p.name for p in frozen), ["bias2", "bias3", "weight2", "weight3"])
        inputs = [i.name for i in training_model.graph.input]
        self.assertEqual(inputs[:3], ["x", "target1", "target2"])
        self.assertIn("weight1_grad.accumulation.buffer", inputs)
        self.assertNotIn("weight2_grad.accumulation.buffer", inputs)
        self.assertEqual(eval_model.graph.output[0].name, "loss")


if __name__ == "__main__":
    unittest.main()
