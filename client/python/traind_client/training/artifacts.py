"""generate_artifacts: onnxruntime.training.artifacts over traind's GenerateArtifacts.

The daemon makes the artifacts (training, eval and optimizer models and the checkpoint); this writes the same
four files ONNX Runtime writes into artifact_directory: <prefix>training_model.onnx, <prefix>eval_model.onnx,
<prefix>optimizer_model.onnx (only with an optimizer) and <prefix>checkpoint (traind's checkpoint format).

Losses: a LossType is the daemon's built-in loss on the loss input (PyTorch 1.13's MSELoss, CrossEntropyLoss with
int64 class ids named "labels", BCEWithLogitsLoss, L1Loss, each with a target named "target" unless stated);
an onnxblock.Block is built on the model and sent as a CustomLoss graph; None makes the loss input itself the
loss (it must be a scalar). Optimizers: OptimType takes ONNX Runtime's defaults (AdamW: lr 1e-3, betas (0.9,
0.999), eps 1e-6, weight_decay 0, bias correction; SGD: lr 1e-3, plain); traind's AdamW(...) and SGD(...) take
PyTorch's defaults and every option, including max_grad_norm clipping. traind's AdamW is PyTorch's
torch.optim.AdamW arithmetic.
"""

import dataclasses
import enum
import hashlib
import logging
import os
import pathlib
from typing import Optional, Tuple

import onnx

from traind_client import v1
from traind_client.training import _connection
from traind_client.training.onnxblock import _loss_graph, blocks
from traind_client.training.onnxblock import loss as loss_blocks

_FILE_NAMES = {"training_model": "training_model.onnx", "eval_model": "eval_model.onnx",
               "optimizer_model": "optimizer_model.onnx", "checkpoint": "checkpoint"}


class LossType(enum.Enum):
    MSELoss = 1
    CrossEntropyLoss = 2
    BCEWithLogitsLoss = 3
    L1Loss = 4


class OptimType(enum.Enum):
    AdamW = 1
    SGD = 2


@dataclasses.dataclass
class AdamW:
    """traind's AdamW (torch.optim.AdamW's defaults and arithmetic), in place of OptimType.AdamW."""
    lr: float = 1e-3
    betas: Tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.01
    max_grad_norm: Optional[float] = None
    bias_correction: bool = True


@dataclasses.dataclass
class SGD:
    """traind's SGD (torch.optim.SGD), in place of OptimType.SGD."""
    lr: float = 0.01
    momentum: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False
    weight_decay: float = 0.0
    max_grad_norm: Optional[float] = None


# ONNX Runtime's optimizer defaults: onnxblock.optim.AdamW() / SGD() and its optimizer state's initial_lr 1e-3.
_ORT_DEFAULTS = {
    OptimType.AdamW: AdamW(lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0),
    OptimType.SGD: SGD(lr=1e-3),
}
_BUILTIN = {LossType.MSELoss: v1.MSE, LossType.CrossEntropyLoss: v1.CROSS_ENTROPY,
            LossType.BCEWithLogitsLoss: v1.BCE_WITH_LOGITS, LossType.L1Loss: v1.L1}
# ONNX Runtime's loss graphs, for LossType losses whose target is itself a model value (loss_input_names with
# more than one name), which the daemon's built-in losses cannot express.
_BUILTIN_BLOCKS = {LossType.MSELoss: loss_blocks.MSELoss, LossType.CrossEntropyLoss: loss_blocks.CrossEntropyLoss,
                   LossType.BCEWithLogitsLoss: loss_blocks.BCEWithLogitsLoss, LossType.L1Loss: loss_blocks.L1Loss}


def _optimizer_spec(optimizer):
    if isinstance(optimizer, OptimType):
        optimizer = _ORT_DEFAULTS[optimizer]
    spec = {}
    if isinstance(optimizer, AdamW):
        spec["adamw"] = {"lr": optimizer.lr, "beta1": optimizer.betas[0], "beta2": optimizer.betas[1],
                         "eps": optimizer.eps, "weight_decay": optimizer.weight_decay,
                         "bias_correction": optimizer.bias_correction}
    elif isinstance(optimizer, SGD):
        spec["sgd"] = {"lr": optimizer.lr, "momentum": optimizer.momentum, "dampening": optimizer.dampening,
                       "nesterov": optimizer.nesterov, "weight_decay": optimizer.weight_decay}
    else:
        raise RuntimeError(f"Unknown optimizer provided {type(optimizer)}. Expected an OptimType, "
                           "traind_client.training.artifacts.AdamW or SGD.")
    if optimizer.max_grad_norm:
        spec["max_grad_norm"] = optimizer.max_grad_norm
    return spec


def _custom_loss(graph):
    return v1.LossSpec(custom=v1.CustomLoss(graph=v1.ModelSource(onnx_bytes=graph.model.SerializeToString()),
                                            target_names=graph.target_names))


