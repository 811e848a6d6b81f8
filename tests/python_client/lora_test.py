"""traind_client.lora against the real daemon: adapters added to a frozen model's MatMul and Gemm weights train
(only they change), the trained model comes back through the export (also with an external data file), and
merge_lora folds them into plain weights that give the session's own outputs when the engine runs the merged
model; the merged graph is the original one."""

import os
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from daemon import Daemon, scratch_dir
from traind_client import lora

BATCH, SEQ, WIDTH, CLASSES = 4, 6, 16, 3


def base_model():
    """x [B, S, W] -> MatMul w1 -> Relu -> MatMul w2 (+ b2) -> mean over S -> Gemm (transB) head -> logits."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h1"], name="mm1"),
             helper.make_node("Relu", ["h1"], ["r1"], name="relu"),
             helper.make_node("MatMul", ["r1", "w2"], ["h2"], name="mm2"),
             helper.make_node("Add", ["h2", "b2"], ["z2"], name="add2"),
             helper.make_node("ReduceMean", ["z2"], ["pooled"], name="pool", axes=[1], keepdims=0),
             helper.make_node("Gemm", ["pooled", "head_w", "head_b"], ["logits"], name="head", transB=1)]
    weights = {"w1": rng.standard_normal((WIDTH, WIDTH)) * 0.3, "w2": rng.standard_normal((WIDTH, WIDTH)) * 0.3,
               "b2": rng.standard_normal(WIDTH) * 0.1, "head_w": rng.standard_normal((CLASSES, WIDTH)) * 0.3,
               "head_b": np.zeros(CLASSES)}
    graph = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [BATCH, SEQ, WIDTH])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [BATCH, CLASSES])],
        [numpy_helper.from_array(value.astype(np.float32), name) for name, value in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def batch(seed=1):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((BATCH, SEQ, WIDTH)).astype(np.float32),
            "labels": rng.integers(0, CLASSES, BATCH)}


class LoraTest(unittest.TestCase):
    def test_adapters_train_and_merge_into_plain_weights(self):
        base = base_model()
        targets = lora.find_targets(base, r"w\d|head_w")
        self.assertEqual(targets, ["w1", "w2", "head_w"])
        adapted, trainable = lora.add_lora(base, targets, rank=4, alpha=8)
        self.assertEqual(len(trainable), 6)
        with self.assertRaises(ValueError):
            lora.add_lora(adapted, targets)  # already adapted
        with self.assertRaises(ValueError):
            lora.add_lora(base, ["b2"])  # not a MatMul / Gemm weight
        data = batch()
        with Daemon() as daemon:
            client = daemon.connect()
            artifacts = client.generate_artifacts(
                adapted, requires_grad=trainable, loss={"builtin": {"type": "CROSS_ENTROPY", "target_name": "labels"}},
                optimizer={"adamw": {"lr": 0.05}}, additional_output_names=["logits"])
            self.assertEqual(sorted(artifacts.trainable_parameters), sorted(trainable))
            session = client.create_session(artifacts.artifact_id).session_id
            before = client.get_parameters(session, names=["w1", "w2", "head_w"]).parameters
            losses = [client.train_step(session, data).loss for _ in range(8)]
            self.assertLess(losses[-1], losses[0])
            after = client.get_parameters(session, names=["w1", "w2", "head_w"] + trainable).parameters
            for name in ("w1", "w2", "head_w"):  # frozen: unchanged
                np.testing.assert_array_equal(after[name], before[name])
            self.assertGreater(np.abs(after["w1.lora_B"]).max(), 0)  # B starts at zero and learned
            expected = client.eval(session, data, fetch_outputs=["logits"]).outputs["logits"]

            directory = scratch_dir("lora")
            for external in (False, True):
                path = os.path.join(directory, f"trained_{int(external)}.onnx")
                written = client.export_model(session, path, ["logits"], external_data=external)
                self.assertEqual(len(written), 2 if external else 1)
                merged = lora.merge_lora(onnx.load(path))
                self.assertEqual([n.op_type for n in merged.graph.node], [n.op_type for n in base.graph.node])
                self.assertFalse(any("lora" in t.name for t in merged.graph.initializer))
                values = {t.name: numpy_helper.to_array(t) for t in merged.graph.initializer}
                scaling = 8 / 4
                np.testing.assert_allclose(
                    values["w1"], after["w1"] + scaling * after["w1.lora_A"] @ after["w1.lora_B"], rtol=1e-5,
                    atol=1e-6)
                np.testing.assert_allclose(  # Gemm with transB: the adapter's product transposed
                    values["head_w"], after["head_w"] + (scaling * after["head_w.lora_A"] @ after["head_w.lora_B"]).T,
                    rtol=1e-5, atol=1e-6)
                # The engine runs the merged, plain model to the adapted session's own outputs.
                check = client.generate_artifacts(
                    merged, requires_grad=["head_b"], loss={"builtin": {"type": "CROSS_ENTROPY", "target_name": "labels"}},
                    optimizer={"adamw": {"lr": 0.0}}, additional_output_names=["logits"])
                plain = client.create_session(check.artifact_id).session_id
                logits = client.eval(plain, data, fetch_outputs=["logits"]).outputs["logits"]
                np.testing.assert_allclose(logits, expected, rtol=1e-4, atol=1e-5)
                client.close_session(plain)
            with self.assertRaises(ValueError):
                lora.merge_lora(base)  # no adapters


if __name__ == "__main__":
    unittest.main()
