#!/usr/bin/python3
"""Golden data for traind's training tests, from PyTorch 1.13 autograd (Debian python3-torch).

Never edit the output by hand: regenerate it with
    /usr/bin/python3 tests/golden/make_golden.py          # writes tests/golden/data/
The output is deterministic (fixed seeds, fixed-order reductions in float64), so a rerun gives the same files.

Each case is a tiny forward-only model exported to ONNX (opset 17, training mode, initializers named after the
state_dict) with one batch of inputs and targets, and PyTorch's answers:
    data/<case>/model.onnx                forward graph, no loss
    data/<case>/inputs/<graph input>.npy  the batch
    data/<case>/targets/<target>.npy      loss targets (int64 class ids or float32 values)
    data/<case>/ref/outputs/<output>.npy  the forward's outputs (train mode, float64 of the float32 parameters)
    data/<case>/ref/loss.npy              loss of the batch (float64 autograd, stored as float64)
    data/<case>/ref/grads/<param>.npy     dLoss/dParam (float64 autograd, stored as float64)
    data/<case>/ref/adamw_losses.npy      losses of 6 forwards around 5 AdamW steps (float32 training)
    data/<case>/ref/sgd_nesterov_losses.npy  the same for SGD(momentum=0.9, nesterov=True)
    data/manifest.json                    per case: loss definition, outputs, targets, parameters, optimizers

The losses are what traind's artifacts must build on top of the forward graph; the manifest says which.

Eval cases (eval_cases(), manifest key "eval_cases") hold the same model.onnx / inputs / targets and, instead of
training references, PyTorch's model.eval() answers and its BatchNorm buffers after one train-mode forward, both
computed from the parameter values model.onnx holds:
    data/<case>/ref/eval/outputs/<output>.npy, ref/eval/loss.npy   model.eval() forward and loss (float64)
    data/<case>/ref/running/<buffer>.npy                             running_mean / running_var after one train-mode
                                                                     forward of the batch (float64)
"""
import argparse
import copy
import json
import os

import numpy as np
import onnx
import onnx.numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F

OPSET = 17
SEED = 1234
ADAMW = dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)
SGD_NESTEROV = dict(lr=5e-2, momentum=0.9, dampening=0.0, nesterov=True, weight_decay=0.0)
TRAJECTORY_STEPS = 5


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class CnnBnMaxPool(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 3, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(3)
        self.fc = nn.Linear(3 * 3 * 3, 4)

    def forward(self, x):
        x = F.max_pool2d(torch.relu(self.bn(self.conv(x))), 2)
        return self.fc(torch.flatten(x, 1))


class ResNetBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(2, 4, 3, stride=2, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(4)
        self.shortcut = nn.Conv2d(2, 4, 1, stride=2, bias=False)
        self.bn_shortcut = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        y = torch.relu(y + self.bn_shortcut(self.shortcut(x)))
        return self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1))


class TransformerEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(20, 8)
        self.layer = nn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0,
                                                activation="gelu", batch_first=True, norm_first=True)
        self.head = nn.Linear(8, 3)

    def forward(self, tokens):
        return self.head(self.layer(self.embed(tokens)).mean(dim=1))


class TwoHeadRegressor(nn.Module):
    """Two outputs for a weighted loss: 0.4 * mse(out1, t1) + 0.6 * mse(out2, t2)."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(6, 10)
        self.head1 = nn.Linear(10, 2)
        self.head2 = nn.Linear(10, 1)

    def forward(self, x):
        h = torch.tanh(self.trunk(x))
        return self.head1(h), self.head2(h)


class BnDropoutNet(nn.Module):
    """For eval mode: BatchNorm uses its running statistics and Dropout is the identity only in model.eval()."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 3, 3, padding=1)
        self.bn = nn.BatchNorm2d(3)
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(3, 4)

    def forward(self, x):
        y = self.drop(torch.relu(self.bn(self.conv(x))))
        return self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1))


def cross_entropy(outputs, targets):
    return F.cross_entropy(outputs[0], targets[0])


def weighted_mse(outputs, targets):
    return 0.4 * F.mse_loss(outputs[0], targets[0]) + 0.6 * F.mse_loss(outputs[1], targets[1])


