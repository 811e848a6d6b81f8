#!/usr/bin/python3
"""Forward-pass time of traind's engine vs onnxruntime-node, measured in one run, as a Markdown table.

  bazel build //bench:eval_bench && bash bench/setup_peers.sh
  /usr/bin/python3 bench/compare_eval.py --models ../shared/bench/models [--threads 2] [--repeats 3]

For each workload, traind (bench/eval_bench) and onnxruntime-node (the peer script
ort_infer_bench.mjs beside the models) time the same model.onnx on the same input with the same thread count,
alternating repeat by repeat (traind, ORT, traind, ORT, ...), each repeat at least --min-time seconds; each
checks its outputs against the PyTorch reference first. The ratio is the median of the per-repeat ratios
traind / ORT: on a shared VM whose speed drifts by 10-20 % from one second to the next, only runs taken side by
side compare.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def run_traind(models, workload, spec, threads, repeats, min_time):
    bench = os.path.join(ROOT, "bazel-bin", "bench", "eval_bench")
    cmd = [bench, "--json", f"--model={os.path.join(models, spec['model'])}",
           f"--input={spec['input']['name']}={os.path.join(models, spec['input']['file'])}",
           f"--reference={spec['output']}={os.path.join(models, workload, 'ref', 'output_fp32.npy')}",
           f"--threads={threads}", f"--repeats={repeats}", f"--min_time={min_time}"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        return None, result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "failed"
    return json.loads(result.stdout.strip().splitlines()[-1]), None


def run_ort(models, workload, threads, repeats, min_time):
    script = os.path.join(models, os.pardir, "ort_infer_bench.mjs")
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        env = dict(os.environ, ORT_NODE_DIR=os.path.join(HERE, ".peers", "ort"))
        cmd = ["node", script, "--models", models, "--only", workload, "--threads", str(threads),
               "--repeats", str(repeats), "--min-time", str(min_time), "--wait-quiet", "10", "--json", out.name]
        result = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if result.returncode != 0:
            return None
        records = [r for r in json.load(open(out.name)) if r["model"].endswith("/model.onnx")]
    medians = sorted(r["median_ms"] for r in records)
    return medians[len(medians) // 2]


def median(values):
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", required=True, help="folder with manifest.json (../shared/bench/models)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5, help="alternating repeats of each side")
    parser.add_argument("--min-time", type=float, default=1.0)
    parser.add_argument("--only", default="mlp,cnn,resnet8,transformer")
    args = parser.parse_args()
    models = os.path.abspath(args.models)
    manifest = json.load(open(os.path.join(models, "manifest.json")))
    rows = []
    for workload in args.only.split(","):
        spec = manifest["workloads"][workload]
        traind_runs, ort_runs, ratios, error = [], [], [], None
        for _ in range(args.repeats):
            traind, error = run_traind(models, workload, spec, args.threads, 1, args.min_time)
            ort_ms = run_ort(models, workload, args.threads, 1, args.min_time)
            if traind is None or ort_ms is None:
                break
            traind_runs.append(traind["median_ms"])
            ort_runs.append(ort_ms)
            ratios.append(traind["median_ms"] / ort_ms)
        if not ratios:
            rows.append(f"| {workload} | {args.threads} | {error or '–'} | {'ORT failed' if error is None else '–'} | – |")
        else:
            rows.append(f"| {workload} | {args.threads} | {median(traind_runs):.3f} | {median(ort_runs):.3f} | "
                        f"{median(ratios):.2f}× ({min(ratios):.2f}–{max(ratios):.2f}) |")
        print(rows[-1], file=sys.stderr, flush=True)
    print("| workload | threads | traind fwd ms (median) | onnxruntime-node fwd ms (median) "
          "| traind / ORT (median of per-repeat ratios; range) |")
    print("|---|---:|---:|---:|---:|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
