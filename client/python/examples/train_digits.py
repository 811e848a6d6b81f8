#!/usr/bin/env python3
"""Trains a handwritten-digit classifier on traind, end to end, with ONNX Runtime's training API.

The 8x8 digits that scikit-learn ships (1,797 images, no download) are split into a training set and a held-back
test set; a small MLP (64-128-10) is written as ONNX with onnx.helper; traind generates the training artifacts;
the loop is ONNX Runtime's (module(...), optimizer.step(), module.lazy_reset_grad()) with a progress bar of the
loss; the test accuracy must reach 95 %; the exported inference model is then checked by the engine in a new
session. Exit status 0 when both accuracies reach 95 %.

    TRAIND_ADDRESS=127.0.0.1:50051 python3 client/python/examples/train_digits.py [--epochs N] [--out DIR]
"""

import argparse
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from sklearn.datasets import load_digits

from traind_client.training import artifacts, default_client
from traind_client.training.api import CheckpointState, LinearLRScheduler, Module, Optimizer

BATCH = 32       # traind compiles static shapes, so every batch has this many images
TEST_SIZE = 352  # 11 batches held back for testing
TARGET_ACCURACY = 0.95


def mlp(hidden=128, seed=0):
    """logits = fc2(relu(fc1(image))), He-initialised; input [BATCH, 64], output logits [BATCH, 10]."""
    rng = np.random.default_rng(seed)

    def linear(name, fan_in, fan_out):
        weight = rng.standard_normal((fan_out, fan_in)) * np.sqrt(2.0 / fan_in)
        return [numpy_helper.from_array(weight.astype(np.float32), f"{name}.weight"),
                numpy_helper.from_array(np.zeros(fan_out, np.float32), f"{name}.bias")]

    graph = helper.make_graph(
        [helper.make_node("Gemm", ["image", "fc1.weight", "fc1.bias"], ["hidden"], transB=1),
         helper.make_node("Relu", ["hidden"], ["activation"]),
         helper.make_node("Gemm", ["activation", "fc2.weight", "fc2.bias"], ["logits"], transB=1)],
        "digits_mlp", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [BATCH, 64])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [BATCH, 10])],
        linear("fc1", 64, hidden) + linear("fc2", hidden, 10))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def batches(images, labels, rng=None):
    """Full batches, shuffled when `rng` is given (a last partial batch is dropped)."""
    order = rng.permutation(len(images)) if rng is not None else np.arange(len(images))
    for start in range(0, len(order) - BATCH + 1, BATCH):
        chosen = order[start:start + BATCH]
        yield images[chosen], labels[chosen]


def show_progress(epoch, epochs, step, steps, loss):
    done = int(30 * step / steps)
    print(f"\repoch {epoch:2d}/{epochs} [{'#' * done}{'.' * (30 - done)}] {step:3d}/{steps} loss {loss:.4f}",
          end="" if step < steps else "\n", flush=True)


def accuracy(logits_of, images, labels):
    correct = sum(int((logits_of(x, y).argmax(axis=1) == y).sum()) for x, y in batches(images, labels))
    return correct / len(images)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--out", help="directory for the artifacts and the exported model (default: a temporary one)")
    args = parser.parse_args()
    out = args.out or tempfile.mkdtemp(prefix="digits.")
    os.makedirs(out, exist_ok=True)

    digits = load_digits()
    images, labels = (digits.data / 16.0).astype(np.float32), digits.target.astype(np.int64)
    order = np.random.default_rng(0).permutation(len(images))
    test, train = order[:TEST_SIZE], order[TEST_SIZE:]
    print(f"digits: {len(train)} training images, {len(test)} held back; artifacts in {out}")

    # Training artifacts, made by the daemon: cross-entropy over the logits (kept as an output), AdamW.
    artifacts.generate_artifacts(mlp(), loss=artifacts.LossType.CrossEntropyLoss,
                                 optimizer=artifacts.AdamW(lr=0.01, weight_decay=1e-4),
                                 additional_output_names=["logits"], artifact_directory=out)

    state = CheckpointState.load_checkpoint(os.path.join(out, "checkpoint"))
    module = Module(os.path.join(out, "training_model.onnx"), state, os.path.join(out, "eval_model.onnx"))
    optimizer = Optimizer(os.path.join(out, "optimizer_model.onnx"), module)
    steps = len(train) // BATCH
    scheduler = LinearLRScheduler(optimizer, warmup_step_count=steps, total_step_count=args.epochs * steps,
                                  initial_lr=0.01)
    rng = np.random.default_rng(1)
    for epoch in range(1, args.epochs + 1):
        module.train()
        for step, (x, y) in enumerate(batches(images[train], labels[train], rng), start=1):
            loss, _ = module(x, y)
            optimizer.step()
            scheduler.step()
            module.lazy_reset_grad()
            show_progress(epoch, args.epochs, step, steps, float(loss))

    module.eval()
    test_accuracy = accuracy(lambda x, y: module(x, y)[1], images[test], labels[test])
    print(f"held-back accuracy: {test_accuracy:.2%}")

    # The inference model: the eval model with the trained parameters, logits only.
    exported = os.path.join(out, "digits.onnx")
    module.export_model_for_inferencing(exported, ["logits"])
    CheckpointState.save_checkpoint(state, os.path.join(out, "checkpoint"))
    module.close()

    # Check it with the engine: a fresh session over the exported model alone evaluates the held-back set.
    client = default_client()
    check = client.generate_artifacts(onnx.load(exported), loss={"builtin": {"type": "CROSS_ENTROPY"}},
                                      additional_output_names=["logits"])
    session = client.create_session(check.artifact_id)
    try:
        logits_of = lambda x, y: client.eval(session.session_id, {"image": x, "target": y},
                                             fetch_outputs=["logits"]).outputs["logits"]
        exported_accuracy = accuracy(logits_of, images[test], labels[test])
    finally:
        client.close_session(session.session_id)
    print(f"exported model ({exported}) accuracy, checked by the engine: {exported_accuracy:.2%}")
    if min(test_accuracy, exported_accuracy) < TARGET_ACCURACY:
        print(f"FAILED: accuracy below {TARGET_ACCURACY:.0%}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
