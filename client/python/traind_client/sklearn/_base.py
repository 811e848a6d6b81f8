"""What the estimators share: the daemon connection, the session a fitted estimator trains and predicts with, and
scikit-learn's epoch loop (shuffling, convergence on the training loss or a validation score, n_iter_no_change).

The loop is control only; every step's arithmetic runs on the daemon: an epoch is one TrainStep call whose
examples the daemon cuts into steps of batch_size examples (examples_per_step), the learning-rate schedules are the
daemon's schedulers (SetScheduler; 'adaptive' gets each epoch's metric through SchedulerStep), penalties are its
optimizer's. A fitted estimator keeps its learned parameters as numpy attributes (coef_, coefs_, ...), so that it
pickles and clones like any scikit-learn estimator; its daemon session is kept beside it (not in __dict__) and is
opened again from those attributes when needed (after unpickling, in another process)."""

import collections
import hashlib
import os
import threading
import warnings
import weakref

import numpy as np
import onnx
from onnx import numpy_helper
from sklearn.exceptions import ConvergenceWarning

import traind_client

# Largest part of an epoch sent in one TrainStep / Forward call (the daemon's default message limit is 64 MiB).
CHUNK_BYTES = 16 << 20

_clients = {}
_clients_lock = threading.Lock()


def client_for(address):
    """One Client per daemon address and process, shared by every estimator."""
    key = (address or os.environ.get("TRAIND_ADDRESS") or traind_client.DEFAULT_ADDRESS, os.getpid())
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            client = _clients[key] = traind_client.connect(key[0])
        return client


class Session:
    """A daemon session an estimator trains and predicts with; closed when the estimator is garbage-collected or
    fitted again."""

    def __init__(self, client, session_id):
        self.client = client
        self.session_id = session_id
        self._finalizer = weakref.finalize(self, Session._close, client, session_id)

    @staticmethod
    def _close(client, session_id):
        try:
            client.close_session(session_id, timeout=10)
        except Exception:  # noqa: BLE001 (the daemon may be gone; the session is dropped with it)
            pass

    def close(self):
        self._finalizer()


class _ArtifactCache:
    """Artifact sets by (graph structure, loss, optimizer, outputs, trainable parameters), per daemon: an estimator
    fitted again on data of the same shape (cross-validation, grid search, scikit-learn's checks) reuses them
    instead of asking GenerateArtifacts again; its own initial weights then go in with SetParameters. The least
    recently used sets beyond `size` are deleted from the daemon."""

    def __init__(self, size=16):
        self._size = size
        self._entries = collections.OrderedDict()  # (client id, key) -> (client, artifact id)
        self._lock = threading.Lock()

    def get(self, client, model, loss, optimizer, outputs, requires_grad):
        structure = onnx.ModelProto()
        structure.CopyFrom(model)
        for tensor in structure.graph.initializer:
            tensor.ClearField("raw_data")
            tensor.ClearField("float_data")
        key = (id(client), hashlib.sha256(structure.SerializeToString() + repr(
            (loss, optimizer, outputs, requires_grad)).encode()).hexdigest())
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key][1], True
        artifacts = client.generate_artifacts(model, loss=loss, optimizer=optimizer, additional_output_names=outputs,
                                              requires_grad=requires_grad)
        evicted = []
        with self._lock:
            self._entries[key] = (client, artifacts.artifact_id)
            while len(self._entries) > self._size:
                evicted.append(self._entries.popitem(last=False)[1])
        for owner, artifact_id in evicted:
            try:
                owner.delete_artifact(artifact_id)
            except traind_client.TraindError:
                pass  # still used by an open session (the daemon keeps it then), or gone with its daemon
        return artifacts.artifact_id, False


_artifacts = _ArtifactCache()

# estimator -> Session: kept outside the estimator's __dict__ (predict must not change it; pickles must not carry it).
_sessions = weakref.WeakKeyDictionary()


