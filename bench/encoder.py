#!/usr/bin/python3
"""A BERT-size Transformer encoder made with PyTorch 1.13: the ONNX model traind trains, PyTorch's own reference
gradients for it, and the PyTorch peer of the benchmark (bench/compare_encoder.py) — one model definition for all
three, so that traind and PyTorch train exactly the same network. No downloaded weights: everything is seeded.

Model (defaults: BERT-base's layer shape, DistilBERT's depth): token embedding (vocab 30522) + learned positions
-> LayerNorm -> N post-LN encoder layers (12-head self-attention, GELU feed-forward 3072) -> mean over the
sequence -> classifier (4 classes); CrossEntropy on int64 labels. Batch 8, sequence 128. Linear layers keep their
weight as [in, out] and compute x @ W + b, so that the ONNX graph's MatMul reads the initializer of the same name
as the PyTorch parameter (no transposed copy): gradients compare by name, and LoRA adapters attach to it.

    encoder.py export --out DIR [--layers 6]           # DIR/model.onnx, input_ids.npy, labels.npy
    encoder.py reference --dir DIR --out REF [--lora LORA_MODEL]
        # float64 loss and first-step gradients of every parameter (or, with a LoRA model written by
        # traind_client.lora.add_lora, of its adapters) as REF/loss.npy and REF/grads/<name>.npy
    encoder.py torch-bench --dir DIR [--mode full|lora|head] [--rank 8] [--threads 2] [--steps 10] [--warmup 3]
        # one JSON line: median ms per training step (zero_grad + forward + loss + backward + AdamW), peak RSS
"""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

CONFIG = dict(layers=6, d_model=768, heads=12, ff=3072, seq=128, batch=8, vocab=30522, classes=4)
ADAMW = dict(lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)


class Dense(nn.Module):
    """x @ weight + bias with weight [in, out] (nn.Linear's arithmetic, its transpose stored)."""

    def __init__(self, fan_in, fan_out):
        super().__init__()
        bound = 1.0 / math.sqrt(fan_in)
        self.weight = nn.Parameter(torch.empty(fan_in, fan_out).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(fan_out).uniform_(-bound, bound))
        self.lora = None  # (A [in, r], B [r, out], scaling) when adapted

    def forward(self, x):
        y = torch.matmul(x, self.weight) + self.bias
        if self.lora is not None:
            a, b, scaling = self.lora
            y = y + torch.matmul(torch.matmul(x, a), b) * scaling
        return y


class EncoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        d = c["d_model"]
        self.c = c
        self.q, self.k, self.v, self.o = Dense(d, d), Dense(d, d), Dense(d, d), Dense(d, d)
        self.ln1 = nn.LayerNorm(d)
        self.ff1, self.ff2 = Dense(d, c["ff"]), Dense(c["ff"], d)
        self.ln2 = nn.LayerNorm(d)

    def forward(self, x):
        c = self.c
        b, s, h, dh = c["batch"], c["seq"], c["heads"], c["d_model"] // c["heads"]
        q = self.q(x).reshape(b, s, h, dh).transpose(1, 2)
        k = self.k(x).reshape(b, s, h, dh).permute(0, 2, 3, 1)
        v = self.v(x).reshape(b, s, h, dh).transpose(1, 2)
        p = torch.softmax(torch.matmul(q, k) * (1.0 / math.sqrt(dh)), dim=-1)
        context = torch.matmul(p, v).transpose(1, 2).reshape(b, s, h * dh)
        x = self.ln1(x + self.o(context))
        return self.ln2(x + self.ff2(F.gelu(self.ff1(x))))


class Encoder(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.tok = nn.Parameter(torch.randn(c["vocab"], c["d_model"]) * 0.02)
        self.pos = nn.Parameter(torch.randn(c["seq"], c["d_model"]) * 0.02)
        self.ln0 = nn.LayerNorm(c["d_model"])
        self.layers = nn.ModuleList([EncoderLayer(c) for _ in range(c["layers"])])
        self.head = Dense(c["d_model"], c["classes"])

    def forward(self, input_ids):
        x = self.ln0(self.tok[input_ids] + self.pos)
        for layer in self.layers:
            x = layer(x)
        return self.head(x.mean(dim=1))


def config_from(args):
    c = dict(CONFIG)
    for key in c:
        value = getattr(args, key, None)
        if value is not None:
            c[key] = value
    return c


def build(c, seed=0):
    torch.manual_seed(seed)
    model = Encoder(c)
    # LayerNorms start near (not at) ones and zeros: PyTorch's exporter merges initializers of equal values into
    # one (an Identity of the first), which would make the ONNX model's parameters differ from the module's.
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.LayerNorm):
                module.weight.add_(torch.randn_like(module.weight) * 0.02)
                module.bias.add_(torch.randn_like(module.bias) * 0.02)
    return model


def export(args):
    c = config_from(args)
    os.makedirs(args.out, exist_ok=True)
    model = build(c)
    rng = np.random.RandomState(1)
    ids = rng.randint(0, c["vocab"], size=(c["batch"], c["seq"])).astype(np.int64)
    labels = rng.randint(0, c["classes"], size=(c["batch"],)).astype(np.int64)
    np.save(os.path.join(args.out, "input_ids.npy"), ids)
    np.save(os.path.join(args.out, "labels.npy"), labels)
    path = os.path.join(args.out, "model.onnx")
    with torch.no_grad():
        torch.onnx.export(model, (torch.from_numpy(ids),), path, input_names=["input_ids"],
                          output_names=["logits"], opset_version=17, do_constant_folding=True)
    move_weights_to_external_data(path)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(c, f)


