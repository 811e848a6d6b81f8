"""Client: one method per TrainingService RPC, numpy arrays in and out.

One channel and one stub per Client. Every call gets a finite deadline (a per-method default, or the `timeout`
argument), carries the bearer token when one is set, and raises a TraindError subclass instead of grpc.RpcError
(streamed responses too, while iterating). Results without tensors are the traind.v1 messages themselves
(traind_client.v1); results with tensors are the small classes below, with numpy arrays.
"""

import base64
import dataclasses
import hashlib
import os
from typing import Dict, List, Optional

import grpc
import numpy as np
from google.protobuf import json_format

from traind_client import _errors, _tensors
from traind_client._proto import training_service_pb2 as pb
from traind_client._proto import training_service_pb2_grpc as pb_grpc

# Seconds a call may take unless the caller says otherwise. Calls that run a model or move whole models wait in
# the daemon's queue behind other sessions' steps, so they get longer.
DEFAULT_TIMEOUT = 60.0
_METHOD_TIMEOUTS = {
    "UploadBlob": 1800.0, "Download": 1800.0, "GenerateArtifacts": 1800.0, "CreateSession": 600.0,
    "TrainStep": 600.0, "OptimizerStep": 600.0, "Eval": 600.0, "LoadCheckpoint": 600.0, "SaveCheckpoint": 600.0,
    "GetParameters": 600.0, "SetParameters": 600.0, "ExportForInference": 600.0, "CloseSession": 600.0,
    "TrainStream": 86400.0, "WatchJob": 86400.0, "Forward": 600.0, "Backward": 600.0,
}
UPLOAD_CHUNK_BYTES = 1 << 20
# Models up to this size travel inline in GenerateArtifacts; larger ones are uploaded once, by digest.
INLINE_MODEL_BYTES = 8 << 20

_EXECUTORS = {"cpu": pb.CPU, "gpu": pb.GPU}


@dataclasses.dataclass
class TrainStepResult:
    """TrainStep's answer: the loss (a float32 value), the fetched outputs by name, and the optimizer's state."""
    loss: float
    outputs: Dict[str, np.ndarray]
    optimizer_step: int
    learning_rate: float
    skipped: bool
    skip_reason: str
    # With examples_per_step: every step's loss, and how many steps were skipped.
    step_losses: List[float] = dataclasses.field(default_factory=list)
    skipped_steps: int = 0
    # With before_step: what each deferred optimizer step answered (traind.v1.OptimizerStepResponse), in order.
    deferred_optimizer_steps: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class ForwardResult:
    """Forward's answer: the outputs by name and, for a training pass, the handle Backward takes."""
    outputs: Dict[str, np.ndarray]
    handle: str = ""
    saved_bytes: int = 0


@dataclasses.dataclass
class BackwardResult:
    """Backward's answer: the gradients of the inputs asked for and, when asked, this pass's gradients of the
    trainable parameters, by name."""
    input_gradients: Dict[str, np.ndarray]
    parameter_gradients: Dict[str, np.ndarray]


@dataclasses.dataclass
class EvalResult:
    loss: float
    outputs: Dict[str, np.ndarray]


@dataclasses.dataclass
class Parameters:
    """GetParameters' answer. Contiguous mode (no names asked): `buffer` (float32, checkpoint order) and, with
    gradients, `gradient_buffer`; by-name mode: `parameters` and `gradients` by name (a frozen parameter's gradient
    is None). `layout` describes either, in order."""
    layout: List[pb.ParameterSlice]
    buffer: Optional[np.ndarray] = None
    gradient_buffer: Optional[np.ndarray] = None
    parameters: Dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    gradients: Dict[str, Optional[np.ndarray]] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class TrainStreamResult:
    sequence: int
    step: TrainStepResult


