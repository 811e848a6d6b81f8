"""ONNX Runtime's documented on-device training code against a real traind, with only its imports changed:
"Prepare for training" with a built-in loss and with the WeightedAverageLoss custom loss, then "Train the model
on the device". What the daemon computes over gRPC equals, bit for bit, what the engine computes in process on
the same artifact files and batches (engine_reference); the first losses also match PyTorch / numpy."""

import os
import shutil
import unittest

import numpy as np
import onnx
import torch

import traind_client.training
from daemon import Daemon, scratch_dir
from reference import run_engine
from testing_models import WeightedAverageLoss, two_head_model
from traind_client import _checkpoint

# The documented imports, with onnxruntime.training changed to traind_client.training:
from traind_client.training import artifacts
from traind_client.training.api import CheckpointState, LinearLRScheduler, Module, Optimizer

BATCH = 8


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(20, 16)
        self.fc2 = torch.nn.Linear(16, 5)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def export_forward_model(path):
    """A PyTorch model exported as the documentation asks (export_params, no constant folding, training mode)."""
    torch.manual_seed(0)
    net = Net()
    torch.onnx.export(net, torch.randn(BATCH, 20), path, input_names=["input"], output_names=["output"],
                      export_params=True, do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING,
                      opset_version=17)
    return net


def classification_batches(count, seed):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((BATCH, 20)).astype(np.float32), rng.integers(0, 5, BATCH).astype(np.int32))
            for _ in range(count)]


def as_int64_labels(batches):
    """The batches as the engine takes them (the client sends ONNX Runtime's int32 labels as int64)."""
    return [(inputs, labels.astype(np.int64)) for inputs, labels in batches]


class OrtSamplesTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon().__enter__()
        os.environ["TRAIND_ADDRESS"] = cls.daemon.address
        traind_client.training.set_default_client(None)  # the documented code connects through $TRAIND_ADDRESS

    @classmethod
    def tearDownClass(cls):
        traind_client.training.set_default_client(None).close()
        cls.daemon.__exit__(None, None, None)

    def setUp(self):
        self.dir = scratch_dir(self.id().rsplit(".", 1)[-1])
        self.cwd = os.getcwd()

    def tearDown(self):
        os.chdir(self.cwd)

    def assert_same_checkpoint_parameters(self, daemon_file, engine_bytes):
        got = _checkpoint.load_checkpoint(daemon_file)
        want = _checkpoint.parse_checkpoint(engine_bytes)
        self.assertEqual([p.name for p in got.parameters], [p.name for p in want.parameters])
        for a, b in zip(got.parameters, want.parameters):
            self.assertEqual(a.data, b.data, a.name)

    def test_prepare_with_a_builtin_loss_then_train_on_the_device(self):
        path_to_forward_only_onnx_model = os.path.join(self.dir, "forward.onnx")
        net = export_forward_model(path_to_forward_only_onnx_model)
        path_to_output_artifact_directory = os.path.join(self.dir, "artifacts")
        os.makedirs(path_to_output_artifact_directory)

        # --- "Prepare for training", as documented ---
        model = onnx.load(path_to_forward_only_onnx_model)
        artifacts.generate_artifacts(model,
                                     requires_grad=["fc1.weight", "fc1.bias", "fc2.weight"],
                                     frozen_params=["fc2.bias"],
                                     loss=artifacts.LossType.CrossEntropyLoss,
                                     optimizer=artifacts.OptimType.AdamW,
                                     artifact_directory=path_to_output_artifact_directory)
        self.assertEqual(sorted(os.listdir(path_to_output_artifact_directory)),
                         ["checkpoint", "eval_model.onnx", "optimizer_model.onnx", "training_model.onnx"])
        pristine = os.path.join(self.dir, "pristine")
        shutil.copytree(path_to_output_artifact_directory, pristine)

        path_to_the_checkpoint_artifact = os.path.join(path_to_output_artifact_directory, "checkpoint")
        path_to_the_training_model = os.path.join(path_to_output_artifact_directory, "training_model.onnx")
        path_to_the_eval_model = os.path.join(path_to_output_artifact_directory, "eval_model.onnx")
        path_to_the_optimizer_model = os.path.join(path_to_output_artifact_directory, "optimizer_model.onnx")
        batches = classification_batches(6, seed=1)
        eval_inputs, eval_labels = classification_batches(1, seed=2)[0]

        # --- "Train the model on the device", as documented ---
        state = CheckpointState.load_checkpoint(path_to_the_checkpoint_artifact)
        module = Module(path_to_the_training_model,
                        state,
                        path_to_the_eval_model,
                        device="cpu")
        optimizer = Optimizer(path_to_the_optimizer_model, module)
        losses = []
        for inputs, labels in batches:
            module.train()
            training_loss = module(inputs, labels)
            optimizer.step()
            module.lazy_reset_grad()
            losses.append(training_loss)
        module.eval()
        eval_loss = module(eval_inputs, eval_labels)
        CheckpointState.save_checkpoint(state, path_to_the_checkpoint_artifact)

        # The same files and batches in process.
        engine = run_engine(pristine, as_int64_labels(batches), (eval_inputs, eval_labels.astype(np.int64)))
        np.testing.assert_array_equal(np.array(losses, np.float32), engine["losses"])
        np.testing.assert_array_equal(eval_loss, engine["eval_loss"])
        self.assert_same_checkpoint_parameters(path_to_the_checkpoint_artifact, engine["checkpoint"])
        with_optimizer = os.path.join(self.dir, "with_optimizer")
        CheckpointState.save_checkpoint(state, with_optimizer, include_optimizer_state=True)
        with open(with_optimizer, "rb") as file:
            self.assertEqual(file.read(), engine["checkpoint"])  # parameters, gradients, moments, step: every byte

        # PyTorch agrees on the first loss; the frozen parameter did not move, the others did.
        first = torch.nn.functional.cross_entropy(net(torch.from_numpy(batches[0][0])),
                                                  torch.from_numpy(batches[0][1]).long())
        np.testing.assert_allclose(losses[0], first.item(), rtol=2e-6)
        np.testing.assert_array_equal(state.parameters["fc2.bias"].data, net.fc2.bias.detach().numpy())
        self.assertFalse(np.array_equal(state.parameters["fc2.weight"].data, net.fc2.weight.detach().numpy()))
        self.assertEqual(module.input_names(), ["input", "labels"])
        self.assertEqual(module.output_names(), ["loss"])
        module.close()

    def test_prepare_with_the_weighted_average_custom_loss(self):
        os.chdir(self.dir)
        onnx.save(two_head_model(batch=BATCH), "model.onnx")

        # --- "Custom Loss", as documented (WeightedAverageLoss is the documentation's class, verbatim, in
        # testing_models.py; artifacts go to the current directory) ---
        my_custom_loss = WeightedAverageLoss()
        model_path = "model.onnx"
        base_model = onnx.load(model_path)
        requires_grad = ["weight1", "bias1", "weight2", "bias2"]
        frozen_params = ["weight3", "bias3"]
        artifacts.generate_artifacts(base_model, requires_grad=requires_grad, frozen_params=frozen_params,
                                     loss=my_custom_loss, optimizer=artifacts.OptimType.AdamW)
        for name in ("training_model.onnx", "eval_model.onnx", "checkpoint", "optimizer_model.onnx"):
            self.assertTrue(os.path.isfile(name), name)
        shutil.copytree(".", "pristine")

        rng = np.random.default_rng(5)
        batches = [(rng.standard_normal((BATCH, 3)).astype(np.float32), rng.standard_normal((BATCH, 2)).astype(
            np.float32), rng.standard_normal((BATCH, 5)).astype(np.float32)) for _ in range(5)]
        state = CheckpointState.load_checkpoint("checkpoint")
        initial = {name: state.parameters[name].data for name in state.parameters}
        module = Module("training_model.onnx", state, "eval_model.onnx")
        optimizer = Optimizer("optimizer_model.onnx", module)
        self.assertEqual(module.input_names(), ["x", "target1", "target2"])
        losses = []
        for x, target1, target2 in batches:
            module.train()
            losses.append(module(x, target1, target2))
            optimizer.step()
            module.lazy_reset_grad()
        module.eval()
        eval_loss = module(*batches[0])
        engine = run_engine(os.path.join(self.dir, "pristine"), batches, batches[0])
        np.testing.assert_array_equal(np.array(losses, np.float32), engine["losses"])
        np.testing.assert_array_equal(eval_loss, engine["eval_loss"])

        # The loss is ONNX Runtime's: 0.4 * mse(output1, target1) + 0.6 * mse(output2, target2).
        x, target1, target2 = batches[0]
        hidden = np.maximum(x @ initial["weight3"].T + initial["bias3"], 0)
        output1 = hidden @ initial["weight1"].T + initial["bias1"]
        output2 = hidden @ initial["weight2"].T + initial["bias2"]
        expected = 0.4 * np.mean((output1 - target1) ** 2) + 0.6 * np.mean((output2 - target2) ** 2)
        np.testing.assert_allclose(losses[0], expected, rtol=1e-5)
        np.testing.assert_array_equal(state.parameters["weight3"].data, initial["weight3"])  # frozen
        module.close()

    def classifier_artifacts(self, optimizer):
        """(artifact directory, a pristine copy of it) for the exported classifier with cross-entropy."""
        path = os.path.join(self.dir, "forward.onnx")
        export_forward_model(path)
        directory = os.path.join(self.dir, "artifacts")
        os.makedirs(directory)
        artifacts.generate_artifacts(onnx.load(path), loss=artifacts.LossType.CrossEntropyLoss, optimizer=optimizer,
                                     artifact_directory=directory)
        pristine = os.path.join(self.dir, "pristine")
        shutil.copytree(directory, pristine)
        return directory, pristine

    def test_sgd_with_onnx_runtimes_linear_lr_scheduler(self):
        directory, pristine = self.classifier_artifacts(artifacts.OptimType.SGD)
        batches = classification_batches(6, seed=3)
        state = CheckpointState.load_checkpoint(os.path.join(directory, "checkpoint"))
        module = Module(os.path.join(directory, "training_model.onnx"), state,
                        os.path.join(directory, "eval_model.onnx"))
        optimizer = Optimizer(os.path.join(directory, "optimizer_model.onnx"), module)
        self.assertAlmostEqual(optimizer.get_learning_rate(), 1e-3)  # ONNX Runtime's initial learning rate
        scheduler = LinearLRScheduler(optimizer, 2, 6, 0.05)
        rates, losses = [], []
        for inputs, labels in batches:
            rates.append(optimizer.get_learning_rate())
            module.train()
            losses.append(module(inputs, labels))
            optimizer.step()
            scheduler.step()
            module.lazy_reset_grad()
        expected = [0.05 * (n / 2 if n < 2 else max(0.0, (6 - n) / 4)) for n in range(6)]
        np.testing.assert_allclose(rates, expected, rtol=1e-6)
        engine = run_engine(pristine, as_int64_labels(batches), scheduler=(2, 6, 0.05))
        np.testing.assert_array_equal(np.array(rates, np.float32), engine["learning_rates"])
        np.testing.assert_array_equal(np.array(losses, np.float32), engine["losses"])
        optimizer.set_learning_rate(0.125)
        self.assertEqual(optimizer.get_learning_rate(), 0.125)
        module.close()

    def test_an_optimizer_made_after_the_session_exists_joins_it(self):
        directory, pristine = self.classifier_artifacts(artifacts.AdamW(lr=0.01))
        batches = classification_batches(4, seed=4)
        state = CheckpointState.load_checkpoint(os.path.join(directory, "checkpoint"))
        module = Module(os.path.join(directory, "training_model.onnx"), state)
        state.properties["stage"] = "warm-up"
        first = module(*batches[0])  # the session exists now, without an optimizer
        optimizer = Optimizer(os.path.join(directory, "optimizer_model.onnx"), module)
        optimizer.step()  # applies the gradients of `first`, carried over into the optimizer's session
        module.lazy_reset_grad()
        losses = [first]
        for inputs, labels in batches[1:]:
            losses.append(module(inputs, labels))
            optimizer.step()
            module.lazy_reset_grad()
        self.assertEqual(len(self.daemon.client.list_sessions()), 1)  # the first session was closed
        self.assertEqual(state.properties["stage"], "warm-up")
        engine = run_engine(pristine, as_int64_labels(batches))
        np.testing.assert_array_equal(np.array(losses, np.float32), engine["losses"])
        module.close()  # the final state comes back into the CheckpointState
        self.assertEqual(self.daemon.client.list_sessions(), [])
        saved = os.path.join(self.dir, "saved")
        CheckpointState.save_checkpoint(state, saved, include_optimizer_state=True)
        engine_state = _checkpoint.parse_checkpoint(engine["checkpoint"])
        engine_state.properties["stage"] = "warm-up"
        with open(saved, "rb") as file:
            self.assertEqual(file.read(), _checkpoint.serialize_checkpoint(engine_state))


if __name__ == "__main__":
    unittest.main()
