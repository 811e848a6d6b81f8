"""FederatedRun: one model trained by a fleet of traind daemons, each on data that never leaves it.

For every round: a sample of the devices (fraction_fit) each get the global parameters (SetParameters on the
run's session there), train locally as a training job on their own data (SubmitJob + WatchJob, local_epochs
epochs), and send back their parameters and example counts (GetParameters); the strategy aggregates them with
numpy. Each device has its own deadline per round; a device that is down, answers an error or misses its deadline
is left out of the round, and the round counts only when at least max(min_fit_clients, ceil(min_fit_fraction x
sampled)) devices succeeded (else the global parameters stay). A device that comes back is used again: its
session is found again (sessions are durable on the daemon), a job left over from an interrupted round is
cancelled first, and a daemon that lost its state gets the artifacts and a new session.

The manager's own state (round, global parameters, strategy state, each device's session and job, the history) is
checkpointed under `state_dir` after every round (atomic writes; run.json is written last and names the
parameters file), so a FederatedRun made again over the same state_dir resumes after the last finished round.
"""

import concurrent.futures
import dataclasses
import hashlib
import io
import json
import math
import os
import threading
import time

import numpy as np

from traind_client import _errors
from traind_client._proto import training_service_pb2 as pb
from traind_client.fleet import _files
from traind_client.fleet._history import History
from traind_client.fleet._progress import RoundProgress
from traind_client.fleet.strategies import FedAvg

ARTIFACT_KINDS = ("training_model", "eval_model", "optimizer_model", "checkpoint")
_ARTIFACT_FILES = {"training_model": "training_model.onnx", "eval_model": "eval_model.onnx",
                   "optimizer_model": "optimizer_model.onnx", "checkpoint": "checkpoint"}
_STATE_FORMAT = 1
_FINISHED = {pb.SUCCEEDED, pb.FAILED, pb.CANCELLED, pb.STOPPED_EARLY}
# Short calls that only tidy up (cancelling a job, closing) get at most this long.
_CLEANUP_TIMEOUT = 5.0


class DeviceFailure(Exception):
    """Why a device was left out of a round."""


@dataclasses.dataclass
class _DeviceState:
    session_id: str = ""
    job_id: str = ""
    blob_ids: dict = dataclasses.field(default_factory=dict)  # path -> blob id uploaded to this daemon


def read_artifacts(directory, prefix=""):
    """{kind: bytes} of ONNX Runtime's artifact files in `directory` (traind_client.training.artifacts or
    `trainctl artifacts generate --out DIR` write them). The eval and optimizer models are required: jobs evaluate
    and step."""
    files = {}
    for kind in ARTIFACT_KINDS:
        path = os.path.join(directory, prefix + _ARTIFACT_FILES[kind])
        try:
            with open(path, "rb") as file:
                files[kind] = file.read()
        except OSError as error:
            raise ValueError(f"artifacts: cannot read {path}: {error.strerror}") from None
    return files


