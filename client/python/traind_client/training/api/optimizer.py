"""Optimizer: onnxruntime.training.api.Optimizer over the Module's traind session."""

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
        """Applies the accumulated gradients: sent with the Module's next training step, or made before anything
        else reads or changes the session (see module.py). A step whose loss or gradients were not finite is
        skipped by the daemon (parameters and optimizer state unchanged) and logged when its answer comes."""
        self._module._defer("optimizer_step")

    def set_learning_rate(self, learning_rate):
        self._module._client.set_learning_rate(self._session_id(), float(learning_rate))

    def get_learning_rate(self):
        return self._module._client.get_learning_rate(self._session_id()).learning_rate