def cases():
    g = torch.Generator().manual_seed(SEED)
    return [
        dict(name="mlp", model=Mlp(), inputs={"input": torch.randn(5, 8, generator=g)},
             outputs=["logits"], targets={"target": torch.randint(0, 4, (5,), generator=g)},
             loss=dict(kind="cross_entropy", output="logits", target="target"), loss_fn=cross_entropy),
        dict(name="cnn_bn_maxpool", model=CnnBnMaxPool(), inputs={"input": torch.randn(3, 1, 6, 6, generator=g)},
             outputs=["logits"], targets={"target": torch.randint(0, 4, (3,), generator=g)},
             loss=dict(kind="cross_entropy", output="logits", target="target"), loss_fn=cross_entropy),
        dict(name="resnet_block", model=ResNetBlock(), inputs={"input": torch.randn(2, 2, 6, 6, generator=g)},
             outputs=["logits"], targets={"target": torch.randint(0, 3, (2,), generator=g)},
             loss=dict(kind="cross_entropy", output="logits", target="target"), loss_fn=cross_entropy),
        dict(name="transformer_encoder", model=TransformerEncoder(),
             inputs={"tokens": torch.randint(0, 20, (2, 5), generator=g)},
             outputs=["logits"], targets={"target": torch.randint(0, 3, (2,), generator=g)},
             loss=dict(kind="cross_entropy", output="logits", target="target"), loss_fn=cross_entropy),
        dict(name="two_head_weighted_mse", model=TwoHeadRegressor(), inputs={"input": torch.randn(4, 6, generator=g)},
             outputs=["out1", "out2"],
             targets={"target1": torch.randn(4, 2, generator=g), "target2": torch.randn(4, 1, generator=g)},
             loss=dict(kind="weighted", terms=[dict(weight=0.4, kind="mse", output="out1", target="target1"),
                                               dict(weight=0.6, kind="mse", output="out2", target="target2")]),
             loss_fn=weighted_mse),
    ]


def eval_cases():
    g = torch.Generator().manual_seed(SEED + 1)
    model = BnDropoutNet()
    with torch.no_grad():  # Running statistics far from their initial 0 / 1, so that eval mode visibly uses them.
        model.bn.running_mean.copy_(torch.randn(3, generator=g))
        model.bn.running_var.copy_(torch.rand(3, generator=g) + 0.5)
    return [
        dict(name="bn_dropout_eval", model=model, inputs={"input": torch.randn(4, 2, 5, 5, generator=g)},
             outputs=["logits"], targets={"target": torch.randint(0, 4, (4,), generator=g)},
             loss=dict(kind="cross_entropy", output="logits", target="target"), loss_fn=cross_entropy),
    ]


def as_tuple(outputs):
    return outputs if isinstance(outputs, tuple) else (outputs,)


def save_npy(path, array):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    np.save(path, np.ascontiguousarray(array))


def export(case, directory):
    # Tracing in training mode runs a forward, which would move BatchNorm's running statistics: export a copy.
    model = copy.deepcopy(case["model"]).float().train()
    args = tuple(case["inputs"].values())
    torch.onnx.export(model, args, os.path.join(directory, "model.onnx"), opset_version=OPSET,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=list(case["inputs"].keys()), output_names=case["outputs"])


def reference_gradients(case):
    """Loss and gradients in float64 of the float32 parameters, in train mode."""
    model = copy.deepcopy(case["model"]).double().train()
    inputs = [x.double() if x.is_floating_point() else x for x in case["inputs"].values()]
    targets = [t.double() if t.is_floating_point() else t for t in case["targets"].values()]
    outputs = as_tuple(model(*inputs))
    loss = case["loss_fn"](outputs, targets)
    loss.backward()
    grads = {name: p.grad.numpy() for name, p in model.named_parameters()}
    return [o.detach().numpy() for o in outputs], loss.detach().numpy(), grads


def trajectory(case, make_optimizer):
    """Losses before each of TRAJECTORY_STEPS steps and after the last one, in float32 (as traind trains)."""
    model = copy.deepcopy(case["model"]).float().train()
    optimizer = make_optimizer(model.parameters())
    inputs = list(case["inputs"].values())
    targets = list(case["targets"].values())
    losses = []
    for _ in range(TRAJECTORY_STEPS):
        optimizer.zero_grad()
        loss = case["loss_fn"](as_tuple(model(*inputs)), targets)
        losses.append(loss.item())
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        losses.append(case["loss_fn"](as_tuple(model(*inputs)), targets).item())
    return np.array(losses, dtype=np.float64)