class FederatedRun:
    """A federated training run over `devices` (traind_client.fleet.Device, or a fleet file via load_fleet).

    artifacts: a directory of ONNX Runtime's four artifact files, or {kind: bytes}; None only when resuming from
    state_dir. rounds: the total number of rounds (a resumed run continues up to it). strategy: a
    traind_client.fleet.strategies.Strategy (default FedAvg). Local training per round: local_epochs epochs of
    batch_size, shuffled with a seed per round and device; accuracy: ask each device for eval accuracy;
    job_options: more traind.v1.JobSpec fields in dict form (e.g. {"label_input": "labels"}).
    fit_timeout: seconds one device may take for one round (set parameters, train, send parameters back); a
    Device's own fit_timeout overrides it.
    fraction_fit: the share of the devices sampled each round; min_fit_clients / min_fit_fraction: successes needed
    for the round to count. max_concurrency: devices worked on at once (bounded fan-out). evaluate: optional
    callable(params) -> {"loss": ..., "accuracy": ...} run on the aggregated parameters after each round (e.g. on a
    validation set the manager holds). on_event: optional callable(event, **info) for "round_started",
    "job_submitted", "device_done", "round_finished". progress: a bar per round on stderr (or a stream).
    """

    def __init__(self, devices, artifacts=None, *, rounds, strategy=None, local_epochs=1, batch_size=32,
                 accuracy=True, job_options=None, fit_timeout=600.0, min_fit_clients=1, min_fit_fraction=0.0,
                 fraction_fit=1.0, max_concurrency=32, state_dir=None, evaluate=None, trainable_only=False,
                 seed=1, num_threads=0, progress=True, on_event=None, name="fleet"):
        self.devices = list(devices)
        if not self.devices:
            raise ValueError("a federated run needs at least one device")
        if len({device.name for device in self.devices}) != len(self.devices):
            raise ValueError("device names must be unique")
        if rounds < 1 or local_epochs < 1 or batch_size < 1:
            raise ValueError("rounds, local_epochs and batch_size must be at least 1")
        if not 0 < fraction_fit <= 1 or not 0 <= min_fit_fraction <= 1 or min_fit_clients < 1:
            raise ValueError("need 0 < fraction_fit <= 1, 0 <= min_fit_fraction <= 1 and min_fit_clients >= 1")
        if fit_timeout <= 0 or max_concurrency < 1:
            raise ValueError("fit_timeout must be positive and max_concurrency at least 1")
        self.rounds, self.local_epochs, self.batch_size = rounds, local_epochs, batch_size
        self.accuracy, self.job_options = accuracy, dict(job_options or {})
        self.fit_timeout, self.min_fit_clients, self.min_fit_fraction = fit_timeout, min_fit_clients, min_fit_fraction
        self.fraction_fit, self.max_concurrency = fraction_fit, max_concurrency
        self.evaluate, self.trainable_only, self.seed, self.num_threads = evaluate, trainable_only, seed, num_threads
        self.on_event, self.name = on_event, name
        self.progress_stream = None if progress is True else (progress or None)
        self.show_progress = progress is not False and progress is not None
        self.strategy = strategy or FedAvg()
        self.state_dir = state_dir
        self.global_params = None
        self.rounds_done = 0
        self._device_state = {device.name: _DeviceState() for device in self.devices}
        self._clients = {}
        self._lock = threading.Lock()
        self.history = History(self._config())
        resumed = state_dir is not None and os.path.exists(os.path.join(state_dir, "run.json"))
        if resumed:
            self._restore()
        if artifacts is None:
            if not resumed:
                raise ValueError("artifacts are needed unless the run resumes from state_dir")
            artifacts = read_artifacts(os.path.join(state_dir, "artifacts"))
        elif not isinstance(artifacts, dict):
            artifacts = read_artifacts(artifacts)
        missing = set(ARTIFACT_KINDS) - set(artifacts)
        if missing:
            raise ValueError(f"artifacts: missing {sorted(missing)}")
        self.artifacts = {kind: bytes(artifacts[kind]) for kind in ARTIFACT_KINDS}
        if state_dir is not None:
            for kind, content in self.artifacts.items():
                path = os.path.join(state_dir, "artifacts", _ARTIFACT_FILES[kind])
                if not os.path.exists(path):
                    _files.write_atomically(path, content)

    # ---- public ----

    def run(self):
        """Runs the remaining rounds; returns the History (also kept as self.history)."""
        try:
            if self.global_params is None:
                self.global_params = self._initial_parameters()
            while self.rounds_done < self.rounds:
                self._round(self.rounds_done + 1)
        finally:
            self.close()
        return self.history

    def close(self):
        with self._lock:
            clients, self._clients = self._clients, {}
        for client in clients.values():
            client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    # ---- one round ----

    def _round(self, round_number):
        started = time.monotonic()
        sampled = self._sample(round_number)
        self._emit("round_started", round=round_number, devices=[device.name for device in sampled])
        progress = (RoundProgress(round_number, self.rounds, len(sampled), stream=self.progress_stream)
                    if self.show_progress else None)
        global_params = self.global_params
        results = []
        with concurrent.futures.ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(sampled))) as pool:
            futures = [pool.submit(self._fit, device, round_number, global_params) for device in sampled]
            try:
                for future in concurrent.futures.as_completed(futures):
                    result = future.result()
                    results.append(result)
                    if progress:
                        progress.device_done(result["ok"])
                    self._emit("device_done", round=round_number, device=result["name"], result=result)
            except BaseException:
                # Interrupted (Ctrl-C): stop the jobs this round started, so devices do not train for nobody.
                for future in futures:
                    future.cancel()
                self._cancel_round_jobs(sampled)
                raise
        order = {device.name: index for index, device in enumerate(sampled)}
        results.sort(key=lambda result: order[result["name"]])
        successes = [result for result in results if result["ok"]]
        needed = max(self.min_fit_clients, math.ceil(self.min_fit_fraction * len(sampled)))
        aggregated = len(successes) >= needed
        if aggregated:
            self.global_params = self.strategy.aggregate(
                global_params, [(result.pop("params"), result["examples"]) for result in successes])
        for result in results:
            result.pop("params", None)
        record = {"round": round_number, "aggregated": aggregated, "sampled": len(sampled), "needed": needed,
                  "global": self._global_metrics(successes, len(results) - len(successes)), "devices": results}
        if self.evaluate is not None:
            central = self.evaluate(self.global_params.copy())
            record["global"]["central_loss"] = central.get("loss")
            record["global"]["central_accuracy"] = central.get("accuracy")
        record["seconds"] = time.monotonic() - started
        self.history.rounds.append(record)
        self.rounds_done = round_number
        self._checkpoint()
        if progress:
            progress.finish(_summary(record))
        self._emit("round_finished", round=round_number, record=record)

    def _sample(self, round_number):
        count = max(1, math.ceil(self.fraction_fit * len(self.devices)))
        if count >= len(self.devices):
            return list(self.devices)
        rng = np.random.default_rng([self.seed, round_number])
        chosen = sorted(rng.choice(len(self.devices), size=count, replace=False))
        return [self.devices[index] for index in chosen]

    def _fit(self, device, round_number, global_params):
        """One device's round; never raises: failures are recorded as {"ok": False, "error": ...}."""
        started = time.monotonic()
        fit_timeout = device.fit_timeout or self.fit_timeout
        deadline = started + fit_timeout
        result = {"name": device.name, "ok": False, "error": "", "examples": 0, "train_loss": None,
                  "eval_loss": None, "eval_accuracy": None, "steps": 0, "job_id": ""}

        def remaining():
            left = deadline - time.monotonic()
            if left <= 0:
                raise DeviceFailure(f"missed its deadline of {fit_timeout:g} s")
            return left

        state = self._device_state[device.name]
        try:
            client = self._client(device)
            session_id = self._ensure_session(device, client, remaining)
            client.set_parameters(session_id, buffer=global_params, trainable_only=self.trainable_only,
                                  timeout=remaining())
            spec = self._job_spec(device, client, session_id, round_number, remaining)
            job = client.submit_job(spec, timeout=remaining())
            state.job_id = job.job_id
            result["job_id"] = job.job_id
            self._emit("job_submitted", round=round_number, device=device.name, job_id=job.job_id)
            final = job
            try:
                for update in client.watch_job(job.job_id, timeout=remaining()):
                    final = update
            except _errors.DeadlineExceededError:
                raise DeviceFailure(f"missed its deadline of {fit_timeout:g} s") from None
            if final.state not in (pb.SUCCEEDED, pb.STOPPED_EARLY):
                raise DeviceFailure(f"job {job.job_id} ended {pb.JobState.Name(final.state)}: {final.message}")
            params = client.get_parameters(session_id, trainable_only=self.trainable_only, timeout=remaining())
            if params.buffer is None or params.buffer.shape != global_params.shape:
                raise DeviceFailure("the device's parameters do not match the global ones")
            last_eval = final.evals[-1] if final.evals else None
            result.update(ok=True, params=params.buffer, steps=int(final.step),
                          examples=int(final.step) * self.batch_size, train_loss=float(final.loss),
                          eval_loss=float(last_eval.loss) if last_eval else None,
                          eval_accuracy=float(last_eval.accuracy) if last_eval else None)
        except DeviceFailure as failure:
            result["error"] = str(failure)
            self._cancel_job(device, state)
        except _errors.DeadlineExceededError as error:
            result["error"] = f"missed its deadline of {fit_timeout:g} s ({error})"
            self._cancel_job(device, state)
        except _errors.TraindError as error:
            result["error"] = str(error)
            if error.code.name == "UNAVAILABLE":
                # Unreachable: a new channel next round, so a device that comes back is not hidden behind the
                # old channel's reconnect backoff (which grows to minutes).
                self._drop_client(device)
            else:
                self._cancel_job(device, state)
        except (OSError, ValueError) as error:
            result["error"] = f"{type(error).__name__}: {error}"
        result["seconds"] = time.monotonic() - started
        return result

    # ---- devices ----

    def _client(self, device):
        with self._lock:
            client = self._clients.get(device.name)
            if client is None:
                client = self._clients[device.name] = device.connect()
            return client

    def _drop_client(self, device):
        with self._lock:
            client = self._clients.pop(device.name, None)
        if client is not None:
            client.close()

    def _ensure_session(self, device, client, remaining):
        """The run's session on this device: the recorded one when the daemon still has it (a job an earlier,
        interrupted round left running there is cancelled first), else a new one from the artifacts."""
        state = self._device_state[device.name]
        if state.session_id:
            try:
                client.get_session(state.session_id, timeout=remaining())
                if state.job_id:
                    self._finish_old_job(client, state, remaining)
                return state.session_id
            except _errors.NotFoundError:
                state.session_id, state.job_id, state.blob_ids = "", "", {}
        uploaded = {kind: client.ensure_blob(content, description=kind, timeout=remaining())
                    for kind, content in self.artifacts.items()}
        session = client.create_session(uploaded=uploaded, seed=self.seed, num_threads=self.num_threads,
                                        display_name=f"{self.name}:{device.name}", timeout=remaining())
        state.session_id, state.job_id = session.session_id, ""
        return state.session_id

    def _finish_old_job(self, client, state, remaining):
        try:
            job = client.get_job(state.job_id, timeout=remaining())
        except _errors.NotFoundError:
            state.job_id = ""
            return
        if job.state not in _FINISHED:
            client.cancel_job(state.job_id, timeout=remaining())
            for update in client.watch_job(state.job_id, timeout=remaining()):
                if update.state in _FINISHED:
                    break
        state.job_id = ""

    def _cancel_job(self, device, state):
        if not state.job_id:
            return
        try:
            self._client(device).cancel_job(state.job_id, timeout=_CLEANUP_TIMEOUT)
        except _errors.TraindError:
            pass  # down or already finished: the next round cancels it when the device is back

    def _cancel_round_jobs(self, devices):
        for device in devices:
            self._cancel_job(device, self._device_state[device.name])

    def _dataset(self, client, state, spec, remaining):
        if "local_path" in spec:
            return {"local_path": spec["local_path"]}
        path = spec["npz_file"]
        blob_id = state.blob_ids.get(path)
        if blob_id is None:
            blob_id = state.blob_ids[path] = client.ensure_blob(path, description="fleet data", timeout=remaining())
        return {"npz_blob_id": blob_id}

    def _job_spec(self, device, client, session_id, round_number, remaining):
        state = self._device_state[device.name]
        digest = hashlib.sha256(f"{self.seed}/{device.name}/{round_number}".encode()).digest()
        spec = {"session_id": session_id, "train_data": self._dataset(client, state, device.data, remaining),
                "epochs": self.local_epochs, "batch_size": self.batch_size,
                "shuffle_seed": str(int.from_bytes(digest[:7], "little") | 1), "accuracy": self.accuracy,
                "display_name": f"{self.name} round {round_number}"}
        if device.eval is not None:
            if "fraction" in device.eval:
                spec["eval_fraction"] = device.eval["fraction"]
            else:
                spec["eval_data"] = self._dataset(client, state, device.eval, remaining)
        spec.update(self.job_options)
        return spec

    def _initial_parameters(self):
        """The global parameters of round 1: the artifacts' checkpoint, as the first reachable device loads it."""
        errors = []
        for device in self.devices:
            client = self._client(device)
            deadline = time.monotonic() + self.fit_timeout

            def remaining():
                return max(0.001, deadline - time.monotonic())

            try:
                session_id = self._ensure_session(device, client, remaining)
                return client.get_parameters(session_id, trainable_only=self.trainable_only,
                                             timeout=remaining()).buffer.copy()
            except _errors.TraindError as error:
                errors.append(f"{device.name}: {error}")
        raise RuntimeError("no device could load the artifacts:\n  " + "\n  ".join(errors))

    # ---- metrics, events ----

    @staticmethod
    def _global_metrics(successes, failures):
        total = sum(result["examples"] for result in successes)

        def weighted(key):
            pairs = [(result[key], result["examples"]) for result in successes
                     if result[key] is not None and math.isfinite(result[key])]
            weight = sum(examples for _, examples in pairs)
            return sum(value * examples for value, examples in pairs) / weight if weight else None

        return {"train_loss": weighted("train_loss"), "eval_loss": weighted("eval_loss"),
                "eval_accuracy": weighted("eval_accuracy"), "examples": total, "participants": len(successes),
                "failures": failures}

    def _emit(self, event, **info):
        if self.on_event is not None:
            self.on_event(event, **info)

    # ---- the manager's checkpoint ----

    def _config(self):
        return {"format": _STATE_FORMAT, "name": self.name, "strategy": self.strategy.config(),
                "local_epochs": self.local_epochs, "batch_size": self.batch_size,
                "trainable_only": self.trainable_only, "seed": self.seed,
                "devices": [device.name for device in self.devices]}

    def _checkpoint(self):
        if self.state_dir is None:
            return
        arrays = {"global": self.global_params}
        scalars = {}
        for key, value in self.strategy.state.items():
            if isinstance(value, np.ndarray):
                arrays["strategy." + key] = value
            else:
                scalars[key] = value
        buffer = io.BytesIO()
        np.savez(buffer, **arrays)
        params_file = f"global-{self.rounds_done:06d}.npz"
        _files.write_atomically(os.path.join(self.state_dir, params_file), buffer.getvalue())
        document = {
            "format": _STATE_FORMAT, "config": self._config(), "rounds_done": self.rounds_done,
            "params_file": params_file, "params_sha256": hashlib.sha256(buffer.getvalue()).hexdigest(),
            "strategy_scalars": scalars,
            "devices": {name: {"session_id": state.session_id, "job_id": state.job_id}
                        for name, state in self._device_state.items()},
            "history": self.history.to_dict()["rounds"],
        }
        _files.write_atomically(os.path.join(self.state_dir, "run.json"),
                                json.dumps(document, indent=1).encode())
        for entry in os.listdir(self.state_dir):  # older parameter files are no longer named by run.json
            if entry.startswith("global-") and entry.endswith(".npz") and entry != params_file:
                os.unlink(os.path.join(self.state_dir, entry))

    def _restore(self):
        with open(os.path.join(self.state_dir, "run.json")) as file:
            document = json.load(file)
        if document.get("format") != _STATE_FORMAT:
            raise ValueError(f"{self.state_dir}: unknown run state format {document.get('format')}")
        saved = document["config"]
        for key in ("strategy", "trainable_only", "local_epochs", "batch_size"):
            if saved.get(key) != self._config()[key]:
                raise ValueError(f"{self.state_dir} holds a run with {key} = {saved.get(key)!r}, not "
                                 f"{self._config()[key]!r}: resume it with the same settings or use another state_dir")
        with open(os.path.join(self.state_dir, document["params_file"]), "rb") as file:
            content = file.read()
        if hashlib.sha256(content).hexdigest() != document["params_sha256"]:
            raise ValueError(f"{self.state_dir}/{document['params_file']} does not match its digest in run.json")
        with np.load(io.BytesIO(content)) as arrays:
            self.global_params = arrays["global"].astype(np.float32)
            self.strategy.state = {key[len("strategy."):]: arrays[key].copy() for key in arrays.files
                                   if key.startswith("strategy.")}
        self.strategy.state.update(document.get("strategy_scalars", {}))
        self.rounds_done = int(document["rounds_done"])
        for name, saved_state in document.get("devices", {}).items():
            if name in self._device_state:
                self._device_state[name].session_id = saved_state.get("session_id", "")
                self._device_state[name].job_id = saved_state.get("job_id", "")
        self.history = History(self._config(), document.get("history", []))


def _summary(record):
    metrics = record["global"]
    parts = [f"{metrics['participants']} trained"]
    if metrics.get("train_loss") is not None:
        parts.append(f"train loss {metrics['train_loss']:.4f}")
    if metrics.get("eval_accuracy") is not None:
        parts.append(f"eval acc {metrics['eval_accuracy']:.1%}")
    if metrics.get("central_accuracy") is not None:
        parts.append(f"global acc {metrics['central_accuracy']:.1%}")
    if not record["aggregated"]:
        parts.append(f"NOT aggregated (needed {record['needed']})")
    return ", ".join(parts) + f" ({record['seconds']:.1f} s)"
