"""LinearLRScheduler: onnxruntime.training.api.LinearLRScheduler over the session's manual scheduler.

As in ONNX Runtime: making it sets the optimizer's initial learning rate to `initial_lr` and the learning rate
to initial_lr * factor(optimizer step count); each step() sets it again at the current step count, where
factor(n) = n / max(1, warmup) during the warm-up, then max(0, (total - n) / max(1, total - warmup)).
(ONNX Runtime 1.19's Python binding passes warmup_step_count and total_step_count to its C++ scheduler in swapped
order; traind follows the documented meaning of the arguments.)
"""


class LinearLRScheduler:
    def __init__(self, optimizer, warmup_step_count, total_step_count, initial_lr):
        self._optimizer = optimizer
        self._optimizer._module._client.set_scheduler(
            optimizer._session_id(),
            {"linear_warmup_decay": {"warmup_steps": int(warmup_step_count), "total_steps": int(total_step_count)}},
            initial_learning_rate=float(initial_lr), manual_step=True)
        # The daemon applies the schedule at the current step count at once, as ONNX Runtime's constructor does.

    def step(self):
        """Sets the learning rate for the optimizer's current step count (in order with the optimizer steps:
        sent with the Module's next training step, as Optimizer.step() is)."""
        self._optimizer._module._defer("scheduler_step")