def move_weights_to_external_data(path, alignment=4096):
    """Rewrites the ONNX file with every float initializer of at least 1 KiB in `<file>.data` beside it, at
    page-aligned offsets (traind maps them instead of copying; onnx 1.12's own writer does not align)."""
    import onnx

    model = onnx.load(path)
    data_name = os.path.basename(path) + ".data"
    offset = 0
    with open(path + ".data", "wb") as data:
        for tensor in model.graph.initializer:
            if tensor.data_type != onnx.TensorProto.FLOAT or len(tensor.raw_data) < 1024:
                continue
            padding = -offset % alignment
            data.write(b"\0" * padding)
            offset += padding
            raw = tensor.raw_data
            data.write(raw)
            tensor.ClearField("raw_data")
            tensor.data_location = onnx.TensorProto.EXTERNAL
            for key, value in (("location", data_name), ("offset", str(offset)), ("length", str(len(raw)))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value
            offset += len(raw)
    onnx.save(model, path)


def load_dir(directory):
    with open(os.path.join(directory, "config.json")) as f:
        c = json.load(f)
    ids = torch.from_numpy(np.load(os.path.join(directory, "input_ids.npy")))
    labels = torch.from_numpy(np.load(os.path.join(directory, "labels.npy")))
    return c, ids, labels


def lora_entries(lora_model_path):
    """The adapters traind_client.lora.add_lora recorded in a model: weight name -> (A, B, scaling)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(lora_model_path)
    meta = {p.key: p.value for p in model.metadata_props}
    values = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    return [(e["weight"], values[e["a"]], values[e["b"]], e["scaling"], e["a"], e["b"])
            for e in json.loads(meta["traind.lora"])]


def attach_lora(model, entries, dtype):
    """Adapters with the given values on the Dense layers whose weight the entries name; returns name -> param."""
    modules = {name[:-len(".weight")]: module for name, module in
               ((n + ".weight", m) for n, m in model.named_modules() if isinstance(m, Dense))}
    params = {}
    for weight, a, b, scaling, a_name, b_name in entries:
        module = modules[weight[:-len(".weight")]]
        pa = nn.Parameter(torch.from_numpy(np.array(a)).to(dtype))
        pb = nn.Parameter(torch.from_numpy(np.array(b)).to(dtype))
        module.lora = (pa, pb, scaling)
        params[a_name], params[b_name] = pa, pb
    return params


def reference(args):
    """Float64 loss and gradients of the first step (the references traind's float32 ones are checked against)."""
    c, ids, labels = load_dir(args.dir)
    model = build(c).double()
    if args.lora:
        for p in model.parameters():
            p.requires_grad_(False)
        params = attach_lora(model, lora_entries(args.lora), torch.float64)
    else:
        params = dict(model.named_parameters())
    loss = F.cross_entropy(model(ids), labels)
    loss.backward()
    os.makedirs(os.path.join(args.out, "grads"), exist_ok=True)
    np.save(os.path.join(args.out, "loss.npy"), np.array(loss.item()))
    for name, p in params.items():
        np.save(os.path.join(args.out, "grads", name + ".npy"), p.grad.numpy())


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def torch_bench(args):
    torch.set_num_threads(args.threads)
    c, ids, labels = load_dir(args.dir)
    model = build(c)
    if args.mode == "full":
        params = list(model.parameters())
    else:
        for p in model.parameters():
            p.requires_grad_(False)
        params = list(model.head.parameters())
        if args.mode == "lora":
            # The same adapters traind trains: rank r on q, k, v, o of every layer, B zero (PEFT's init).
            for layer in model.layers:
                for dense in (layer.q, layer.k, layer.v, layer.o):
                    fan_in, fan_out = dense.weight.shape
                    bound = 1.0 / math.sqrt(fan_in)
                    a = nn.Parameter(torch.empty(fan_in, args.rank).uniform_(-bound, bound))
                    b = nn.Parameter(torch.zeros(args.rank, fan_out))
                    dense.lora = (a, b, args.alpha / args.rank)
                    params += [a, b]
        for p in params:
            p.requires_grad_(True)
    optimizer = torch.optim.AdamW(params, **ADAMW)

    def step():
        optimizer.zero_grad()
        loss = F.cross_entropy(model(ids), labels)
        loss.backward()
        optimizer.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    times, start = [], time.perf_counter()
    while len(times) < args.steps or time.perf_counter() - start < args.min_time:
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    print(json.dumps(dict(median_ms=statistics.median(times) * 1e3, steps=len(times), peak_rss_mb=peak_rss_mb(),
                          trainable=sum(p.numel() for p in params))))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export")
    e.add_argument("--out", required=True)
    for key in CONFIG:
        e.add_argument("--" + key, type=int)
    r = sub.add_parser("reference")
    r.add_argument("--dir", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--lora", help="a model written by traind_client.lora.add_lora (its adapters' values)")
    b = sub.add_parser("torch-bench")
    b.add_argument("--dir", required=True)
    b.add_argument("--mode", choices=["full", "lora", "head"], default="full")
    b.add_argument("--rank", type=int, default=8)
    b.add_argument("--alpha", type=float, default=16.0)
    b.add_argument("--threads", type=int, default=2)
    b.add_argument("--steps", type=int, default=10)
    b.add_argument("--warmup", type=int, default=3)
    b.add_argument("--min-time", type=float, default=0.0)
    args = ap.parse_args()
    {"export": export, "reference": reference, "torch-bench": torch_bench}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
