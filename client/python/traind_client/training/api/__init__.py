"""onnxruntime.training.api over traind: CheckpointState, Module, Optimizer, LinearLRScheduler."""

from traind_client.training.api.checkpoint_state import CheckpointState
from traind_client.training.api.lr_scheduler import LinearLRScheduler
from traind_client.training.api.module import Module, SessionOptions
from traind_client.training.api.optimizer import Optimizer

__all__ = ["CheckpointState", "LinearLRScheduler", "Module", "Optimizer", "SessionOptions"]