def _json_ready(value):
    """`value` with raw bytes base64-encoded, as protobuf's JSON form writes bytes fields (ParseDict would
    otherwise base64-decode raw bytes into garbage)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, dict):
        return {key: _json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_ready(item) for item in value]
    return value


def _message(value, message_type, what):
    """A `message_type` from an instance of it or a dict in its JSON form (e.g. {"adamw": {"lr": 0.01}}; bytes
    fields may hold raw bytes)."""
    if value is None:
        return None
    if isinstance(value, message_type):
        return value
    if isinstance(value, dict):
        try:
            return json_format.ParseDict(_json_ready(value), message_type())
        except json_format.ParseError as error:
            raise ValueError(f"{what}: {error}") from None
    raise TypeError(f"{what} must be a {message_type.DESCRIPTOR.full_name} or a dict, got {type(value).__name__}")


def _property_to_wire(name, value, wire):
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"property '{name}' must be an int, float or str, got {type(value).__name__}")
    if isinstance(value, int):
        wire.int_value = value
    elif isinstance(value, float):
        wire.float_value = value
    else:
        wire.string_value = value


def properties_from_wire(properties):
    """{name: int | float | str} of a map<string, Property>."""
    values = {}
    for name in sorted(properties):
        prop = properties[name]
        kind = prop.WhichOneof("value")
        values[name] = getattr(prop, kind) if kind else None
    return values


def _train_step_result(response):
    return TrainStepResult(loss=response.loss, outputs=_tensors.named_from_wire(response.outputs),
                           optimizer_step=response.optimizer_step, learning_rate=response.learning_rate,
                           skipped=response.skipped, skip_reason=response.skip_reason,
                           step_losses=list(response.step_losses), skipped_steps=response.skipped_steps,
                           deferred_optimizer_steps=list(response.deferred_optimizer_steps))


# train_step's before_step names -> traind.v1.DeferredCall.
DEFERRED_CALLS = {"optimizer_step": pb.DEFERRED_OPTIMIZER_STEP, "scheduler_step": pb.DEFERRED_SCHEDULER_STEP,
                  "lazy_reset_grad": pb.DEFERRED_LAZY_RESET_GRAD}


def _deferred_call(call):
    if isinstance(call, str):
        try:
            return DEFERRED_CALLS[call]
        except KeyError:
            raise ValueError(f"unknown deferred call {call!r}; traind defers {', '.join(DEFERRED_CALLS)}") from None
    return int(call)


def _read_source(source):
    """Bytes of `source`: bytes-like, an onnx.ModelProto (anything with SerializeToString) or a file path."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return bytes(source)
    if hasattr(source, "SerializeToString"):
        return source.SerializeToString()
    if isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as file:
            return file.read()
    raise TypeError(f"expected bytes, a path or a protobuf message, got {type(source).__name__}")


