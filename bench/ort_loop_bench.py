"""ONNX Runtime's training loop over traind, as its users run it, side by side in one run.

    bazel run -c opt //bench:ort_loop_bench -- [--models ../shared/bench/models] [--workloads mlp,cnn]
        [--threads 2] [--repeats 5] [--min-time 1] [--json]

Per workload of the bench models (AdamW, cross-entropy, artifacts made by traind_client.training.artifacts), three
ways of training the same batch, alternating round by round so that they share the machine's drifts:
  ort        the documented loop through traind_client.training: module(x, y); optimizer.step();
             module.lazy_reset_grad(). The Module defers the two calls that answer nothing and sends them with
             the next step: one TrainStep a step.
  separate   the same loop as one RPC a call (TrainStep accumulate-only, OptimizerStep, LazyResetGrad), what the
             Module did before it deferred them.
  fused      one TrainStep a step doing all three (the low-level client's default).
Reported: median ms/step over the rounds, and the RPCs each way sends a step. The daemon is this build's traind
(127.0.0.1, port 0, GOMP_SPINCOUNT as deploy/run.sh sets it); the client is Debian's python3-grpcio.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from bench_daemon import Daemon, cpu_name


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=os.path.join(os.getcwd(), "..", "shared", "bench", "models"))
    parser.add_argument("--workloads", default="mlp,cnn")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--min-time", type=float, default=1.0, help="seconds per round, at least")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    import numpy as np
    import onnx

    import traind_client
    import traind_client.training
    from traind_client.training import artifacts
    from traind_client.training.api import CheckpointState, Module, Optimizer

    with open(os.path.join(args.models, "manifest.json")) as f:
        manifest = json.load(f)
    daemon = Daemon(args.threads, "//bench:ort_loop_bench")
    client = traind_client.connect(daemon.address)
    traind_client.training.set_default_client(client)
    rows = []
    try:
        for workload in args.workloads.split(","):
            spec = manifest["workloads"][workload]
            if spec["loss"] != "cross_entropy":
                raise SystemExit(f"{workload}: this bench trains cross-entropy workloads")
            x = np.load(os.path.join(args.models, spec["input"]["file"]))
            y = np.load(os.path.join(args.models, spec["target"]["file"]))
            model = onnx.load(os.path.join(args.models, spec["model"]))
            out = tempfile.mkdtemp(prefix=f"ort_loop_bench.{workload}.")
            artifacts.generate_artifacts(model, requires_grad=list(spec["trainable_params"]),
                                         loss=artifacts.LossType.CrossEntropyLoss,
                                         optimizer=artifacts.OptimType.AdamW, artifact_directory=out)
            state = CheckpointState.load_checkpoint(os.path.join(out, "checkpoint"))
            module = Module(os.path.join(out, "training_model.onnx"), state, os.path.join(out, "eval_model.onnx"))
            optimizer = Optimizer(os.path.join(out, "optimizer_model.onnx"), module)
            session = module.session_id
            batch = dict(zip(module.input_names(), (x, y)))
            fetch = module.output_names()  # what module() fetches

            def ort():
                module(x, y)
                optimizer.step()
                module.lazy_reset_grad()

            def separate():
                client.train_step(session, batch, accumulate_only=True, fetch_outputs=fetch)
                client.optimizer_step(session)
                client.lazy_reset_grad(session)

            def fused():
                client.train_step(session, batch)

            ways = {"ort": ort, "separate": separate, "fused": fused}
            calls = {}
            send = client._call
            for name, step in ways.items():  # warm-up, counting the RPCs a step sends
                sent = []

                def counting(method, *call_args, **call_kwargs):
                    sent.append(method)
                    return send(method, *call_args, **call_kwargs)

                client._call = counting
                for _ in range(5):
                    step()
                client._call = send
                calls[name] = len(sent) / 5
                module._make_deferred_calls()
            times = {name: [] for name in ways}
            for _ in range(args.repeats):
                for name, step in ways.items():
                    steps, start = 0, time.perf_counter()
                    while steps < 5 or time.perf_counter() - start < args.min_time:
                        step()
                        steps += 1
                    module._make_deferred_calls()  # the round's last deferred calls, timed with it
                    times[name].append(1e3 * (time.perf_counter() - start) / steps)
            module.close()
            rows.append({"workload": workload, "rpcs_per_step": calls,
                         "ms_per_step": {name: statistics.median(values) for name, values in times.items()}})
    finally:
        traind_client.training.set_default_client(None)
        client.close()
        daemon.stop()

    report = {"cpu": cpu_name(), "cores": os.cpu_count(), "threads": args.threads, "rows": rows}
    if args.json:
        print(json.dumps(report))
        return
    print(f"CPU: {report['cpu']}, {report['cores']} cores; {args.threads} threads a session; "
          f"median of {args.repeats} alternating rounds")
    print("| workload | ORT loop (deferred calls) ms/step | same loop, one RPC a call | one fused TrainStep | "
          "RPCs a step (ORT / separate / fused) |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        ms, rpcs = row["ms_per_step"], row["rpcs_per_step"]
        print(f"| {row['workload']} | {ms['ort']:.3f} | {ms['separate']:.3f} ({ms['separate'] / ms['ort']:.2f}x) | "
              f"{ms['fused']:.3f} | {rpcs['ort']:g} / {rpcs['separate']:g} / {rpcs['fused']:g} |")


if __name__ == "__main__":
    sys.exit(main())
