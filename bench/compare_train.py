#!/usr/bin/python3
"""traind vs PyTorch: full training steps on the same workloads, side by side, in one run.

For each repeat and each workload, runs bench/train_bench (traind, in process: forward + loss + backward + AdamW)
and then PyTorch's torch_train_bench.py (zero_grad + forward + loss + backward + AdamW) on the same model, batch
and AdamW settings (models/manifest.json), so both see the same background load; prints a markdown table of the
medians (median over repeats), their ratio, peak memory, and how many cores other processes used meanwhile.

    bazel build -c opt //bench:train_bench
    /usr/bin/python3 bench/compare_train.py --torch-bench ../shared/bench/torch_train_bench.py \\
        --models ../shared/bench/models [--only mlp cnn] [--threads 2] [--repeats 3] [--min-time 3]
    /usr/bin/python3 bench/compare_train.py --check --models ../shared/bench/models   # correctness only
    /usr/bin/python3 bench/compare_train.py --check --device gpu ...   # the same on the OpenCL GPU executor

--check runs 6 AdamW steps with --dump and compares: the first step's loss with ref_loss_fp64, every gradient
with ref/grads/<param>.npy (max error / max |reference| <= --grad-tol) and the 6 losses with the manifest's
adamw_traj float64 (relative error <= --traj-tol); exits 1 on any failure. The models folder is never needed to
build or test traind.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# The reference models and PyTorch peer: ../shared/bench beside the repository (never needed by the product).
SHARED_BENCH = os.path.join(HERE, "..", "..", "shared", "bench")
ORDER = ["mlp", "cnn", "resnet8", "transformer", "linreg"]


def busy_seconds():
    """CPU seconds the whole machine has used so far."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = v
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def wait_quiet(max_wait, threshold=0.15, window=3.0):
    """Waits (up to max_wait s) until other processes use < threshold cores; returns the last window's load."""
    t_end = time.time() + max_wait
    while True:
        b0 = busy_seconds()
        time.sleep(window)
        foreign = (busy_seconds() - b0) / window
        if foreign < threshold or time.time() > t_end:
            return foreign


def run_measured(cmd, env=None):
    """Runs cmd in a fresh wrapper process; returns (stdout, peak RSS MB of cmd and its children, foreign cores).

    Foreign cores: machine CPU time not spent by cmd, per second of its wall time."""
    wrapper = ("import resource, subprocess, sys, time\n"
               "t = time.perf_counter(); p = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, text=True)\n"
               "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
               "sys.stdout.write(p.stdout)\n"
               "print('#RUSAGE', u.ru_maxrss, u.ru_utime + u.ru_stime, time.perf_counter() - t, p.returncode)\n")
    b0 = busy_seconds()
    p = subprocess.run([sys.executable, "-c", wrapper] + cmd, stdout=subprocess.PIPE, text=True, env=env)
    busy = busy_seconds() - b0
    lines = p.stdout.splitlines()
    tag = [l for l in lines if l.startswith("#RUSAGE")][-1].split()
    maxrss_kb, cpu, wall, rc = int(tag[1]), float(tag[2]), float(tag[3]), int(tag[4])
    if rc != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed with exit code {rc}")
    foreign = max(0.0, (busy - cpu) / wall) if wall > 0 else 0.0
    return "\n".join(l for l in lines if not l.startswith("#RUSAGE")), maxrss_kb / 1024.0, foreign


def train_bench_args(models, name, workload, adamw):
    folder = os.path.join(models, name)
    x = workload["input"]
    args = ["--model=" + os.path.join(models, workload["model"]),
            f"--input={x['name']}=" + os.path.join(models, x["file"]),
            "--target=target=" + os.path.join(models, workload["target"]["file"]),
            "--loss=" + workload["loss"], "--optimizer=adamw", f"--lr={adamw['lr']}",
            f"--beta1={adamw['betas'][0]}", f"--beta2={adamw['betas'][1]}", f"--eps={adamw['eps']}",
            f"--weight_decay={adamw['weight_decay']}"]
    assert os.path.isdir(folder), folder
    return args


