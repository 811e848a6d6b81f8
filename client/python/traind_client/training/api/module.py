"""Module: onnxruntime.training.api.Module over a traind session.

The Module uploads its models and the state's checkpoint once (by digest) and creates the remote session on
first use, so that an Optimizer made right after the Module joins the same session. An Optimizer made after the
session exists moves it: the session's checkpoint (with optimizer state) starts a new session that has the
optimizer model, and the old one is closed. The session is closed by Module.close() (which brings the final
state back into the CheckpointState) or when the Module is garbage-collected.

ONNX Runtime's Optimizer.step(), LinearLRScheduler.step() and Module.lazy_reset_grad() answer nothing, so the
Module defers them and sends them with its next training step (TrainStep's before_step): the usual loop costs one
round trip a step instead of three or four, with the same results bit for bit. Anything else that touches the
session (eval, parameters, learning rate, checkpoints, export, close) first makes the calls still deferred. A
deferred call's error (or a skipped optimizer step's warning) therefore surfaces at that next call.
"""

import logging
import os
import weakref

import grpc
import numpy as np

from traind_client import _checkpoint, _tensors
from traind_client._errors import TraindError
from traind_client._ortvalue import OrtValue, as_numpy
from traind_client.training import _connection


class SessionOptions:
    """The parts of onnxruntime.SessionOptions a traind session has: intra-op threads (0: the daemon's default)
    and a seed for Dropout masks (0: random)."""

    def __init__(self, intra_op_num_threads=0, seed=0):
        self.intra_op_num_threads = intra_op_num_threads
        self.seed = seed


def _device(device):
    """('cpu', 0) or ('gpu', index) from ORT's device strings: "cpu", "cuda", "cuda:1" (and "gpu", "gpu:1")."""
    kind, _, index = str(device).lower().partition(":")
    if kind == "cpu":
        return "cpu", 0
    if kind in ("cuda", "gpu") and (index == "" or index.isdigit()):
        return "gpu", int(index or 0)
    raise ValueError(f"unknown device {device!r}: use 'cpu', 'gpu[:index]' or 'cuda[:index]'")


# TrainStep's limit on the calls it carries; the Module makes them one by one past it.
_MAX_DEFERRED_CALLS = 16
# Codes of a TrainStep refused before computing: the calls it carried were not applied and stay deferred. Any other
# failure may have come after they were applied; they are then dropped rather than risk applying them twice.
_REFUSED_BEFORE_COMPUTING = frozenset({
    grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND, grpc.StatusCode.FAILED_PRECONDITION,
    grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED,
})


def _warn_if_skipped(step):
    if step.skipped:
        logging.warning("traind skipped optimizer step %d: %s", step.optimizer_step + 1, step.skip_reason)


def _close_quietly(client, session_id):
    try:
        client.close_session(session_id, timeout=10)
    except Exception:  # the daemon may be gone at interpreter exit; the session then ends with it
        pass


