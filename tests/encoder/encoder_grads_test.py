"""The BERT-size encoder (6 layers, d_model 768, 12 heads, FF 3072, sequence 128, batch 8; bench/encoder.py, made
from PyTorch 1.13 at test time) trains in traind with PyTorch's first-step gradients, each within 1e-4 of the
largest reference element, and PyTorch's loss, for full fine-tuning (every parameter, the token embedding
included), head-only fine-tuning and LoRA rank 8 on every attention projection (traind_client.lora), against
float64 references. traind's side is bench/train_bench: GenerateArtifacts + Module + Optimizer in process, its
first step's gradients dumped."""

import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import onnx
from onnx import numpy_helper

from traind_client import lora

GRAD_TOLERANCE = 1e-4


def runfile(path):
    return os.path.join(os.environ["TEST_SRCDIR"], os.environ["TEST_WORKSPACE"], path)


ENCODER = runfile("bench/encoder.py")
TRAIN_BENCH = runfile("bench/train_bench")


def run(args):
    result = subprocess.run(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed:\n{result.stdout}")
    return result.stdout


class EncoderGradientsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        cls.base = os.path.join(cls.dir, "base")
        run([sys.executable, ENCODER, "export", "--out", cls.base])
        run([sys.executable, ENCODER, "reference", "--dir", cls.base, "--out", os.path.join(cls.dir, "ref_full")])
        # LoRA rank 8 on q, k, v, o of every layer, written beside the base model (it shares its data file).
        model = onnx.load(os.path.join(cls.base, "model.onnx"), load_external_data=False)
        targets = lora.find_targets(model, r"layers\.\d+\.(q|k|v|o)\.weight")
        assert len(targets) == 24, targets
        adapted, cls.lora_params = lora.add_lora(model, targets, rank=8, alpha=16, seed=3, base_dir=cls.base)
        # B starts at zero (PEFT's init), which makes every A's first gradient zero: give B values for the check.
        rng = np.random.default_rng(4)
        for tensor in adapted.graph.initializer:
            if tensor.name.endswith(".lora_B"):
                shape = tuple(tensor.dims)
                tensor.CopyFrom(numpy_helper.from_array((rng.standard_normal(shape) * 0.02).astype(np.float32),
                                                        tensor.name))
        cls.lora_model = os.path.join(cls.base, "model_lora.onnx")
        onnx.save(adapted, cls.lora_model)
        run([sys.executable, ENCODER, "reference", "--dir", cls.base, "--lora", cls.lora_model,
             "--out", os.path.join(cls.dir, "ref_lora")])

    def train_bench(self, name, model, requires_grad=()):
        dump = os.path.join(self.dir, "dump_" + name)
        args = [TRAIN_BENCH, f"--model={model}", f"--input=input_ids={self.base}/input_ids.npy",
                f"--target=labels={self.base}/labels.npy", "--loss=cross_entropy", "--warmup=0", "--steps=1",
                "--min_time=0", "--threads=2", f"--dump={dump}"]
        if requires_grad:
            args.append("--requires_grad=" + ",".join(requires_grad))
        run(args)
        return dump

    def check(self, dump, reference, names):
        loss = float(np.load(os.path.join(dump, "losses.npy"))[0])
        expected_loss = float(np.load(os.path.join(reference, "loss.npy")))
        self.assertLess(abs(loss - expected_loss), 1e-5 * max(1.0, abs(expected_loss)))
        references = {name: np.load(os.path.join(reference, "grads", name + ".npy")) for name in names}
        # Some gradients are zero in exact arithmetic (the key projection's bias: softmax ignores a shift common to
        # a row's scores): float64 gives ~1e-18, float32 ~1e-10, and a relative error is meaningless. Their scale is
        # taken as 1e-3 of the largest reference gradient of the model instead of their own.
        floor = 1e-3 * max(np.abs(theirs).max() for theirs in references.values())
        for name in names:
            ours = np.load(os.path.join(dump, "grads", name.replace("/", "_") + ".npy")).astype(np.float64)
            theirs = references[name]
            self.assertEqual(ours.shape, theirs.shape, name)
            error = np.abs(ours - theirs).max() / max(np.abs(theirs).max(), floor)
            self.assertLessEqual(error, GRAD_TOLERANCE, f"{name}: {error:.3g}")
        produced = sorted(f[:-4] for f in os.listdir(os.path.join(dump, "grads")))
        self.assertEqual(produced, sorted(n.replace("/", "_") for n in names))  # nothing else was trained

    def test_full_fine_tuning(self):
        reference = os.path.join(self.dir, "ref_full")
        names = [f[:-4] for f in os.listdir(os.path.join(reference, "grads"))]
        self.assertEqual(len(names), 4 + 6 * 16 + 2)  # embeddings, LayerNorm 0, 6 layers, head
        self.check(self.train_bench("full", os.path.join(self.base, "model.onnx")), reference, names)

    def test_head_only_fine_tuning(self):
        names = ["head.weight", "head.bias"]
        dump = self.train_bench("head", os.path.join(self.base, "model.onnx"), names)
        self.check(dump, os.path.join(self.dir, "ref_full"), names)

    def test_lora_fine_tuning(self):
        dump = self.train_bench("lora", self.lora_model, self.lora_params)
        self.check(dump, os.path.join(self.dir, "ref_lora"), self.lora_params)


if __name__ == "__main__":
    unittest.main()