class Client:
    """A connection to traind. Make one with traind_client.connect(); close it (or use `with`) when done."""

    def __init__(self, channel, *, metadata=(), timeout=None, max_message_bytes=None):
        self._channel = channel
        self._stub = pb_grpc.TrainingServiceStub(channel)
        self._metadata = tuple(metadata)
        self._timeout = timeout
        self.max_message_bytes = max_message_bytes

    # ---- plumbing ----

    def close(self):
        self._channel.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def _deadline(self, method, timeout):
        if timeout is not None:
            return timeout
        if self._timeout is not None:
            return self._timeout
        return _METHOD_TIMEOUTS.get(method, DEFAULT_TIMEOUT)

    def _call(self, method, request, timeout=None):
        """A unary (or client-streaming, with an iterator of requests) call with errors translated."""
        try:
            return getattr(self._stub, method)(request, timeout=self._deadline(method, timeout),
                                               metadata=self._metadata)
        except grpc.RpcError as error:
            raise _errors.from_rpc_error(error, method) from None

    def _stream(self, method, request, timeout=None):
        """A server-streaming call: yields the responses; errors are raised from the iteration. Closing the
        generator early cancels the call."""
        responses = getattr(self._stub, method)(request, timeout=self._deadline(method, timeout),
                                                metadata=self._metadata)
        try:
            for response in responses:
                yield response
        except grpc.RpcError as error:
            raise _errors.from_rpc_error(error, method) from None
        finally:
            responses.cancel()

    # ---- server information ----

    def get_server_info(self, *, timeout=None):
        """traind.v1.ServerInfo: version, limits, losses, optimizers, executors, implemented RPCs."""
        return self._call("GetServerInfo", pb.GetServerInfoRequest(), timeout)

    # ---- blobs ----

    def upload_blob(self, source, *, description="", chunk_bytes=UPLOAD_CHUNK_BYTES, timeout=None):
        """Streams bytes (or a file, by path) to the daemon; the digest is sent too, so the daemon verifies it.
        Returns traind.v1.UploadBlobResponse (blob_id = the hex SHA-256)."""
        if not 0 < chunk_bytes <= UPLOAD_CHUNK_BYTES:
            raise ValueError(f"chunk_bytes must be in (0, {UPLOAD_CHUNK_BYTES}]")
        data = source if isinstance(source, (str, os.PathLike)) else _read_source(source)
        total, digest = _size_and_digest(data)

        def requests():
            yield pb.UploadBlobRequest(header=pb.BlobHeader(total_bytes=total, sha256_hex=digest,
                                                            description=description))
            for chunk in _chunks(data, chunk_bytes):
                yield pb.UploadBlobRequest(chunk=chunk)

        return self._call("UploadBlob", requests(), timeout)

    def get_blob_info(self, blob_id, *, timeout=None):
        """traind.v1.UploadBlobResponse of a stored blob; NotFoundError when the daemon does not have it."""
        return self._call("GetBlobInfo", pb.GetBlobInfoRequest(blob_id=blob_id), timeout)

    def ensure_blob(self, source, *, description="", timeout=None):
        """The blob id of `source` (bytes or a path), uploading it only if the daemon does not have it yet."""
        data = source if isinstance(source, (str, os.PathLike)) else _read_source(source)
        _, digest = _size_and_digest(data)
        try:
            self.get_blob_info(digest, timeout=timeout)
            return digest
        except _errors.NotFoundError:
            pass
        return self.upload_blob(data, description=description, timeout=timeout).blob_id

    # ---- artifacts ----

    def model_source(self, model, *, external_data_dir=None):
        """A traind.v1.ModelSource for an onnx.ModelProto, bytes or a path: inline when small, else a blob. A model
        whose weights are ONNX external data (models beyond protobuf's 2 GiB) has each data file uploaded as a blob
        of its own, by digest; the files are found beside a model given by path, else in `external_data_dir`."""
        if isinstance(model, pb.ModelSource):
            return model
        if external_data_dir is None and isinstance(model, (str, os.PathLike)):
            external_data_dir = os.path.dirname(os.fspath(model))
        data = _read_source(model)
        source = pb.ModelSource()
        locations = _external_data_locations(data)
        if locations and external_data_dir is None:
            raise ValueError("the model references external data files: give external_data_dir (or a path)")
        for location in locations:
            path = os.path.join(external_data_dir, location)
            source.external_data[location] = self.ensure_blob(path, description=location)
        if len(data) <= INLINE_MODEL_BYTES:
            source.onnx_bytes = data
        else:
            source.blob_id = self.ensure_blob(data, description="model")
        return source

    def generate_artifacts(self, model, *, requires_grad=(), frozen_params=(), loss=None, optimizer=None,
                           additional_output_names=(), prefix="", return_artifact_bytes=False,
                           nominal_checkpoint=False, external_data_dir=None, timeout=None):
        """GenerateArtifacts. `loss` is a traind.v1.LossSpec (or its dict form, e.g. {"builtin": {"type":
        "CROSS_ENTROPY"}}), `optimizer` a traind.v1.OptimizerSpec (or dict). Returns
        traind.v1.GenerateArtifactsResponse; a model whose ops lack gradient rules raises FailedPreconditionError
        whose .detail.coverage says which. External data files: see model_source."""
        request = pb.GenerateArtifactsRequest(
            model=self.model_source(model, external_data_dir=external_data_dir),
            requires_grad=list(requires_grad), frozen_params=list(frozen_params),
            additional_output_names=list(additional_output_names), prefix=prefix,
            return_artifact_bytes=return_artifact_bytes, nominal_checkpoint=nominal_checkpoint)
        if loss is not None:
            request.loss.CopyFrom(_message(loss, pb.LossSpec, "loss"))
        if optimizer is not None:
            request.optimizer.CopyFrom(_message(optimizer, pb.OptimizerSpec, "optimizer"))
        return self._call("GenerateArtifacts", request, timeout)

    def list_artifacts(self, *, timeout=None):
        return list(self._call("ListArtifacts", pb.ListArtifactsRequest(), timeout).artifacts)

    def get_artifact(self, artifact_id, *, timeout=None):
        return self._call("GetArtifact", pb.GetArtifactRequest(artifact_id=artifact_id), timeout)

    def delete_artifact(self, artifact_id, *, timeout=None):
        self._call("DeleteArtifact", pb.DeleteArtifactRequest(artifact_id=artifact_id), timeout)

    def list_checkpoints(self, *, timeout=None):
        return list(self._call("ListCheckpoints", pb.ListCheckpointsRequest(), timeout).checkpoints)

    def delete_checkpoint(self, name, *, timeout=None):
        self._call("DeleteCheckpoint", pb.DeleteCheckpointRequest(name=name), timeout)

    def download(self, *, blob_id=None, artifact_id=None, kind=None, checkpoint_name=None, export=None,
                 chunk_bytes=0, path=None, timeout=None):
        """Something the daemon stores (one of: a blob, an artifact file, a named checkpoint, or an export given as
        {"session_id": ..., "output_names": [...], "external_data_file": ...}), checked against the streamed digest.
        Without `path`: its bytes (one file only). With `path`: written there in pieces, never held in memory (a
        download of several files, an export with its external data file, puts the others beside it under their
        names); nothing is published unless every file arrived intact. Returns the paths written, first first."""
        request = self._download_request(blob_id, artifact_id, kind, checkpoint_name, export, chunk_bytes)
        if path is not None:
            return _download_files(self._stream("Download", request, timeout), os.fspath(path))
        header, parts = None, []
        for response in self._stream("Download", request, timeout):
            if response.HasField("header"):
                if header is not None:
                    raise ValueError("this download holds several files: give `path`")
                header = response.header
            else:
                parts.append(response.chunk)
        content = b"".join(parts)
        if header is None or len(content) != header.total_bytes or \
                hashlib.sha256(content).hexdigest() != header.sha256_hex:
            raise _errors.DataLossError(grpc.StatusCode.DATA_LOSS,
                                        "the download does not match the size and SHA-256 its header announced",
                                        method="Download")
        return content

    def export_model(self, session_id, path, output_names=(), *, external_data=False, timeout=None):
        """Writes the session's inference model to `path` (streamed). `external_data`: the parameters go to
        `<path>.data` beside it as ONNX external data (models beyond protobuf's 2 GiB). Returns the paths written."""
        export = {"session_id": session_id, "output_names": list(output_names)}
        if external_data:
            export["external_data_file"] = os.path.basename(os.fspath(path)) + ".data"
        return self.download(export=export, path=path, timeout=timeout)

    def _download_request(self, blob_id, artifact_id, kind, checkpoint_name, export, chunk_bytes):
        request = pb.DownloadRequest(chunk_bytes=chunk_bytes)
        chosen = [blob_id is not None, artifact_id is not None, checkpoint_name is not None, export is not None]
        if sum(chosen) != 1:
            raise ValueError("download: give exactly one of blob_id, artifact_id (with kind), checkpoint_name, export")
        if blob_id is not None:
            request.blob_id = blob_id
        elif artifact_id is not None:
            request.artifact_file.artifact_id = artifact_id
            request.artifact_file.kind = kind or ""
        elif checkpoint_name is not None:
            request.checkpoint_name = checkpoint_name
        else:
            request.export.CopyFrom(_message(export, pb.ExportForInferenceRequest, "export"))
        return request

    # ---- sessions ----

    def create_session(self, artifact_id=None, *, uploaded=None, checkpoint_name=None, checkpoint_blob_id=None,
                       executor="cpu", device_index=0, scheduler=None, seed=0, display_name="", num_threads=0,
                       checkpoint_policy=None, timeout=None):
        """CreateSession from a GenerateArtifacts artifact_id or from `uploaded` blobs ({"training_model": id,
        "checkpoint": id, "eval_model": id, "optimizer_model": id}, the last two optional). Returns
        traind.v1.Session."""
        request = pb.CreateSessionRequest(device_index=device_index, seed=seed, display_name=display_name,
                                          num_threads=num_threads)
        if (artifact_id is None) == (uploaded is None):
            raise ValueError("create_session: give exactly one of artifact_id and uploaded")
        if artifact_id is not None:
            request.artifact_id = artifact_id
        elif isinstance(uploaded, pb.UploadedArtifacts):
            request.uploaded.CopyFrom(uploaded)
        else:
            unknown = set(uploaded) - {"training_model", "eval_model", "optimizer_model", "checkpoint"}
            if unknown:
                raise ValueError(f"create_session: unknown uploaded artifact kinds {sorted(unknown)}")
            for kind, blob_id in uploaded.items():
                if blob_id:
                    setattr(request.uploaded, kind + "_blob_id", blob_id)
        if checkpoint_name is not None and checkpoint_blob_id is not None:
            raise ValueError("create_session: give at most one of checkpoint_name and checkpoint_blob_id")
        if checkpoint_name is not None:
            request.checkpoint_name = checkpoint_name
        if checkpoint_blob_id is not None:
            request.checkpoint_blob_id = checkpoint_blob_id
        if isinstance(executor, str):
            if executor.lower() not in _EXECUTORS:
                raise ValueError(f"executor must be one of {sorted(_EXECUTORS)}, got {executor!r}")
            executor = _EXECUTORS[executor.lower()]
        request.executor = executor
        if scheduler is not None:
            request.scheduler.CopyFrom(_message(scheduler, pb.SchedulerSpec, "scheduler"))
        if checkpoint_policy is not None:
            request.checkpoint_policy.CopyFrom(_message(checkpoint_policy, pb.CheckpointPolicy, "checkpoint_policy"))
        return self._call("CreateSession", request, timeout)

    def get_session(self, session_id, *, timeout=None):
        return self._call("GetSession", pb.GetSessionRequest(session_id=session_id), timeout)

    def list_sessions(self, *, timeout=None):
        return list(self._call("ListSessions", pb.ListSessionsRequest(), timeout).sessions)

    def close_session(self, session_id, *, timeout=None):
        self._call("CloseSession", pb.CloseSessionRequest(session_id=session_id), timeout)

    # ---- training and evaluation ----

    def train_step(self, session_id, inputs, *, accumulate_only=False, fetch_outputs=(), examples_per_step=0,
                   before_step=(), timeout=None):
        """TrainStep with `inputs` {name: array} (model inputs and targets). By default forward + backward +
        optimizer step + lazy gradient reset; accumulate_only: forward + backward only. examples_per_step > 0 cuts
        the arrays' first axis into slices of that many examples, each a step of its own, all in this one call
        (the result's step_losses has one loss per step, `loss` their example-weighted mean). before_step: calls
        made since the last step and sent with this one ("optimizer_step", "scheduler_step", "lazy_reset_grad"),
        applied in order before its forward pass; none of them is applied when the call is refused before
        computing."""
        request = pb.TrainStepRequest(session_id=session_id, accumulate_only=accumulate_only,
                                      fetch_outputs=list(fetch_outputs), examples_per_step=examples_per_step,
                                      before_step=[_deferred_call(call) for call in before_step])
        _tensors.named_to_wire(inputs, request.inputs)
        return _train_step_result(self._call("TrainStep", request, timeout))

    def train_stream(self, session_id, batches, *, accumulate_only=False, fetch_outputs=(), timeout=None):
        """TrainStream: one TrainStep per {name: array} batch of the iterable `batches`, without a round trip per
        step. Yields a TrainStreamResult per batch, in order."""

        def requests():
            for batch in batches:
                request = pb.TrainStepRequest(session_id=session_id, accumulate_only=accumulate_only,
                                              fetch_outputs=list(fetch_outputs))
                _tensors.named_to_wire(batch, request.inputs)
                yield request

        for response in self._stream("TrainStream", requests(), timeout):
            yield TrainStreamResult(sequence=response.sequence, step=_train_step_result(response.step))

    def optimizer_step(self, session_id, *, timeout=None):
        """Applies the accumulated gradients (ORT's Optimizer.step()); traind.v1.OptimizerStepResponse."""
        return self._call("OptimizerStep", pb.OptimizerStepRequest(session_id=session_id), timeout)

    def lazy_reset_grad(self, session_id, *, timeout=None):
        self._call("LazyResetGrad", pb.LazyResetGradRequest(session_id=session_id), timeout)

    def eval(self, session_id, inputs, *, fetch_outputs=(), timeout=None):
        request = pb.EvalRequest(session_id=session_id, fetch_outputs=list(fetch_outputs))
        _tensors.named_to_wire(inputs, request.inputs)
        response = self._call("Eval", request, timeout)
        return EvalResult(loss=response.loss, outputs=_tensors.named_from_wire(response.outputs))

    def set_learning_rate(self, session_id, learning_rate, *, timeout=None):
        """traind.v1.LearningRate after the change."""
        return self._call("SetLearningRate",
                          pb.SetLearningRateRequest(session_id=session_id, learning_rate=learning_rate), timeout)

    def get_learning_rate(self, session_id, *, timeout=None):
        return self._call("GetLearningRate", pb.GetLearningRateRequest(session_id=session_id), timeout)

    def set_scheduler(self, session_id, scheduler=None, *, initial_learning_rate=None, manual_step=False,
                      timeout=None):
        """Attaches a traind.v1.SchedulerSpec (or dict, e.g. {"linear_warmup_decay": {"warmup_steps": 10,
        "total_steps": 100}}); None removes it. Returns traind.v1.LearningRate."""
        request = pb.SetSchedulerRequest(session_id=session_id, manual_step=manual_step)
        if scheduler is not None:
            request.scheduler.CopyFrom(_message(scheduler, pb.SchedulerSpec, "scheduler"))
        if initial_learning_rate is not None:
            request.initial_learning_rate = initial_learning_rate
        return self._call("SetScheduler", request, timeout).learning_rate

    def scheduler_step(self, session_id, *, metric=None, timeout=None):
        """SchedulerStep; `metric` (lower is better: an epoch's loss, or minus a validation score) drives an
        'adaptive' schedule. Returns traind.v1.LearningRate (with `stalled` once an adaptive schedule gives up)."""
        request = pb.SchedulerStepRequest(session_id=session_id)
        if metric is not None:
            request.metric = float(metric)
        return self._call("SchedulerStep", request, timeout)

    # ---- forward / backward (artifacts generated with loss={"no_loss": {}}) ----

    def forward(self, session_id, inputs, *, training=False, fetch_outputs=(), timeout=None):
        """Forward with `inputs` {name: array}. training=True: the training-mode pass, kept by the daemon under
        the returned handle for backward(); False: inference (no loss targets needed, nothing kept)."""
        request = pb.ForwardRequest(session_id=session_id, training=training, fetch_outputs=list(fetch_outputs))
        _tensors.named_to_wire(inputs, request.inputs)
        response = self._call("Forward", request, timeout)
        return ForwardResult(outputs=_tensors.named_from_wire(response.outputs), handle=response.handle,
                             saved_bytes=response.saved_bytes)

    def backward(self, session_id, handle, output_gradients, *, input_gradients=(), return_parameter_gradients=False,
                 timeout=None):
        """Backward of a forward() handle: `output_gradients` {output: array} (a missing output's gradient is
        zero), the gradients of `input_gradients` (input names) returned; the parameters' gradients accumulate as
        train_step's do (and come back too with return_parameter_gradients)."""
        request = pb.BackwardRequest(session_id=session_id, handle=handle, input_gradients=list(input_gradients),
                                     return_parameter_gradients=return_parameter_gradients)
        _tensors.named_to_wire(output_gradients, request.output_gradients)
        response = self._call("Backward", request, timeout)
        return BackwardResult(input_gradients=_tensors.named_from_wire(response.input_gradients),
                              parameter_gradients=_tensors.named_from_wire(response.parameter_gradients))

    def release_forward(self, session_id, handles, *, timeout=None):
        """Releases forward() handles that will get no backward(); returns how many the daemon held."""
        request = pb.ReleaseForwardRequest(session_id=session_id, handles=list(handles))
        return self._call("ReleaseForward", request, timeout).released

    # ---- checkpoints and properties ----

    def save_checkpoint(self, session_id, name="", *, include_optimizer_state=False, return_bytes=False,
                        timeout=None):
        """Stores the session's checkpoint under `name` and/or returns its bytes; traind.v1.SaveCheckpointResponse."""
        return self._call("SaveCheckpoint", pb.SaveCheckpointRequest(
            session_id=session_id, name=name, include_optimizer_state=include_optimizer_state,
            return_bytes=return_bytes), timeout)

    def load_checkpoint(self, session_id, *, name=None, content=None, blob_id=None, timeout=None):
        """Replaces the session's state with a stored checkpoint, checkpoint bytes or an uploaded blob; returns
        traind.v1.Session. A damaged checkpoint raises DataLossError."""
        request = pb.LoadCheckpointRequest(session_id=session_id)
        if sum(source is not None for source in (name, content, blob_id)) != 1:
            raise ValueError("load_checkpoint: give exactly one of name, content and blob_id")
        if name is not None:
            request.name = name
        elif content is not None:
            request.content = _read_source(content)
        else:
            request.blob_id = blob_id
        return self._call("LoadCheckpoint", request, timeout).session

    def update_properties(self, session_id, set=None, remove=(), *, timeout=None):  # noqa: A002 (the RPC's name)
        """Sets {name: int | float | str} and removes names; returns every property afterwards."""
        request = pb.UpdatePropertiesRequest(session_id=session_id, remove=list(remove))
        for name, value in (set or {}).items():
            _property_to_wire(name, value, request.set[name])
        return properties_from_wire(self._call("UpdateProperties", request, timeout).properties)

    # ---- parameters and export ----

    def get_parameters(self, session_id, names=None, *, trainable_only=False, include_gradients=False,
                       timeout=None):
        """Parameters by name (`names`), or all (trainable_only: the trainable ones) as one float32 buffer."""
        request = pb.GetParametersRequest(session_id=session_id, trainable_only=trainable_only,
                                          names=list(names or ()), include_gradients=include_gradients)
        response = self._call("GetParameters", request, timeout)
        result = Parameters(layout=list(response.layout))
        if response.HasField("buffer"):
            result.buffer = _tensors.from_wire(response.buffer)
        if response.HasField("gradient_buffer"):
            result.gradient_buffer = _tensors.from_wire(response.gradient_buffer)
        result.parameters = _tensors.named_from_wire(response.parameters)
        for gradient in response.gradients:
            empty = gradient.dtype == pb.DATA_TYPE_UNSPECIFIED and not gradient.data
            result.gradients[gradient.name] = None if empty else _tensors.from_wire(gradient)
        return result

    def set_parameters(self, session_id, *, buffer=None, parameters=None, trainable_only=False, timeout=None):
        """Writes one contiguous float32 buffer (trainable_only as in get_parameters) or {name: array}. The daemon
        checks everything before it writes anything."""
        if (buffer is None) == (parameters is None):
            raise ValueError("set_parameters: give exactly one of buffer and parameters")
        request = pb.SetParametersRequest(session_id=session_id, trainable_only=trainable_only)
        if buffer is not None:
            _tensors.to_wire(buffer, out=request.buffer)
        else:
            _tensors.named_to_wire(parameters, request.parameters)
        self._call("SetParameters", request, timeout)

    def export_for_inference(self, session_id, output_names=(), *, timeout=None):
        """The inference model (serialized ONNX) with the session's current parameters."""
        response = self._call("ExportForInference", pb.ExportForInferenceRequest(
            session_id=session_id, output_names=list(output_names)), timeout)
        return response.onnx_model

    # ---- training jobs ----

    def submit_job(self, spec, *, timeout=None):
        """Starts a training job from a traind.v1.JobSpec (or dict); returns traind.v1.Job."""
        return self._call("SubmitJob", _message(spec, pb.JobSpec, "spec"), timeout)

    def get_job(self, job_id, *, timeout=None):
        return self._call("GetJob", pb.GetJobRequest(job_id=job_id), timeout)

    def list_jobs(self, *, timeout=None):
        return list(self._call("ListJobs", pb.ListJobsRequest(), timeout).jobs)

    def cancel_job(self, job_id, *, timeout=None):
        return self._call("CancelJob", pb.CancelJobRequest(job_id=job_id), timeout)

    def watch_job(self, job_id, *, timeout=None):
        """Yields the job now, then every change, until it ends."""
        return self._stream("WatchJob", pb.WatchJobRequest(job_id=job_id), timeout)


