#!/usr/bin/python3
"""traind vs PyTorch 1.13 on the BERT-size encoder of bench/encoder.py, side by side in one run: full fine-tuning
and LoRA (rank 8, alpha 16, on q, k, v and o of every layer, plus the classifier head), at several depths.

For each depth the model is exported once (encoder.py export) and adapted with traind_client.lora; then, per repeat
and mode, bench/train_bench (traind in process: forward + loss + backward + AdamW, the daemon's TrainStep) and
encoder.py torch-bench (zero_grad + forward + loss + backward + AdamW on the same module, batch and AdamW settings)
run one after the other, each after waiting for the machine to be quiet. Prints a markdown table: median ms/step,
peak RSS of each process (its whole life: loading, artifacts, training), and the ratios.

    bazel build //bench:train_bench //client/python:traind_client
    /usr/bin/python3 bench/compare_encoder.py --layers 2 4 6 12 --modes full lora --threads 2 --repeats 1
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from compare_train import loadavg, run_measured, wait_quiet  # noqa: E402 (the same measurement as there)

ROOT = os.path.dirname(HERE)


def load_lora():
    """traind_client.lora from the source tree. It needs only onnx and numpy, so it is loaded on its own: the package
    itself needs the gRPC stubs that only Bazel's runfiles put beside it."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "traind_client_lora", os.path.join(ROOT, "client", "python", "traind_client", "lora.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prepare(work, layers, rank, alpha):
    """<work>/L<layers>/: the exported model, its LoRA version and the adapters' names."""
    import onnx
    lora = load_lora()

    directory = os.path.join(work, f"L{layers}")
    lora_model = os.path.join(directory, "model_lora.onnx")
    names_file = os.path.join(directory, "lora_params.json")
    if not os.path.exists(names_file):
        subprocess.run([sys.executable, os.path.join(HERE, "encoder.py"), "export", "--out", directory, "--layers",
                        str(layers)], check=True)
        model = onnx.load(os.path.join(directory, "model.onnx"), load_external_data=False)
        targets = lora.find_targets(model, r"layers\.\d+\.(q|k|v|o)\.weight")
        adapted, trainable = lora.add_lora(model, targets, rank=rank, alpha=alpha)
        onnx.save(adapted, lora_model)
        with open(names_file, "w") as f:
            json.dump(trainable, f)
    with open(names_file) as f:
        return directory, lora_model, json.load(f)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train-bench", default=os.path.join(ROOT, "bazel-bin", "bench", "train_bench"))
    ap.add_argument("--layers", type=int, nargs="+", default=[6])
    ap.add_argument("--modes", nargs="+", default=["full", "lora"], choices=["full", "lora", "head"])
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--alpha", type=float, default=16.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--wait-quiet", type=float, default=30.0)
    ap.add_argument("--work", default=None, help="where the models go (default: a temporary directory)")
    ap.add_argument("--env", nargs="*", default=[], metavar="KEY=VAL", help="environment of both sides")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="encoder_bench.")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads))
    env.update(kv.split("=", 1) for kv in args.env)
    adamw = ["--optimizer=adamw", "--lr=1e-4", "--beta1=0.9", "--beta2=0.999", "--eps=1e-8", "--weight_decay=0.01"]

    rows = {}
    print(f"# start {time.strftime('%H:%M:%S')} load {loadavg()}", file=sys.stderr, flush=True)
    for layers in args.layers:
        directory, lora_model, lora_params = prepare(work, layers, args.rank, args.alpha)
        for repeat in range(args.repeats):
            for mode in args.modes:
                model = lora_model if mode == "lora" else os.path.join(directory, "model.onnx")
                cmd = [args.train_bench, f"--model={model}", f"--input=input_ids={directory}/input_ids.npy",
                       f"--target=labels={directory}/labels.npy", "--loss=cross_entropy", *adamw,
                       f"--threads={args.threads}", f"--warmup={args.warmup}", f"--steps={args.steps}",
                       "--min_time=0", "--json"]
                if mode == "lora":
                    cmd.append("--requires_grad=" + ",".join(lora_params + ["head.weight", "head.bias"]))
                elif mode == "head":
                    cmd.append("--requires_grad=head.weight,head.bias")
                quiet = wait_quiet(args.wait_quiet) if args.wait_quiet > 0 else 0.0
                out, rss, foreign = run_measured(cmd, env)
                ours = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
                tcmd = [sys.executable, os.path.join(HERE, "encoder.py"), "torch-bench", "--dir", directory,
                        "--mode", mode, "--rank", str(args.rank), "--alpha", str(args.alpha), "--threads",
                        str(args.threads), "--steps", str(args.steps), "--warmup", str(args.warmup)]
                tquiet = wait_quiet(args.wait_quiet) if args.wait_quiet > 0 else 0.0
                tout, trss, tforeign = run_measured(tcmd, env)
                theirs = json.loads([line for line in tout.splitlines() if line.startswith("{")][-1])
                row = rows.setdefault((layers, mode), {"ours": [], "theirs": [], "rss": [], "trss": [], "load": []})
                row["ours"].append(ours["median_ms"])
                row["theirs"].append(theirs["median_ms"])
                row["rss"].append(rss)
                row["trss"].append(trss)
                row["load"].append((quiet, foreign, tquiet, tforeign))
                print(f"  L{layers} {mode:5s} rep{repeat}: traind {ours['median_ms']:.1f} ms {rss:.0f} MB, torch "
                      f"{theirs['median_ms']:.1f} ms {trss:.0f} MB, foreign cores {foreign:.2f} / {tforeign:.2f}, "
                      f"load {loadavg()}", file=sys.stderr, flush=True)
    print(f"# end {time.strftime('%H:%M:%S')} load {loadavg()}", file=sys.stderr, flush=True)

    med = statistics.median
    print(f"threads {args.threads}, {args.repeats} repeat(s), {args.steps} timed steps after {args.warmup} warm-up; "
          f"environment for both: {' '.join(args.env) or '(as set)'}")
    print("| layers | training | traind ms/step | PyTorch ms/step | time ratio | traind peak RSS MB | "
          "PyTorch peak RSS MB | memory ratio | foreign cores traind / PyTorch |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for (layers, mode), row in rows.items():
        ours, theirs = med(row["ours"]), med(row["theirs"])
        rss, trss = max(row["rss"]), max(row["trss"])
        label = {"full": "full", "lora": f"LoRA r{args.rank} + head", "head": "head only"}[mode]
        print(f"| {layers} | {label} | {ours:.1f} | {theirs:.1f} | {ours / theirs:.2f}× | {rss:.0f} | {trss:.0f} | "
              f"{rss / trss:.2f}× | {med([l[1] for l in row['load']]):.2f} / {med([l[3] for l in row['load']]):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
