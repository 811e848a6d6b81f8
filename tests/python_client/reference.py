"""Runs engine_reference (the in-process engine) on artifact files and batches, for comparison with the daemon."""

import os
import subprocess

import numpy as np

from daemon import runfile, scratch_dir


def run_engine(artifact_dir, batches, eval_batch=None, scheduler=None, prefix="", threads=2):
    """Trains the artifacts in `artifact_dir` on `batches` (lists of arrays in training-input order) as ONNX
    Runtime's loop does; returns {"losses", "learning_rates", "eval_loss", "eval_outputs", "checkpoint"}."""
    work = scratch_dir("reference")
    for step, batch in enumerate(batches):
        directory = os.path.join(work, "batches", f"step_{step:05d}")
        os.makedirs(directory)
        for k, array in enumerate(batch):
            np.save(os.path.join(directory, f"input_{k}.npy"), np.ascontiguousarray(array))
    args = [runfile("tests/python_client/engine_reference"), f"--artifacts={artifact_dir}", f"--prefix={prefix}",
            f"--batches={os.path.join(work, 'batches')}", f"--out={work}", f"--threads={threads}"]
    if eval_batch is not None:
        directory = os.path.join(work, "eval")
        os.makedirs(directory)
        for k, array in enumerate(eval_batch):
            np.save(os.path.join(directory, f"input_{k}.npy"), np.ascontiguousarray(array))
        args.append(f"--eval={directory}")
    if scheduler is not None:
        args.append("--scheduler=" + ",".join(str(value) for value in scheduler))
    subprocess.run(args, check=True)
    result = {"losses": np.load(os.path.join(work, "losses.npy")),
              "learning_rates": np.load(os.path.join(work, "learning_rates.npy"))}
    if eval_batch is not None:
        result["eval_loss"] = np.load(os.path.join(work, "eval_loss.npy"))
        outputs, k = [], 0
        while os.path.exists(os.path.join(work, f"eval_output_{k}.npy")):
            outputs.append(np.load(os.path.join(work, f"eval_output_{k}.npy")))
            k += 1
        result["eval_outputs"] = outputs
    with open(os.path.join(work, "checkpoint"), "rb") as file:
        result["checkpoint"] = file.read()
    return result