def write_eval_case(case, directory):
    export(case, directory)
    for name, value in case["inputs"].items():
        save_npy(os.path.join(directory, "inputs", name + ".npy"), value.numpy())
    for name, value in case["targets"].items():
        save_npy(os.path.join(directory, "targets", name + ".npy"), value.numpy())
    # Tracing in training mode moved the exported copy's running statistics: answer for what model.onnx holds.
    exported = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(os.path.join(directory, "model.onnx")).graph.initializer}
    model = copy.deepcopy(case["model"]).double()
    model.load_state_dict({name: torch.from_numpy(exported[name].copy()).double() if name in exported else value
                           for name, value in model.state_dict().items()})
    inputs = [x.double() if x.is_floating_point() else x for x in case["inputs"].values()]
    targets = [t.double() if t.is_floating_point() else t for t in case["targets"].values()]
    with torch.no_grad():
        model.eval()
        outputs = as_tuple(model(*inputs))
        save_npy(os.path.join(directory, "ref", "eval", "loss.npy"), case["loss_fn"](outputs, targets).numpy())
        for name, value in zip(case["outputs"], outputs):
            save_npy(os.path.join(directory, "ref", "eval", "outputs", name + ".npy"), value.numpy())
        model.train()
        model(*inputs)
    for name, buffer in model.named_buffers():
        if "running" in name:
            save_npy(os.path.join(directory, "ref", "running", name + ".npy"), buffer.numpy())
    return dict(inputs=list(case["inputs"].keys()), outputs=case["outputs"], targets=list(case["targets"].keys()),
                loss=case["loss"], parameters={n: list(p.shape) for n, p in case["model"].named_parameters()},
                buffers=[n for n, _ in case["model"].named_buffers() if "running" in n])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
    args = parser.parse_args()
    torch.manual_seed(SEED)
    torch.use_deterministic_algorithms(True)
    manifest = dict(generator="tests/golden/make_golden.py", torch=torch.__version__, opset=OPSET,
                    adamw=dict(ADAMW, betas=list(ADAMW["betas"])), sgd_nesterov=SGD_NESTEROV,
                    trajectory_steps=TRAJECTORY_STEPS, cases={})
    for case in cases():
        directory = os.path.join(args.out, case["name"])
        os.makedirs(directory, exist_ok=True)
        export(case, directory)
        for name, value in case["inputs"].items():
            save_npy(os.path.join(directory, "inputs", name + ".npy"), value.numpy())
        for name, value in case["targets"].items():
            save_npy(os.path.join(directory, "targets", name + ".npy"), value.numpy())
        outputs, loss, grads = reference_gradients(case)
        for name, value in zip(case["outputs"], outputs):
            save_npy(os.path.join(directory, "ref", "outputs", name + ".npy"), value)
        save_npy(os.path.join(directory, "ref", "loss.npy"), loss)
        for name, grad in grads.items():
            save_npy(os.path.join(directory, "ref", "grads", name + ".npy"), grad)
        save_npy(os.path.join(directory, "ref", "adamw_losses.npy"),
                 trajectory(case, lambda p: torch.optim.AdamW(p, **ADAMW)))
        save_npy(os.path.join(directory, "ref", "sgd_nesterov_losses.npy"),
                 trajectory(case, lambda p: torch.optim.SGD(p, **SGD_NESTEROV)))
        manifest["cases"][case["name"]] = dict(
            inputs=list(case["inputs"].keys()), outputs=case["outputs"], targets=list(case["targets"].keys()),
            loss=case["loss"], parameters={n: list(p.shape) for n, p in case["model"].named_parameters()},
            buffers=[n for n, _ in case["model"].named_buffers() if "running" in n])
        print(f"{case['name']}: loss {float(loss):.6f}, {len(grads)} parameters")
    manifest["eval_cases"] = {}
    for case in eval_cases():
        directory = os.path.join(args.out, case["name"])
        os.makedirs(directory, exist_ok=True)
        manifest["eval_cases"][case["name"]] = write_eval_case(case, directory)
        print(f"{case['name']}: eval references")
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
