#!/usr/bin/python3
"""Reference trajectories of torch.optim.AdamW / torch.optim.SGD (PyTorch 1.13) with and without
torch.nn.utils.clip_grad_norm_, for the optimizer model of GenerateArtifacts (engine/training/artifacts_test.cc).

Never edit the output by hand: regenerate it with
    /usr/bin/python3 tests/golden/make_optimizer_golden.py     # writes tests/golden/data/optimizers/

Two float32 parameters of shapes SHAPES get STEPS steps with fixed pseudo-random gradients and a learning rate
that changes every step (as a scheduler would). Per scenario, with the parameters flattened and concatenated:
    <scenario>/params.npy  float32 [STEPS + 1, 17]: initial values, then the values after each step
    <scenario>/grads.npy   float32 [STEPS, 17]: the gradient of each step (before clipping)
    <scenario>/lrs.npy     float32 [STEPS]: the learning rate of each step
    <scenario>/state.npy   float32 [states, 17]: the optimizer state after the last step (AdamW: exp_avg,
                           exp_avg_sq; SGD with momentum: momentum_buffer)
The hyper-parameters of each scenario are in SCENARIOS (and repeated in the C++ test).
"""
import argparse
import os

import numpy as np
import torch

SHAPES = [(3, 4), (5,)]
STEPS = 4
# Binary fractions, so that the float32 learning-rate input of the optimizer model equals torch's Python float.
LRS = [2.0 ** -7, 2.0 ** -6, 2.0 ** -8, 3 * 2.0 ** -8]
# Gradient magnitudes per step: the clipping scenarios clip some steps and not others.
GRADIENT_SCALES = [1.0, 0.05, 3.0, 0.2]
SCENARIOS = {
    "adamw": dict(kind="adamw", betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, max_norm=0.0),
    "adamw_clip": dict(kind="adamw", betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1, max_norm=0.5),
    "sgd": dict(kind="sgd", momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0, max_norm=0.0),
    "sgd_momentum_dampening": dict(kind="sgd", momentum=0.9, dampening=0.1, nesterov=False, weight_decay=1e-3,
                                   max_norm=0.0),
    "sgd_nesterov_clip": dict(kind="sgd", momentum=0.9, dampening=0.0, nesterov=True, weight_decay=1e-2,
                              max_norm=1.0),
}


def run(spec, generator):
    params = [torch.randn(shape, generator=generator).float().requires_grad_() for shape in SHAPES]
    grads = [[torch.randn(shape, generator=generator).float() * scale for shape in SHAPES]
             for scale in GRADIENT_SCALES]
    if spec["kind"] == "adamw":
        optimizer = torch.optim.AdamW(params, lr=LRS[0], betas=spec["betas"], eps=spec["eps"],
                                      weight_decay=spec["weight_decay"], foreach=False)
    else:
        optimizer = torch.optim.SGD(params, lr=LRS[0], momentum=spec["momentum"], dampening=spec["dampening"],
                                    nesterov=spec["nesterov"], weight_decay=spec["weight_decay"], foreach=False)
    flat = lambda tensors: torch.cat([t.detach().reshape(-1) for t in tensors]).numpy().copy()
    history = [flat(params)]
    for step in range(STEPS):
        for group in optimizer.param_groups:
            group["lr"] = LRS[step]
        for p, g in zip(params, grads[step]):
            p.grad = g.clone()
        if spec["max_norm"] > 0:
            torch.nn.utils.clip_grad_norm_(params, spec["max_norm"])
        optimizer.step()
        history.append(flat(params))
    if spec["kind"] == "adamw":
        names = ["exp_avg", "exp_avg_sq"]
    else:
        names = ["momentum_buffer"] if spec["momentum"] != 0 else []
    state = [flat([optimizer.state[p][name] for p in params]) for name in names]
    return (np.stack(history).astype(np.float32), np.stack([flat(g) for g in grads]).astype(np.float32),
            np.array(LRS, dtype=np.float32), np.array(state, dtype=np.float32).reshape(len(names), sum(int(np.prod(s)) for s in SHAPES)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "data",
                                                      "optimizers"))
    args = parser.parse_args()
    for index, (name, spec) in enumerate(sorted(SCENARIOS.items())):
        generator = torch.Generator().manual_seed(4321 + index)
        params, grads, lrs, state = run(spec, generator)
        directory = os.path.join(args.out, name)
        os.makedirs(directory, exist_ok=True)
        for file, array in [("params", params), ("grads", grads), ("lrs", lrs), ("state", state)]:
            np.save(os.path.join(directory, file + ".npy"), np.ascontiguousarray(array))
        print(f"{name}: final |p| {np.abs(params[-1]).sum():.6f}")


if __name__ == "__main__":
    main()