def _loss_spec(model, loss, loss_input_names, additional_output_names):
    """(traind.v1.LossSpec, extra additional outputs) for generate_artifacts' `loss`."""
    inputs = list(loss_input_names) if loss_input_names else [output.name for output in model.graph.output]
    if isinstance(loss, LossType):
        if len(inputs) == 1:
            # The daemon's built-in loss: the engine's own PyTorch-exact graph.
            target = "labels" if loss is LossType.CrossEntropyLoss else "target"
            return v1.LossSpec(builtin=v1.BuiltinLoss(type=_BUILTIN[loss], output_name=inputs[0],
                                                      target_name=target)), []
        logging.info("loss inputs %s: building ONNX Runtime's %s graph", inputs, loss.name)
        loss = _BUILTIN_BLOCKS[loss]()
    elif loss is None:
        loss = blocks.PassThrough()
    elif not isinstance(loss, blocks.Block):
        raise RuntimeError(f"Unknown loss provided {type(loss)}. Expected loss to be either one of "
                           "traind_client.training.artifacts.LossType or traind_client.training.onnxblock.Block.")
    graph = _loss_graph.build_loss_graph(model, loss, inputs)
    extra = [name for name in graph.extra_outputs if name not in additional_output_names]
    return _custom_loss(graph), extra


def generate_artifacts(model, requires_grad=None, frozen_params=None, loss=None, optimizer=None,
                       artifact_directory=None, **extra_options):
    """Generates the training artifacts of `model` (an onnx.ModelProto, ONNX bytes or a path) with the daemon and
    writes them into `artifact_directory` (default: the current directory).

    requires_grad: initializers to train (None: every float initializer not frozen; traind's default).
    frozen_params: initializers kept constant. loss: LossType, onnxblock.Block or None. optimizer: OptimType,
    artifacts.AdamW(...), artifacts.SGD(...) or None (no optimizer model is written).
    extra_options: prefix, additional_output_names, nominal_checkpoint, loss_input_names (ONNX Runtime's), and
    client (a traind_client.Client; default: the one traind_client.connect() makes). ort_format and
    custom_op_library are ONNX Runtime features traind does not have.

    Returns the daemon's traind.v1.GenerateArtifactsResponse (artifact_id, gradient coverage, input names).
    """
    unknown = set(extra_options) - {"prefix", "additional_output_names", "nominal_checkpoint", "loss_input_names",
                                    "ort_format", "custom_op_library", "client"}
    if unknown:
        raise RuntimeError(f"Unknown extra options {sorted(unknown)}")
    if extra_options.get("ort_format"):
        raise RuntimeError("ort_format: traind writes ONNX artifacts only (the daemon runs them)")
    if extra_options.get("custom_op_library"):
        raise RuntimeError("custom_op_library: traind runs its own ops only (see GetServerInfo)")
    if requires_grad is not None and frozen_params is not None and set(requires_grad) & set(frozen_params):
        raise RuntimeError("A parameter cannot be frozen and require gradient computation at the same time "
                           f"{set(requires_grad) & set(frozen_params)}")
    additional = extra_options.get("additional_output_names") or []
    if not isinstance(additional, (list, tuple)) or not all(isinstance(name, str) for name in additional):
        raise RuntimeError("additional_output_names must be a list of strings")
    additional = list(additional)
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load_from_string(model) if isinstance(model, bytes) else onnx.load(os.fspath(model))
    loss_spec, extra_outputs = _loss_spec(model, loss, extra_options.get("loss_input_names"), additional)
    prefix = extra_options.get("prefix") or ""
    client = extra_options.get("client") or _connection.default_client()
    response = client.generate_artifacts(
        model, requires_grad=requires_grad or (), frozen_params=frozen_params or (), loss=loss_spec,
        optimizer=_optimizer_spec(optimizer if optimizer is not None else OptimType.AdamW),
        additional_output_names=additional + extra_outputs, prefix=prefix, return_artifact_bytes=True,
        nominal_checkpoint=bool(extra_options.get("nominal_checkpoint")))

    directory = pathlib.Path(artifact_directory) if artifact_directory is not None else pathlib.Path.cwd()
    for artifact in response.files:
        if artifact.kind == "optimizer_model" and optimizer is None:
            continue  # ONNX Runtime writes no optimizer model without an optimizer
        if hashlib.sha256(artifact.content).hexdigest() != artifact.sha256_hex:
            raise RuntimeError(f"the {artifact.kind} the daemon sent does not match its SHA-256")
        path = directory / f"{prefix}{_FILE_NAMES[artifact.kind]}"
        path.write_bytes(artifact.content)
        logging.info("Saved %s to %s", artifact.kind, path)
    return response

