#!/usr/bin/python3
"""The five public workloads (mlp, cnn, resnet8, transformer, linreg) at their full sizes, for the tests.

The architectures, initial weights, batches and export settings of ../shared/bench/make_models.py (the benchmark's
reference models), re-declared here because the tests carry their own data: the same seeds and construction order
give the same weights and batches as that script under PyTorch 1.13. Bazel runs this at build time
(//tests/golden:workloads, Debian's /usr/bin/python3 with python3-torch and python3-onnx), so nothing large is
committed. Deterministic: a rerun writes the same files.

    /usr/bin/python3 tests/golden/make_workloads.py --out DIR

Layout, per workload W (make_golden.py's):
    DIR/W/model.onnx               forward graph (opset 17, training mode, do_constant_folding=False, initializers
                                   named after the state_dict, BatchNorm running statistics as initialised)
    DIR/W/inputs/<input>.npy       the batch ("input", or "tokens" for the transformer)
    DIR/W/targets/target.npy       int64 class ids (cross-entropy on "logits"), float32 for linreg (MSE on "prediction")
"""
import argparse
import copy
import math
import os
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SEED = 20240601
OPSET = 17


class MLP(nn.Module):
    """784-512-512-10, ReLU (MNIST-like)."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 512)
        self.fc2 = nn.Linear(512, 512)
        self.fc3 = nn.Linear(512, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


class SmallCNN(nn.Module):
    """(Conv3x3-BN-ReLU-MaxPool2) x2 -> Linear-ReLU -> Linear, on 1x28x28."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        return self.fc2(x)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = None
        if stride != 1 or cin != cout:  # projection shortcut (1x1 conv + BN)
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        sc = x if self.shortcut is None else self.shortcut(x)
        return F.relu(out + sc)


class ResNet8(nn.Module):
    """CIFAR ResNet-8 (He et al. 2016 sec. 4.2 with n=1): stem + 3 stages x 1 block + fc."""

    def __init__(self, num_classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.layer1 = BasicBlock(16, 16, 1)
        self.layer2 = BasicBlock(16, 32, 2)
        self.layer3 = BasicBlock(32, 64, 2)
        self.fc = nn.Linear(64, num_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        x = F.adaptive_avg_pool2d(x, 1)
        x = torch.flatten(x, 1)
        return self.fc(x)


class EncoderLayer(nn.Module):
    """Pre-LN transformer encoder layer written with plain ops."""

    def __init__(self, d, heads, ff, seq):
        super().__init__()
        self.d, self.h, self.dh, self.seq = d, heads, d // heads, seq
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.ff1 = nn.Linear(d, ff)
        self.ff2 = nn.Linear(ff, d)

    def forward(self, x):  # x: [B, T, d]
        T, H, Dh = self.seq, self.h, self.dh
        y = self.ln1(x)
        qkv = self.qkv(y).reshape(-1, T, 3, H, Dh).permute(2, 0, 3, 1, 4)  # 3,B,H,T,Dh
        q, k, v = qkv[0], qkv[1], qkv[2]
        att = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(Dh))
        att = torch.softmax(att, dim=-1)
        o = torch.matmul(att, v).transpose(1, 2).reshape(-1, T, self.d)
        x = x + self.proj(o)
        x = x + self.ff2(F.gelu(self.ff1(self.ln2(x))))
        return x


class TinyTransformer(nn.Module):
    """Token + learned position embedding, 2 pre-LN encoder layers, mean-pool, linear head."""

    def __init__(self, vocab=1000, d=128, layers=2, heads=4, ff=512, seq=64, num_classes=10):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.02)
        self.layers = nn.ModuleList([EncoderLayer(d, heads, ff, seq) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(d)
        self.head = nn.Linear(d, num_classes)

    def forward(self, tokens):  # tokens: int64 [B, T]
        x = self.tok(tokens) + self.pos
        for layer in self.layers:
            x = layer(x)
        x = self.ln_f(x).mean(dim=1)
        return self.head(x)


class LinReg(nn.Module):
    """10 features -> 1."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(10, 1)

    def forward(self, x):
        return self.lin(x)


def classes_batch(g, shape, classes=10):
    return torch.randn(*shape, generator=g), torch.randint(0, classes, (shape[0],), generator=g)


def tokens_batch(g, b=16, t=64, vocab=1000, classes=10):
    return torch.randint(0, vocab, (b, t), generator=g), torch.randint(0, classes, (b,), generator=g)


def linreg_batch(g, n=256, f=10):
    x = torch.randn(n, f, generator=g)
    w = torch.randn(f, 1, generator=g)
    return x, x @ w + 0.5 + 0.1 * torch.randn(n, 1, generator=g)


# In make_models.py's order: a workload's seeds are SEED + its index (weights) and SEED + 100 + its index (batch).
WORKLOADS = [
    ("mlp", MLP, lambda g: classes_batch(g, (64, 784)), "input", "logits"),
    ("cnn", SmallCNN, lambda g: classes_batch(g, (64, 1, 28, 28)), "input", "logits"),
    ("resnet8", ResNet8, lambda g: classes_batch(g, (32, 3, 32, 32)), "input", "logits"),
    ("transformer", TinyTransformer, tokens_batch, "tokens", "logits"),
    ("linreg", LinReg, linreg_batch, "input", "prediction"),
]


def write(directory, index, ctor, make_batch, input_name, output_name):
    torch.manual_seed(SEED + index)
    model = ctor()
    x, y = make_batch(torch.Generator().manual_seed(SEED + 100 + index))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    path = os.path.join(directory, "model.onnx")
    os.makedirs(os.path.join(directory, "inputs"), exist_ok=True)
    os.makedirs(os.path.join(directory, "targets"), exist_ok=True)
    exported = copy.deepcopy(model).train()
    torch.onnx.export(exported, (x,), path, export_params=True, do_constant_folding=False,
                      training=torch.onnx.TrainingMode.TRAINING, opset_version=OPSET, input_names=[input_name],
                      output_names=[output_name])
    # Tracing in training mode ran a forward, which moved BatchNorm's running statistics: export the initial ones.
    import onnx
    from onnx import numpy_helper
    onnx_model = onnx.load(path)
    for tensor in onnx_model.graph.initializer:
        if tensor.name in state:
            value = state[tensor.name].detach().numpy()
            tensor.CopyFrom(numpy_helper.from_array(value.astype(numpy_helper.to_array(tensor).dtype), tensor.name))
    onnx.checker.check_model(onnx_model)
    onnx.save(onnx_model, path)
    np.save(os.path.join(directory, "inputs", input_name + ".npy"), x.numpy())
    np.save(os.path.join(directory, "targets", "target.npy"), y.numpy())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", category=UserWarning)  # the exporter's notes on BatchNorm's in-place updates
    for index, (name, ctor, make_batch, input_name, output_name) in enumerate(WORKLOADS):
        write(os.path.join(args.out, name), index, ctor, make_batch, input_name, output_name)


if __name__ == "__main__":
    main()
