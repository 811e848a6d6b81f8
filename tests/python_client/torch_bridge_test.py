"""traind_client.torch against the real daemon: a PyTorch model whose middle block is the same block exported to
ONNX and served by traind (Forward / Backward) trains, over 5 steps of SGD and of AdamW, to the same parameters as
the pure PyTorch model (1e-4 relative) — with traind's optimizer training the block, and with the block's weights
as torch Parameters under the PyTorch optimizer. Also: handles freed when autograd drops a pass, eval mode keeps
nothing, misuse surfaces as TraindError."""

import copy
import io
import unittest

import numpy as np
import torch

import traind_client
import traind_client.torch as traind_torch
from daemon import Daemon

STEPS = 5
BATCH = 6


def make_model(seed=0):
    """Linear -> [middle: Linear, Tanh, Linear] -> ReLU -> Linear: the middle block is what traind serves."""
    torch.manual_seed(seed)
    middle = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 8))
    return torch.nn.Sequential(torch.nn.Linear(5, 8), middle, torch.nn.ReLU(), torch.nn.Linear(8, 3))


def export(block):
    buffer = io.BytesIO()
    torch.onnx.export(block, torch.zeros(BATCH, 8), buffer, input_names=["x"], output_names=["y"], opset_version=17,
                      do_constant_folding=False)
    return buffer.getvalue()


def batches():
    generator = torch.Generator().manual_seed(1)
    return [(torch.randn(BATCH, 5, generator=generator), torch.randint(0, 3, (BATCH,), generator=generator))
            for _ in range(STEPS)]


OPTIMIZERS = {
    "sgd": (lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01),
            {"sgd": {"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}}),
    "adamw": (lambda params: torch.optim.AdamW(params, lr=0.01, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.05),
              {"adamw": {"lr": 0.01, "beta1": 0.9, "beta2": 0.99, "eps": 1e-8, "weight_decay": 0.05}}),
}


def assert_close(test, actual, expected, what):
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    scale = max(np.abs(expected).max(), 1e-6)
    test.assertLessEqual(np.abs(actual - expected).max() / scale, 1e-4, what)


class TorchBridgeTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon("--max_forward_handles_per_session=4").__enter__()
        cls.client = cls.daemon.connect()

    @classmethod
    def tearDownClass(cls):
        cls.client.close()
        cls.daemon.__exit__(None, None, None)

    def reference(self, optimizer_name):
        """The pure PyTorch model after STEPS steps, and the losses on the way."""
        model = make_model()
        optimizer = OPTIMIZERS[optimizer_name][0](model.parameters())
        losses = []
        for x, y in batches():
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return model, losses

    def hybrid(self, parameters_in_torch, optimizer_name):
        """The same model with its middle block served by traind."""
        model = make_model()
        block = traind_torch.TraindModule(export(model[1]), client=self.client,
                                          optimizer=OPTIMIZERS[optimizer_name][1],
                                          parameters_in_torch=parameters_in_torch)
        model[1] = block
        return model, block

    def train_and_compare(self, parameters_in_torch, optimizer_name):
        reference, reference_losses = self.reference(optimizer_name)
        model, block = self.hybrid(parameters_in_torch, optimizer_name)
        try:
            # traind's optimizer trains the block; PyTorch's the other layers (with parameters_in_torch: all).
            optimizer = OPTIMIZERS[optimizer_name][0](model.parameters())
            losses = []
            for x, y in batches():
                optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
                if not parameters_in_torch:
                    block.step()
                losses.append(loss.item())
            np.testing.assert_allclose(losses, reference_losses, rtol=1e-4)
            for index in (0, 3):  # the PyTorch layers around the block
                for (name, actual), expected in zip(model[index].named_parameters(), reference[index].parameters()):
                    assert_close(self, actual.detach().numpy(), expected.detach().numpy(),
                                 f"{optimizer_name}: layer {index} {name}")
            served = block.named_graph_parameters()
            for name, expected in reference[1].named_parameters():
                assert_close(self, served[name], expected.detach().numpy(), f"{optimizer_name}: middle {name}")
            if parameters_in_torch:
                for name, parameter in zip(block.parameter_names, block.parameters()):
                    assert_close(self, parameter.detach().numpy(), served[name], f"torch copy of {name}")
        finally:
            block.close()

    def test_traind_optimizer_sgd(self):
        self.train_and_compare(False, "sgd")

    def test_traind_optimizer_adamw(self):
        self.train_and_compare(False, "adamw")

    def test_torch_optimizer_sgd(self):
        self.train_and_compare(True, "sgd")

    def test_torch_optimizer_adamw(self):
        self.train_and_compare(True, "adamw")

    def test_passes_without_backward_are_released(self):
        model, block = self.hybrid(False, "sgd")
        try:
            x = torch.randn(BATCH, 5)
            # Eval mode and no_grad keep nothing on the daemon.
            model.eval()
            with torch.no_grad():
                model(x)
            model.train()
            with torch.no_grad():
                model(x)
            # Training-mode passes whose outputs are dropped: freed with them, so the daemon's limit (4 handles a
            # session here) is never reached.
            for _ in range(10):
                model(x).sum()
            model(x).sum().backward()
            self.assertLessEqual(self.client.get_session(block.session_id).forward_handles, 1)
            # The block's output matches its export run as plain inference.
            block.eval()
            middle_in = torch.randn(BATCH, 8)
            with torch.no_grad():
                direct = block(middle_in)
            inferred = self.client.forward(block.session_id, {"x": middle_in.numpy()}).outputs["y"]
            np.testing.assert_array_equal(direct.numpy(), inferred)
        finally:
            block.close()

    def test_misuse_is_a_traind_error(self):
        model, block = self.hybrid(False, "sgd")
        try:
            with self.assertRaises(TypeError):
                block(torch.zeros(BATCH, 8), torch.zeros(BATCH, 8))
            with self.assertRaises(traind_client.InvalidArgumentError):
                block(torch.zeros(BATCH, 7))
            block(torch.zeros(BATCH, 8, requires_grad=True))
            with self.assertRaises(traind_client.FailedPreconditionError):
                block.step()  # no Backward yet: no gradients to apply
            with self.assertRaises(RuntimeError):
                traind_torch.TraindModule(export(make_model()[1]), client=self.client,
                                          parameters_in_torch=True).step()
        finally:
            block.close()


if __name__ == "__main__":
    unittest.main()
