"""onnxblock: build losses (and models) by stacking blocks, as onnxruntime.training.onnxblock does.

A Block passed as generate_artifacts(loss=...) is built on the forward model and sent to the daemon as a
CustomLoss graph; the documented WeightedAverageLoss runs unchanged.
"""

from traind_client.training.onnxblock import blocks, loss
from traind_client.training.onnxblock.blocks import Block
from traind_client.training.onnxblock.model_accessor import base, empty_base
from traind_client.training.onnxblock.onnxblock import ForwardBlock, TrainingBlock

__all__ = ["Block", "ForwardBlock", "TrainingBlock", "base", "blocks", "empty_base", "loss"]
