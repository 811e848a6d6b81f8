"""python3 -m traind_client.fleet {run,status,plot}: federated training from the command line (what
`trainctl fleet` runs).

    python3 -m traind_client.fleet run --fleet fleet.json --artifacts DIR --rounds 10 --state-dir STATE \\
        [--strategy fedavg|fedavgm|fedadam|fedmedian|fedtrimmedavg] [--server-lr X] [--momentum X] [--trim X] \\
        [--clip-norm X] [--local-epochs N] [--batch-size N] [--fit-timeout S] [--min-fit-clients N] \\
        [--min-fit-fraction F] [--fraction-fit F] [--max-concurrency N] [--history FILE.json] [--plot FILE.png]
    python3 -m traind_client.fleet status --fleet fleet.json [--json]
    python3 -m traind_client.fleet plot HISTORY.json OUT.png

Exit codes: 0 done; 2 usage; 3 the run could not start or failed; 4 a local file could not be read or written.
"""

import argparse
import concurrent.futures
import json
import sys

from traind_client import _errors
from traind_client._proto import training_service_pb2 as pb
from traind_client.fleet._devices import load_fleet
from traind_client.fleet._history import History
from traind_client.fleet._run import FederatedRun
from traind_client.fleet.strategies import STRATEGIES, make_strategy


def _run(args):
    devices = load_fleet(args.fleet)
    strategy = make_strategy(args.strategy, server_lr=args.server_lr, momentum=args.momentum, trim=args.trim,
                             clip_norm=args.clip_norm)
    job_options = json.loads(args.job_options) if args.job_options else None
    run = FederatedRun(devices, args.artifacts, rounds=args.rounds, strategy=strategy,
                       local_epochs=args.local_epochs, batch_size=args.batch_size, accuracy=not args.no_accuracy,
                       job_options=job_options, fit_timeout=args.fit_timeout, min_fit_clients=args.min_fit_clients,
                       min_fit_fraction=args.min_fit_fraction, fraction_fit=args.fraction_fit,
                       max_concurrency=args.max_concurrency, state_dir=args.state_dir, seed=args.seed,
                       trainable_only=args.trainable_only)
    history = run.run()
    if args.history:
        history.save_json(args.history)
    if args.plot:
        history.plot(args.plot)
    last = history.rounds[-1] if history.rounds else None
    print(json.dumps({"rounds": len(history.rounds), "last": last and last["global"]}, indent=1))
    return 0


def _status(args):
    devices = load_fleet(args.fleet)

    def probe(device):
        with device.connect() as client:
            try:
                info = client.get_server_info(timeout=args.timeout)
                jobs = client.list_jobs(timeout=args.timeout)
                running = sum(1 for job in jobs if job.state == pb.RUNNING)
                return {"name": device.name, "address": device.address, "ok": True, "version": info.version,
                        "running_jobs": running}
            except _errors.TraindError as error:
                return {"name": device.name, "address": device.address, "ok": False, "error": str(error)}

    with concurrent.futures.ThreadPoolExecutor(max_workers=min(32, len(devices))) as pool:
        rows = list(pool.map(probe, devices))
    if args.json:
        print(json.dumps({"devices": rows}, indent=1))
    else:
        for row in rows:
            detail = f"{row['version']}, {row['running_jobs']} jobs running" if row["ok"] else row["error"]
            print(f"{row['name']:<20} {row['address']:<24} {'up' if row['ok'] else 'DOWN':<5} {detail}")
    return 0 if all(row["ok"] for row in rows) else 1


def _plot(args):
    history = History.load_json(args.history)
    history.plot(args.out)
    print(json.dumps({"plot": args.out, "rounds": len(history.rounds)}))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="traind-fleet", description="Federated training across traind daemons.")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="a federated run (resumes from --state-dir)")
    run.add_argument("--fleet", required=True, help="fleet file (JSON, see traind_client.fleet)")
    run.add_argument("--artifacts", help="directory of the four artifact files (not needed to resume)")
    run.add_argument("--rounds", type=int, required=True)
    run.add_argument("--state-dir", help="the manager's checkpointed run state (resumed when present)")
    run.add_argument("--strategy", default="fedavg", choices=sorted(STRATEGIES))
    run.add_argument("--server-lr", type=float)
    run.add_argument("--momentum", type=float, help="fedavgm")
    run.add_argument("--trim", type=float, help="fedtrimmedavg: fraction trimmed at each end")
    run.add_argument("--clip-norm", type=float, help="clip each device's update to this L2 norm")
    run.add_argument("--local-epochs", type=int, default=1)
    run.add_argument("--batch-size", type=int, default=32)
    run.add_argument("--no-accuracy", action="store_true", help="do not ask devices for eval accuracy")
    run.add_argument("--job-options", help="more JobSpec fields as JSON, e.g. '{\"label_input\": \"labels\"}'")
    run.add_argument("--fit-timeout", type=float, default=600.0, help="seconds per device per round")
    run.add_argument("--min-fit-clients", type=int, default=1)
    run.add_argument("--min-fit-fraction", type=float, default=0.0)
    run.add_argument("--fraction-fit", type=float, default=1.0)
    run.add_argument("--max-concurrency", type=int, default=32)
    run.add_argument("--trainable-only", action="store_true", help="average trainable parameters only")
    run.add_argument("--seed", type=int, default=1)
    run.add_argument("--history", help="write the history as JSON")
    run.add_argument("--plot", help="write loss and accuracy per round as PNG")
    status = commands.add_parser("status", help="every device's version and running jobs (exit 1 if one is down)")
    status.add_argument("--fleet", required=True)
    status.add_argument("--timeout", type=float, default=5.0)
    status.add_argument("--json", action="store_true")
    plot = commands.add_parser("plot", help="a history JSON as PNG")
    plot.add_argument("history")
    plot.add_argument("out")
    args = parser.parse_args(argv)
    try:
        return {"run": _run, "status": _status, "plot": _plot}[args.command](args)
    except OSError as error:
        print(f"traind-fleet: {error}", file=sys.stderr)
        return 4
    except (ValueError, RuntimeError, _errors.TraindError) as error:
        print(f"traind-fleet: {error}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