class TraindEstimatorMixin:
    """Session handling and the epoch loop for estimators whose subclasses say what to train (_artifacts) and how
    to read the fitted parameters back (_store_parameters / _forward_model)."""

    def _more_tags(self):
        return {
            "_xfail_checks": {
                "check_methods_subset_invariance":
                    "traind computes in float32 and its matrix products (oneDNN sgemm) block rows by the batch's "
                    "size, so a row's result may differ in the last bits (about 1e-6 relative) between a batch and "
                    "a subset of it; the check demands 1e-7",
            },
        }

    # ---- the session ----

    def _session(self):
        return _sessions.get(self)

    def _open_session(self, model, loss, optimizer, *, additional_outputs=(), requires_grad=(), scheduler=None,
                      learning_rate=None, seed=0):
        """GenerateArtifacts (or artifacts made before for the same graph and settings) + CreateSession (+ the
        model's own weights with SetParameters, + SetScheduler); replaces the estimator's previous session."""
        previous = _sessions.pop(self, None)
        if previous is not None:
            previous.close()
        client = client_for(self.address)
        artifact_id, reused = _artifacts.get(client, model, loss, optimizer, list(additional_outputs),
                                             list(requires_grad))
        # One intra-op thread: scikit-learn-sized models train fastest so (an OpenMP team costs more than it
        # saves on them, and waits badly on busy cores), and estimators fitted in parallel share the cores.
        created = client.create_session(artifact_id, seed=seed, num_threads=1, display_name=type(self).__name__)
        session = Session(client, created.session_id)
        if reused:
            client.set_parameters(session.session_id, parameters={
                tensor.name: numpy_helper.to_array(tensor) for tensor in model.graph.initializer
                if tensor.data_type == onnx.TensorProto.FLOAT})
        _sessions[self] = session
        if scheduler is not None:
            client.set_scheduler(session.session_id, scheduler, initial_learning_rate=learning_rate)
        return session

    def _inference_session(self):
        """The fitted estimator's session, opened again from its fitted attributes when there is none."""
        session = self._session()
        if session is None:
            model, loss, optimizer, outputs, requires_grad = self._artifacts_from_fitted()
            session = self._open_session(model, loss, optimizer, additional_outputs=outputs,
                                         requires_grad=requires_grad)
        return session

    def _infer(self, X, output):
        """The model's `output` for every row of X (float32), in chunks the daemon's message limit admits."""
        session = self._inference_session()
        X = np.ascontiguousarray(X, dtype=np.float32)
        rows = max(1, CHUNK_BYTES // max(1, X.itemsize * X[0].size)) if len(X) else 1
        parts = [session.client.forward(session.session_id, {"X": X[start:start + rows]}, fetch_outputs=[output])
                 .outputs[output] for start in range(0, len(X), rows)]
        return np.concatenate(parts) if parts else np.zeros((0,), np.float32)

    def _parameters(self, names):
        session = self._session()
        return session.client.get_parameters(session.session_id, names).parameters

    # ---- training ----

    def _train_epoch(self, session, inputs, batch_size, order):
        """One pass over the examples in `order`: a TrainStep of steps of `batch_size` examples (several calls for
        large data, cut at step boundaries). Returns the mean loss over the examples (before each step's
        update, as scikit-learn's epoch loss)."""
        n = len(order)
        row_bytes = sum(array[0].nbytes for array in inputs.values())
        rows = max(batch_size, (CHUNK_BYTES // max(1, row_bytes)) // batch_size * batch_size)
        total, skipped = 0.0, 0
        for start in range(0, n, rows):
            part = order[start:start + rows]
            batch = {name: np.ascontiguousarray(array[part]) for name, array in inputs.items()}
            result = session.client.train_step(session.session_id, batch, examples_per_step=batch_size)
            total += float(result.loss) * len(part)
            skipped += result.skipped_steps
        self._skipped_steps = skipped
        return total / n

    def _run_epochs(self, session, inputs, *, batch_size, max_iter, shuffle, rng, tol, n_iter_no_change,
                    patience_exceeds, adaptive, validation=None, on_epoch=None):
        """scikit-learn's loop: epochs until max_iter or convergence. Convergence: without validation, the epoch
        loss failing to improve on the best by tol; with `validation` (a callable returning a score, higher is
        better), the score failing to improve by tol; `n_iter_no_change` such epochs in a row (more than that
        with patience_exceeds: MLP's rule). With `adaptive`, the daemon's adaptive schedule takes the metric
        instead and says when it has stalled. Returns (epochs run, losses, validation scores)."""
        n = len(next(iter(inputs.values())))
        losses, scores = [], []
        best_loss, best_score, bad_epochs = np.inf, -np.inf, 0
        epochs = 0
        order = np.arange(n)
        for epoch in range(max_iter):
            if shuffle:  # as sklearn.utils.shuffle(sample_idx, random_state): the previous order, permuted
                order = order[rng.permutation(n)]
            loss = self._train_epoch(session, inputs, batch_size, order)
            losses.append(loss)
            epochs = epoch + 1
            score = validation() if validation is not None else None
            if score is not None:
                scores.append(score)
            if self.verbose:
                print(f"-- Epoch {epochs}, loss: {loss:.6f}" + ("" if score is None else f", score: {score:.6f}"))
            if on_epoch is not None:
                on_epoch(loss, score)
            if self._skipped_steps:
                # The daemon skips a step whose loss or gradient is not finite (the parameters stay finite);
                # scikit-learn would have overflowed here.
                warnings.warn(f"Floating-point under-/overflow occurred at epoch #{epochs}: {self._skipped_steps} "
                              "steps were skipped. Scaling input data with StandardScaler or MinMaxScaler might "
                              "help.", RuntimeWarning)
            if tol is None:
                continue
            metric = -score if score is not None else loss
            if adaptive:
                rate = session.client.scheduler_step(session.session_id, metric=metric)
                if rate.stalled:
                    break
                continue
            if score is not None:
                bad_epochs = bad_epochs + 1 if score < best_score + tol else 0
                best_score = max(best_score, score)
            else:
                bad_epochs = bad_epochs + 1 if not loss <= best_loss - tol else 0  # a non-finite loss is bad too
                best_loss = min(best_loss, loss)
            if bad_epochs > n_iter_no_change if patience_exceeds else bad_epochs >= n_iter_no_change:
                break
        return epochs, losses, scores


def warn_not_converged(message):
    warnings.warn(message, ConvergenceWarning)