def npy(path):
    import numpy as np
    return np.load(path)


def check(args, manifest):
    import numpy as np
    failures = 0
    gpu = args.device != "cpu"
    print("| workload | loss[0] rel err | worst grad err / max ref | AdamW trajectory max rel err (6 losses) | ok |"
          + (" transfers per step (in / out) |" if gpu else ""))
    print("|---|---:|---:|---:|---|" + ("---|" if gpu else ""))
    for name in ORDER:
        if args.only and name not in args.only:
            continue
        w = manifest["workloads"][name]
        with tempfile.TemporaryDirectory() as dump:
            cmd = [args.train_bench] + train_bench_args(args.models, name, w, manifest["adamw"]) + [
                f"--threads={args.threads}", "--warmup=0", "--steps=6", "--min_time=0", "--dump=" + dump, "--json",
                f"--device={args.device}"]
            out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
            rec = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
            losses = npy(os.path.join(dump, "losses.npy")).astype(np.float64)
            loss_err = abs(losses[0] - w["ref_loss_fp64"]) / abs(w["ref_loss_fp64"])
            worst = 0.0
            worst_param = ""
            for param in w["trainable_params"]:
                ref = npy(os.path.join(args.models, name, "ref", "grads", param + ".npy")).astype(np.float64)
                got = npy(os.path.join(dump, "grads", param.replace("/", "_") + ".npy")).astype(np.float64)
                if got.shape != ref.shape:
                    raise RuntimeError(f"{name} {param}: shape {got.shape} vs reference {ref.shape}")
                err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-12)
                if err > worst:
                    worst, worst_param = err, param
            traj = np.array(w["adamw_traj"]["float64"])
            traj_err = (np.abs(losses[:len(traj)] - traj) / np.abs(traj)).max()
        ok = loss_err <= 1e-5 and worst <= args.grad_tol and traj_err <= args.traj_tol
        failures += not ok
        transfers = (f" {rec['uploads_per_step']:.0f} ({rec['upload_bytes_per_step']:.0f} B) / "
                     f"{rec['downloads_per_step']:.0f} ({rec['download_bytes_per_step']:.0f} B) |") if gpu else ""
        print(f"| {name} | {loss_err:.2e} | {worst:.2e} ({worst_param}) | {traj_err:.2e} | {'yes' if ok else 'NO'} |"
              + transfers)
    print(f"\ntolerances: loss 1e-5, gradients {args.grad_tol:g} of the largest reference element, "
          f"trajectory {args.traj_tol:g} relative")
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--train-bench", default=os.path.join(HERE, "..", "bazel-bin", "bench", "train_bench"))
    ap.add_argument("--torch-bench", default=os.path.join(SHARED_BENCH, "torch_train_bench.py"),
                    help="PyTorch's torch_train_bench.py (run with this Python)")
    ap.add_argument("--models", default=os.path.join(SHARED_BENCH, "models"))
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--min-time", type=float, default=3.0, help="seconds of timed steps per run, each side")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--wait-quiet", type=float, default=60.0,
                    help="before each run wait up to this many s for other processes to use < 0.15 cores")
    ap.add_argument("--torch-args", default="",
                    help="extra torch_train_bench.py arguments, e.g. \"--foreach --env GOMP_SPINCOUNT=10000\"")
    ap.add_argument("--env", nargs="*", default=[], metavar="KEY=VAL",
                    help="extra environment for both sides, e.g. GOMP_SPINCOUNT=10000 (libgomp reads it at start-up)")
    ap.add_argument("--check", action="store_true", help="compare --dump output with the models' references")
    ap.add_argument("--device", default="cpu",
                    help="with --check: train_bench's --device (gpu[:N]: the OpenCL GPU executor; the table then "
                         "shows the transfers per step)")
    ap.add_argument("--grad-tol", type=float, default=1e-4)
    ap.add_argument("--traj-tol", type=float, default=1e-4)
    args = ap.parse_args()
    args.train_bench = os.path.abspath(args.train_bench)
    manifest = json.load(open(os.path.join(args.models, "manifest.json")))
    if args.check:
        return check(args, manifest)

    names = [n for n in ORDER if not args.only or n in args.only]
    results = {n: {"traind": [], "torch": []} for n in names}
    print(f"# start {time.strftime('%H:%M:%S')} load {loadavg()}", file=sys.stderr, flush=True)
    for r in range(args.repeats):
        for name in names:
            w = manifest["workloads"][name]
            quiet = wait_quiet(args.wait_quiet) if args.wait_quiet > 0 else None
            cmd = [args.train_bench] + train_bench_args(args.models, name, w, manifest["adamw"]) + [
                f"--threads={args.threads}", f"--warmup={args.warmup}", "--steps=20",
                f"--min_time={args.min_time}", "--json"]
            env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), OPENBLAS_NUM_THREADS=str(args.threads))
            env.update(kv.split("=", 1) for kv in args.env)
            out, rss, foreign = run_measured(cmd, env)
            rec = json.loads([l for l in out.splitlines() if l.startswith("{")][-1])
            rec.update(peak_rss_mb_measured=rss, foreign_cores=foreign, foreign_before=quiet)
            results[name]["traind"].append(rec)

            with tempfile.NamedTemporaryFile(suffix=".json") as tmp:
                tcmd = [sys.executable, args.torch_bench, "--threads", str(args.threads), "--repeats", "1",
                        "--only", name, "--models", args.models, "--min-time", str(args.min_time),
                        "--warmup", str(args.warmup), "--wait-quiet", str(args.wait_quiet),
                        "--json", tmp.name] + args.torch_args.split()
                if args.env:
                    tcmd += ["--env"] + args.env
                _, trss, tforeign = run_measured(tcmd)
                trec = json.load(open(tmp.name))[0]
            trec.update(peak_rss_mb_measured=trss, foreign_cores_whole=tforeign)
            results[name]["torch"].append(trec)
            print(f"  rep{r} {name:12s} traind {rec['median_ms']:9.3f} ms  torch {trec['train']['median_ms']:9.3f} ms"
                  f"  foreign {foreign:.2f}/{trec['train']['foreign_cores']:.2f} cores  load {loadavg()}",
                  file=sys.stderr, flush=True)
    print(f"# end {time.strftime('%H:%M:%S')} load {loadavg()}", file=sys.stderr, flush=True)

    med = statistics.median
    print(f"threads {args.threads}, {args.repeats} repeat(s), medians of per-run medians; torch args: "
          f"{args.torch_args or '(default)'}; environment for both: {' '.join(args.env) or '(as set)'}")
    # Each repeat runs traind and then PyTorch within seconds, so a pair shares the machine's state (this VM's
    # speed moves by 30-40 % from one minute to the next); the median of the pairs' ratios is the steadier figure.
    print("| workload | traind ms/step (p10–p90) | torch ms/step (p10–p90) | traind / torch | paired ratio: median "
          "(min–max) | traind peak RSS MB (pool MB) | torch peak RSS MB | foreign cores traind / torch |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name in names:
        t, p = results[name]["traind"], results[name]["torch"]
        tm, pm = med([x["median_ms"] for x in t]), med([x["train"]["median_ms"] for x in p])
        pairs = [a["median_ms"] / b["train"]["median_ms"] for a, b in zip(t, p)]
        print(f"| {name} | {tm:.3f} ({med([x['p10_ms'] for x in t]):.3f}–{med([x['p90_ms'] for x in t]):.3f}) | "
              f"{pm:.3f} ({med([x['train']['p10_ms'] for x in p]):.3f}–{med([x['train']['p90_ms'] for x in p]):.3f}) | "
              f"{tm / pm:.2f}× | {med(pairs):.2f}× ({min(pairs):.2f}–{max(pairs):.2f}) | "
              f"{max(x['peak_rss_mb_measured'] for x in t):.0f} "
              f"({max(x['peak_pool_mb'] for x in t):.1f}) | {max(x['peak_rss_mb_measured'] for x in p):.0f} | "
              f"{med([x['foreign_cores'] for x in t]):.2f} / {med([x['train']['foreign_cores'] for x in p]):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