class Module:
    """Trains and evaluates the models of generate_artifacts on a CheckpointState, in a traind session."""

    def __init__(self, train_model_uri, state, eval_model_uri=None, device="cpu", session_options=None, *,
                 client=None):
        self._client = client or _connection.default_client()
        self._training_model = _read(train_model_uri)
        self._eval_model = _read(eval_model_uri) if eval_model_uri is not None else None
        self._optimizer_model = None
        self._executor, self._device_index = _device(device)
        options = session_options or SessionOptions()
        self._num_threads = int(getattr(options, "intra_op_num_threads", 0) or 0)
        self._seed = int(getattr(options, "seed", 0) or 0)
        self._state = state
        self._session = None  # traind.v1.Session once created
        self._finalizer = None
        self._deferred = []  # calls answered locally, to be sent with the next training step, in order
        self.training = True
        state._bind(self)

    # ---- the remote session ----

    @property
    def session_id(self):
        """The traind session this Module trains (created now if it does not exist yet)."""
        return self._ensure_session().session_id

    def _live_session(self):
        if self._session is None:
            return None
        self._make_deferred_calls()
        return self._client, self._session.session_id

    def _defer(self, call):
        """Optimizer.step(), LinearLRScheduler.step() and lazy_reset_grad(): sent with the next training step."""
        if len(self._deferred) >= _MAX_DEFERRED_CALLS:
            self._make_deferred_calls()
        self._deferred.append(call)

    def _make_deferred_calls(self):
        """Makes the deferred calls one by one (something other than a training step needs the session now)."""
        if self._session is None:
            return
        session_id = self._session.session_id
        while self._deferred:
            call = self._deferred.pop(0)
            if call == "optimizer_step":
                _warn_if_skipped(self._client.optimizer_step(session_id))
            elif call == "scheduler_step":
                self._client.scheduler_step(session_id)
            else:
                self._client.lazy_reset_grad(session_id)

    def _ensure_session(self, checkpoint_bytes=None, make_deferred_calls=True):
        if self._session is not None:
            if make_deferred_calls:
                self._make_deferred_calls()
            return self._session
        if checkpoint_bytes is None:
            local = self._state._local
            checkpoint_bytes = _checkpoint.serialize_checkpoint(local, include_optimizer_state=True,
                                                                nominal=local.nominal)
        uploaded = {"training_model": self._client.ensure_blob(self._training_model, description="training model"),
                    "checkpoint": self._client.ensure_blob(checkpoint_bytes, description="checkpoint")}
        if self._eval_model is not None:
            uploaded["eval_model"] = self._client.ensure_blob(self._eval_model, description="eval model")
        if self._optimizer_model is not None:
            uploaded["optimizer_model"] = self._client.ensure_blob(self._optimizer_model,
                                                                   description="optimizer model")
        self._session = self._client.create_session(uploaded=uploaded, executor=self._executor,
                                                    device_index=self._device_index, num_threads=self._num_threads,
                                                    seed=self._seed)
        self._finalizer = weakref.finalize(self, _close_quietly, self._client, self._session.session_id)
        return self._session

    def _attach_optimizer(self, optimizer_model):
        """Gives the session an optimizer model (Optimizer's constructor)."""
        self._optimizer_model = optimizer_model
        if self._session is None:
            return
        self._make_deferred_calls()
        moved = self._client.save_checkpoint(self._session.session_id, include_optimizer_state=True,
                                             return_bytes=True).content
        old = self._session
        self._finalizer.detach()
        self._session = None
        try:
            self._ensure_session(checkpoint_bytes=moved)
        except BaseException:
            self._session = old
            self._finalizer = weakref.finalize(self, _close_quietly, self._client, old.session_id)
            raise
        _close_quietly(self._client, old.session_id)

    def close(self):
        """Closes the remote session; the CheckpointState keeps its final state (with optimizer state)."""
        if self._session is None:
            self._deferred.clear()
            self._state._unbind(self, None)
            return
        self._make_deferred_calls()
        data = self._client.save_checkpoint(self._session.session_id, include_optimizer_state=True,
                                            return_bytes=True).content
        self._finalizer.detach()
        self._client.close_session(self._session.session_id)
        self._session = None
        self._state._unbind(self, _checkpoint.parse_checkpoint(data, source="the session's checkpoint"))

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    # ---- ONNX Runtime's Module API ----

    def __call__(self, *user_inputs):
        """A training step (forward + backward, gradients accumulate) in training mode, an evaluation in eval mode.
        Inputs are positional, in input_names() order; returns the outputs (one array, or a tuple), as OrtValues
        when the inputs were OrtValues."""
        session = self._ensure_session(make_deferred_calls=not self.training)
        declared = list(session.training_inputs if self.training else session.eval_inputs)
        if len(user_inputs) != len(declared):
            raise RuntimeError(f"the {'training' if self.training else 'eval'} model takes {len(declared)} inputs "
                               f"({', '.join(i.name for i in declared)}), got {len(user_inputs)}")
        inputs = {info.name: _matching(as_numpy(value), info) for value, info in zip(user_inputs, declared)}
        if self.training:
            names = list(session.output_names)
            carried, self._deferred = self._deferred, []
            try:
                result = self._client.train_step(session.session_id, inputs, accumulate_only=True,
                                                 fetch_outputs=names, before_step=carried)
            except TraindError as error:
                if error.code in _REFUSED_BEFORE_COMPUTING:
                    self._deferred = carried + self._deferred
                raise
            for step in result.deferred_optimizer_steps:
                _warn_if_skipped(step)
        else:
            names = list(session.eval_output_names)
            result = self._client.eval(session.session_id, inputs, fetch_outputs=names)
        outputs = [result.outputs[name] for name in names]
        if any(isinstance(value, OrtValue) for value in user_inputs):
            outputs = [OrtValue(output) for output in outputs]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def train(self, mode=True):
        self.training = mode
        return self

    def eval(self):
        return self.train(False)

    def lazy_reset_grad(self):
        """The next training step overwrites the gradients instead of adding to them (sent with that step)."""
        self._defer("lazy_reset_grad")

    def get_contiguous_parameters(self, trainable_only=False):
        """Every (trainable_only: every trainable) parameter, in checkpoint order, as one float32 OrtValue."""
        return OrtValue(self._client.get_parameters(self._ensure_session().session_id,
                                                    trainable_only=trainable_only).buffer)

    def get_parameters_size(self, trainable_only=True):
        return sum(int(np.prod(p.data.shape, dtype=np.int64)) for p in self._state._local.parameters
                   if p.requires_grad or not trainable_only)

    def copy_buffer_to_parameters(self, buffer, trainable_only=True):
        """Writes a buffer shaped like get_contiguous_parameters(trainable_only) (an OrtValue or numpy array)."""
        self._client.set_parameters(self._ensure_session().session_id, buffer=as_numpy(buffer),
                                    trainable_only=trainable_only)

    def export_model_for_inferencing(self, inference_model_uri, graph_output_names):
        """Writes the inference model: the eval model with the current parameters, keeping `graph_output_names`."""
        if isinstance(graph_output_names, str):
            graph_output_names = [graph_output_names]
        model = self._client.export_for_inference(self._ensure_session().session_id, list(graph_output_names))
        _checkpoint.write_atomically(os.fspath(inference_model_uri), model)

    def input_names(self):
        session = self._ensure_session()
        return [info.name for info in (session.training_inputs if self.training else session.eval_inputs)]

    def output_names(self):
        session = self._ensure_session()
        return list(session.output_names if self.training else session.eval_output_names)


def _read(uri):
    with open(os.fspath(uri), "rb") as file:
        return file.read()


def _matching(array, info):
    """`array` as the declared integer dtype when it is another integer dtype and every value fits (ONNX Runtime's
    CrossEntropyLoss labels are int32; traind's are int64). Anything else goes as it is: the daemon checks."""
    try:
        want = _tensors.numpy_dtype(info.dtype)
    except ValueError:
        return array
    if array.dtype == want or array.dtype.kind not in "iu" or want.kind not in "iu":
        return array
    limits = np.iinfo(want)
    if array.size and (array.min() < limits.min or array.max() > limits.max):
        raise ValueError(f"input '{info.name}' holds values outside {want}")
    return array.astype(want)