def _external_data_locations(model_bytes):
    """The ONNX external data locations a serialized model references (graph, subgraphs, attribute tensors)."""
    if b"location" not in model_bytes:
        return []
    import onnx  # only models that may use external data need it

    model = onnx.ModelProto()
    try:
        model.ParseFromString(model_bytes)
    except Exception:  # the daemon names what is wrong with it
        return []
    locations = []

    def visit_tensor(tensor):
        if tensor.data_location == onnx.TensorProto.EXTERNAL:
            for entry in tensor.external_data:
                if entry.key == "location" and entry.value not in locations:
                    locations.append(entry.value)

    def visit_graph(graph):
        for tensor in graph.initializer:
            visit_tensor(tensor)
        for node in graph.node:
            for attribute in node.attribute:
                if attribute.HasField("t"):
                    visit_tensor(attribute.t)
                for tensor in attribute.tensors:
                    visit_tensor(tensor)
                if attribute.HasField("g"):
                    visit_graph(attribute.g)
                for subgraph in attribute.graphs:
                    visit_graph(subgraph)

    visit_graph(model.graph)
    return locations


class _PendingFile:
    """A downloaded file written to a temporary name, published by rename once everything arrived."""

    def __init__(self, path, header):
        self.path, self.header = path, header
        self.temporary = f"{path}.tmp.{os.getpid()}"
        self.file = open(self.temporary, "wb")
        self.digest, self.received = hashlib.sha256(), 0

    def write(self, chunk):
        self.received += len(chunk)
        if self.received > self.header.total_bytes:
            raise _download_error(f"'{self.path}' is longer than announced")
        self.digest.update(chunk)
        self.file.write(chunk)

    def close(self):
        self.file.flush()
        os.fsync(self.file.fileno())
        self.file.close()
        if self.received != self.header.total_bytes or self.digest.hexdigest() != self.header.sha256_hex:
            raise _download_error(f"'{self.path}' does not match the size and SHA-256 its header announced")

    def discard(self):
        if not self.file.closed:
            self.file.close()
        if os.path.exists(self.temporary):
            os.unlink(self.temporary)


