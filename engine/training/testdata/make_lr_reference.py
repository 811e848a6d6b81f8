#!/usr/bin/python3
"""Reference learning rates for engine/training/lr_scheduler_test.cc, from torch.optim.lr_scheduler (PyTorch 1.13).

Never edit the output by hand: regenerate it with
    /usr/bin/python3 engine/training/testdata/make_lr_reference.py   # writes engine/training/testdata/lr_reference.txt

The schedules are torch's own StepLR and LambdaLR driven by the lambdas of ONNX Runtime's LinearLRScheduler and
Hugging Face's get_constant_schedule_with_warmup / get_cosine_schedule_with_warmup /
get_cosine_with_min_lr_schedule_with_warmup (copied from their sources, not from traind). For each case the
learning rate of the optimizer's param group is recorded after construction and after each of STEPS
optimizer.step() + scheduler.step() pairs, so value n is the rate once n steps have been taken.

Output, one case per line:
    <kind> initial_lr=<float> <setting>:<i|f>=<value> ... | <lr after 0 steps> <lr after 1 step> ...
Settings of type f are float32 values (what traind's checkpoint stores), written exactly.
"""
import math
import os

import numpy as np
import torch

STEPS = 16


def f32(x):
    return float(np.float32(x))


def ort_linear(warmup_steps, total_steps):
    # onnxruntime orttraining/training_api/lr_scheduler.cc, LinearLRScheduler::ComputeLearningRateInternal.
    def multiplier(step):
        if step < warmup_steps:
            return float(step) / float(max(1, warmup_steps))
        return max(0.0, float(total_steps - step) / float(max(1, total_steps - warmup_steps)))
    return multiplier


def hf_constant_with_warmup(warmup_steps):
    # transformers.optimization._get_constant_schedule_with_warmup_lr_lambda.
    def multiplier(step):
        if step < warmup_steps:
            return float(step) / float(max(1.0, warmup_steps))
        return 1.0
    return multiplier


def hf_cosine_with_min_lr(warmup_steps, total_steps, num_cycles, min_lr_rate):
    # transformers.optimization._get_cosine_schedule_with_warmup_lr_lambda (min_lr_rate = 0) and
    # _get_cosine_with_min_lr_schedule_with_warmup_lr_lambda.
    def multiplier(step):
        if step < warmup_steps:
            return float(step) / float(max(1, warmup_steps))
        progress = float(step - warmup_steps) / float(max(1, total_steps - warmup_steps))
        factor = 0.5 * (1.0 + math.cos(math.pi * float(num_cycles) * 2.0 * progress))
        factor = factor * (1 - min_lr_rate) + min_lr_rate
        return max(0.0, factor)
    return multiplier


# (kind, initial lr, settings as (name, type, value)).
CASES = [
    ("linear_warmup_decay", 0.1, [("warmup_steps", "i", 3), ("total_steps", "i", 10)]),
    ("linear_warmup_decay", 2e-3, [("warmup_steps", "i", 0), ("total_steps", "i", 5)]),
    ("linear_warmup_decay", 1e-3, [("warmup_steps", "i", 4), ("total_steps", "i", 4)]),
    ("constant_with_warmup", 0.05, [("warmup_steps", "i", 4)]),
    ("constant_with_warmup", 0.05, [("warmup_steps", "i", 0)]),
    ("cosine_with_warmup", 0.1, [("warmup_steps", "i", 2), ("total_steps", "i", 12), ("num_cycles", "f", 0.5),
                                 ("min_lr_rate", "f", 0.0)]),
    ("cosine_with_warmup", 3e-4, [("warmup_steps", "i", 0), ("total_steps", "i", 8), ("num_cycles", "f", 1.5),
                                  ("min_lr_rate", "f", 0.1)]),
    ("cosine_with_warmup", 1e-2, [("warmup_steps", "i", 3), ("total_steps", "i", 11), ("num_cycles", "f", 0.5),
                                  ("min_lr_rate", "f", 0.25)]),
    ("step", 0.1, [("step_size", "i", 3), ("gamma", "f", 0.5)]),
    ("step", 1e-3, [("step_size", "i", 1), ("gamma", "f", 0.9)]),
]


def make_scheduler(kind, optimizer, s):
    if kind == "step":
        return torch.optim.lr_scheduler.StepLR(optimizer, step_size=s["step_size"], gamma=s["gamma"])
    if kind == "linear_warmup_decay":
        lam = ort_linear(s["warmup_steps"], s["total_steps"])
    elif kind == "constant_with_warmup":
        lam = hf_constant_with_warmup(s["warmup_steps"])
    elif kind == "cosine_with_warmup":
        lam = hf_cosine_with_min_lr(s["warmup_steps"], s["total_steps"], s["num_cycles"], s["min_lr_rate"])
    else:
        raise ValueError(kind)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lam)


def main():
    lines = []
    for kind, initial_lr, settings in CASES:
        values = {name: (f32(v) if t == "f" else int(v)) for name, t, v in settings}
        initial_lr = f32(initial_lr)
        parameter = torch.nn.Parameter(torch.zeros(1))
        optimizer = torch.optim.SGD([parameter], lr=initial_lr)
        scheduler = make_scheduler(kind, optimizer, values)
        lrs = [optimizer.param_groups[0]["lr"]]
        for _ in range(STEPS):
            optimizer.step()
            scheduler.step()
            lrs.append(optimizer.param_groups[0]["lr"])
        fields = [kind, "initial_lr=" + repr(initial_lr)]
        fields += ["%s:%s=%r" % (name, t, values[name]) for name, t, _ in settings]
        lines.append(" ".join(fields) + " | " + " ".join(repr(float(lr)) for lr in lrs))
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lr_reference.txt")
    with open(path, "w") as out:
        out.write("# Generated by make_lr_reference.py from torch.optim.lr_scheduler; do not edit.\n")
        out.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
