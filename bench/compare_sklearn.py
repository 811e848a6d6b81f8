"""scikit-learn vs traind_client.sklearn: the same estimators' fit on the same data and settings, side by side in
one run (the comparison onnxcustom published for its ORT-based estimators).

    bazel run -c opt //bench:compare_sklearn -- [--repeats 3] [--sgd-batch-sizes 1,32] [--unset-coretype] [--json]

Workloads (both sides get identical arrays and hyper-parameters, random_state 0):
  sgd  SGDRegressor vs TraindSGDRegressor (defaults: squared error, L2 alpha 1e-4, invscaling eta0 0.01, max_iter
       1000, tol 1e-3) on a standardised 100,000 x 100 make_regression set (20,000 more rows held out). batch_size
       1 is scikit-learn's per-example SGD; other --sgd-batch-sizes rows are traind variants for reference.
  mlp  MLPClassifier vs TraindMLPClassifier (defaults: one hidden layer of 100, relu, adam, batch 200, max_iter
       200) on the digits (sklearn's bundled copy), 80/20 stratified split, pixels / 16.
Reported per row: fit wall time (median over repeats; the two sides alternate within each repeat, so they share
the background load), iterations, final training loss (computed the same way for both from their predictions:
half the mean squared error, or the log loss) and test score (R^2, accuracy). The daemon is this build's traind,
started on 127.0.0.1 port 0 with its own state directory; the CPU and the other processes' load are printed.
"""

import argparse
import json
import os
import statistics
import sys
import time
import warnings

from bench_daemon import Daemon, busy_seconds, cpu_name, process_seconds


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sgd-batch-sizes", default="1,32")
    parser.add_argument("--only", nargs="*", choices=["sgd", "mlp"])
    parser.add_argument("--threads", type=int, default=2, help="the daemon's --default_num_threads")
    parser.add_argument("--unset-coretype", action="store_true",
                        help="run without OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE (they slow scikit-learn's BLAS here)")
    parser.add_argument("--blas-threads", type=int,
                        help="OPENBLAS_NUM_THREADS for scikit-learn's numpy (default: OpenBLAS's, every core)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    # Both change how OpenBLAS loads: set them, then start again with numpy not yet imported.
    env = dict(os.environ)
    if args.unset_coretype:
        env.pop("OPENBLAS_CORETYPE", None)
        env.pop("OPENBLAS_L2_SIZE", None)
    if args.blas_threads:
        env["OPENBLAS_NUM_THREADS"] = str(args.blas_threads)
    if env != dict(os.environ):
        os.execve(sys.executable, [sys.executable] + sys.argv, env)

    import numpy as np
    from sklearn.datasets import load_digits, make_regression
    from sklearn.linear_model import SGDRegressor
    from sklearn.metrics import log_loss
    from sklearn.model_selection import train_test_split
    from sklearn.neural_network import MLPClassifier
    from sklearn.preprocessing import StandardScaler

    from traind_client.sklearn import TraindMLPClassifier, TraindSGDRegressor

    warnings.simplefilter("ignore")
    daemon = Daemon(args.threads, "//bench:compare_sklearn")
    try:
        workloads = []
        if not args.only or "sgd" in args.only:
            X, y = make_regression(120000, 100, n_informative=60, noise=10.0, random_state=0)
            X_train, X_test, y_train, y_test = X[:100000], X[100000:], y[:100000], y[100000:]
            scaler = StandardScaler().fit(X_train)
            X_train, X_test = scaler.transform(X_train), scaler.transform(X_test)
            mean, std = y_train.mean(), y_train.std()
            y_train, y_test = (y_train - mean) / std, (y_test - mean) / std

            def squared(model, X=X_train, y=y_train):
                return 0.5 * float(np.mean((model.predict(X) - y) ** 2))

            rows = [("SGDRegressor (scikit-learn)", lambda: SGDRegressor(random_state=0))]
            for batch in [int(b) for b in args.sgd_batch_sizes.split(",")]:
                rows.append((f"TraindSGDRegressor batch_size={batch}",
                             lambda batch=batch: TraindSGDRegressor(random_state=0, batch_size=batch,
                                                                    address=daemon.address)))
            workloads.append(("sgd", "100,000 x 100 regression", rows, X_train, y_train, X_test, y_test, squared))
        if not args.only or "mlp" in args.only:
            X, y = load_digits(return_X_y=True)
            X_train, X_test, y_train, y_test = train_test_split(X / 16.0, y, test_size=0.2, stratify=y,
                                                                random_state=0)

            def entropy(model, X=X_train, y=y_train):
                return float(log_loss(y, model.predict_proba(X), labels=np.arange(10)))

            rows = [("MLPClassifier (scikit-learn)", lambda: MLPClassifier(random_state=0)),
                    ("TraindMLPClassifier", lambda: TraindMLPClassifier(random_state=0, address=daemon.address))]
            workloads.append(("mlp", "digits (1,437 train / 360 test)", rows, X_train, y_train, X_test, y_test,
                              entropy))

        results = {}
        start_wall, start_busy = time.monotonic(), busy_seconds()
        own_start = process_seconds(os.getpid()) + process_seconds(daemon.process.pid)
        for repeat in range(args.repeats):
            for name, _, rows, X_train, y_train, X_test, y_test, train_loss in workloads:
                order = rows if repeat % 2 == 0 else rows[::-1]
                for label, make in order:
                    model = make()
                    t0 = time.perf_counter()
                    model.fit(X_train, y_train)
                    seconds = time.perf_counter() - t0
                    entry = results.setdefault((name, label), {"seconds": []})
                    entry["seconds"].append(seconds)
                    entry.update(iterations=int(model.n_iter_), loss=train_loss(model),
                                 score=float(model.score(X_test, y_test)))
                    print(f"repeat {repeat + 1} {name:4s} {label:38s} {seconds:8.3f} s", file=sys.stderr)
        wall = time.monotonic() - start_wall
        own = process_seconds(os.getpid()) + process_seconds(daemon.process.pid) - own_start
        others = max(0.0, (busy_seconds() - start_busy - own) / wall)
    finally:
        daemon.stop()

    report = {"cpu": cpu_name(), "cores": os.cpu_count(), "other_processes_cores": round(others, 2),
              "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", "(unset)"),
              "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "(default)"), "rows": []}
    for name, data, rows, *_ in workloads:
        reference = statistics.median(results[(name, rows[0][0])]["seconds"])
        for label, _ in rows:
            entry = results[(name, label)]
            seconds = statistics.median(entry["seconds"])
            report["rows"].append({"workload": name, "data": data, "estimator": label, "fit_seconds": seconds,
                                   "ratio": seconds / reference, "iterations": entry["iterations"],
                                   "train_loss": entry["loss"], "test_score": entry["score"]})
    if args.json:
        print(json.dumps(report))
        return
    print(f"CPU: {report['cpu']} ({report['cores']} cores); other processes used {report['other_processes_cores']} "
          f"cores meanwhile; OPENBLAS_CORETYPE={report['openblas_coretype']}, OPENBLAS_NUM_THREADS="
          f"{report['openblas_threads']} (scikit-learn's numpy); traind sessions: 1 thread; median of {args.repeats} "
          "repeats\n")
    print("| workload | estimator | fit s | vs scikit-learn | iterations | final train loss | test score |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for row in report["rows"]:
        print(f"| {row['data']} | {row['estimator']} | {row['fit_seconds']:.3f} | {row['ratio']:.2f}x | "
              f"{row['iterations']} | {row['train_loss']:.5f} | {row['test_score']:.4f} |")


if __name__ == "__main__":
    main()