def _download_error(message):
    return _errors.DataLossError(grpc.StatusCode.DATA_LOSS, message, method="Download")


def _download_files(responses, path):
    """Writes a (possibly multi-file) download: the first file at `path`, the others beside it by their plain
    names; published only when all arrived intact, the first last."""
    pending = []
    try:
        for response in responses:
            if response.HasField("header"):
                header = response.header
                if pending:
                    pending[-1].close()
                    name = header.file_name
                    if not name or "/" in name or name in (".", "..") or len(pending) >= max(1, header.file_count):
                        raise _download_error(f"unexpected file '{name}' in the download")
                    target = os.path.join(os.path.dirname(path), name)
                else:
                    target = path
                pending.append(_PendingFile(target, header))
            elif not pending:
                raise _download_error("the download has no header")
            else:
                pending[-1].write(response.chunk)
        if not pending or len(pending) != max(1, pending[0].header.file_count):
            raise _download_error("the download ended before all its files arrived")
        pending[-1].close()
        for item in reversed(pending):
            os.replace(item.temporary, item.path)
        return [item.path for item in pending]
    finally:
        for item in pending:
            item.discard()


def _size_and_digest(data):
    if isinstance(data, (str, os.PathLike)):
        digest, total = hashlib.sha256(), 0
        with open(data, "rb") as file:
            for chunk in iter(lambda: file.read(UPLOAD_CHUNK_BYTES), b""):
                digest.update(chunk)
                total += len(chunk)
        return total, digest.hexdigest()
    return len(data), hashlib.sha256(data).hexdigest()


def _chunks(data, chunk_bytes):
    if isinstance(data, (str, os.PathLike)):
        with open(data, "rb") as file:
            yield from iter(lambda: file.read(chunk_bytes), b"")
    else:
        view = memoryview(data)
        for start in range(0, len(view), chunk_bytes):
            yield bytes(view[start:start + chunk_bytes])
