"""Optimizer: onnxruntime.training.api.Optimizer over the Module's traind session."""

import logging
import os


class Optimizer:
    """Updates the Module's parameters from the accumulated gradients with the optimizer model of
    generate_artifacts."""

    def __init__(self, optimizer_uri, module):
        with open(os.fspath(optimizer_uri), "rb") as file:
            model = file.read()
        self._module = module
        module._attach_optimizer(model)

    def _session_id(self):
        return self._module._ensure_session().session_id

    def step(self):
        """Applies the accumulated gradients. A step whose loss or gradients were not finite is skipped by the
        daemon (parameters and optimizer state unchanged) and logged here."""
        result = self._module._client.optimizer_step(self._session_id())
        if result.skipped:
            logging.warning("traind skipped optimizer step %d: %s", result.optimizer_step + 1, result.skip_reason)

    def set_learning_rate(self, learning_rate):
        self._module._client.set_learning_rate(self._session_id(), float(learning_rate))

    def get_learning_rate(self):
        return self._module._client.get_learning_rate(self._session_id()).learning_rate
