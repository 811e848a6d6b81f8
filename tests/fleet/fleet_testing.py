"""Shared pieces of the fleet tests: label-skewed digits shards on each daemon's --data_dir, the digits MLP's
artifacts, an evaluator of global parameters on the manager's held-back test set, and daemons that can be killed
and restarted on the same address and state."""

import os
import socket
import sys

import numpy as np
from sklearn.datasets import load_digits

import traind_client
from daemon import Daemon, runfile, scratch_dir
from traind_client.fleet import Device
from traind_client.training import artifacts as ort_artifacts

# The README example's model and batch (client/python/examples/train_digits.py): a 64-128-10 MLP, batches of 32.
sys.path.insert(0, os.path.dirname(runfile("client/python/examples/train_digits.py")))
from train_digits import BATCH, TEST_SIZE, mlp  # noqa: E402


def digits_split():
    digits = load_digits()
    images, labels = (digits.data / 16.0).astype(np.float32), digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(images))
    test, train = order[:TEST_SIZE], order[TEST_SIZE:]
    return (images[train], labels[train]), (images[test], labels[test])


def label_skewed_shards(images, labels, devices, alpha=0.5, seed=7):
    """Dirichlet(alpha) label skew (Hsu et al. 2019): for each class, its examples are dealt to the devices in
    proportions drawn from Dirichlet(alpha), so each device sees a few classes mostly."""
    rng = np.random.default_rng(seed)
    parts = [[] for _ in range(devices)]
    for label in range(10):
        members = rng.permutation(np.flatnonzero(labels == label))
        cuts = (np.cumsum(rng.dirichlet([alpha] * devices)) * len(members)).astype(int)[:-1]
        for device, chunk in enumerate(np.split(members, cuts)):
            parts[device].extend(chunk.tolist())
    return [(images[np.array(sorted(p))], labels[np.array(sorted(p))]) for p in parts]


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class FleetDaemon:
    """A daemon with a fixed address, state directory and data directory, so that it can be killed (SIGKILL) and
    started again as the same device."""

    def __init__(self, name, shard):
        self.name = name
        self.port = free_port()
        self.state_dir = scratch_dir(f"{name}-state")
        self.data_dir = scratch_dir(f"{name}-data")
        np.savez(os.path.join(self.data_dir, "shard.npz"), image=shard[0], labels=shard[1])
        self.daemon = None
        self.start()

    @property
    def address(self):
        return f"127.0.0.1:{self.port}"

    def start(self):
        self.daemon = Daemon(f"--listen={self.address}", f"--state_dir={self.state_dir}",
                             f"--data_dir={self.data_dir}", "--checkpoint_every_steps=0", threads=1)

    def kill(self):
        self.daemon.process.kill()
        self.daemon.process.wait()

    def stop(self):
        if self.daemon is not None:
            self.daemon.stop()

    def device(self):
        return Device(self.address, name=self.name, data={"local_path": "shard.npz"}, eval={"fraction": 0.2})


def make_artifacts(address, out_dir):
    with traind_client.connect(address) as client:
        ort_artifacts.generate_artifacts(mlp(), loss=ort_artifacts.LossType.CrossEntropyLoss,
                                         optimizer=ort_artifacts.AdamW(lr=0.01, weight_decay=1e-4),
                                         additional_output_names=["logits"], artifact_directory=out_dir,
                                         client=client)
    return out_dir


class Evaluator:
    """Accuracy and loss of a parameter buffer on the manager's held-back test set, through a session of its own
    (on a daemon of the test's choosing)."""

    def __init__(self, address, artifact_dir, test):
        self.client = traind_client.connect(address)
        uploaded = {}
        for kind, file in (("training_model", "training_model.onnx"), ("eval_model", "eval_model.onnx"),
                           ("optimizer_model", "optimizer_model.onnx"), ("checkpoint", "checkpoint")):
            uploaded[kind] = self.client.ensure_blob(os.path.join(artifact_dir, file))
        self.session = self.client.create_session(uploaded=uploaded, display_name="evaluator").session_id
        self.images, self.labels = test

    def __call__(self, params):
        self.client.set_parameters(self.session, buffer=params)
        correct, loss_sum, seen = 0, 0.0, 0
        for start in range(0, len(self.images) - BATCH + 1, BATCH):
            x, y = self.images[start:start + BATCH], self.labels[start:start + BATCH]
            result = self.client.eval(self.session, {"image": x, "labels": y}, fetch_outputs=["logits"])
            correct += int((result.outputs["logits"].argmax(axis=1) == y).sum())
            loss_sum += result.loss * len(y)
            seen += len(y)
        return {"loss": loss_sum / seen, "accuracy": correct / seen}

    def close(self):
        self.client.close()
