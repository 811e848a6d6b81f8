"""The record of a federated run: per round, what each device did and the global metrics; saved as JSON and
plotted as PNG (matplotlib, Agg backend: no display needed)."""

import json
import math
import os

from traind_client.fleet import _files


def _clean(value):
    """JSON-ready: NaN and infinities become null, numpy scalars plain numbers."""
    if isinstance(value, dict):
        return {key: _clean(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(item) for item in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class History:
    """`rounds`: a list of dicts, one per finished round:
        {"round", "aggregated", "sampled", "seconds",
         "global": {"train_loss", "eval_loss", "eval_accuracy", "examples", "participants", "failures",
                    "central_loss", "central_accuracy"},
         "devices": [{"name", "ok", "error", "train_loss", "eval_loss", "eval_accuracy", "examples", "seconds",
                      "job_id", "steps"}]}
    Device eval metrics are the device's locally trained model on its own held-back data; "global" averages them
    weighted by examples; "central_*" is the run's `evaluate` callback on the aggregated parameters, when given."""

    def __init__(self, config=None, rounds=None):
        self.config = dict(config or {})
        self.rounds = list(rounds or [])

    def to_dict(self):
        return _clean({"config": self.config, "rounds": self.rounds})

    def save_json(self, path):
        _files.write_atomically(path, (json.dumps(self.to_dict(), indent=1) + "\n").encode())

    @classmethod
    def load_json(cls, path):
        with open(path) as file:
            document = json.load(file)
        return cls(document.get("config"), document.get("rounds"))

    def series(self, key, where="global"):
        """(rounds, values) of a global metric (or None where missing)."""
        xs, ys = [], []
        for record in self.rounds:
            value = record.get(where, {}).get(key)
            xs.append(record["round"])
            ys.append(float("nan") if value is None else value)
        return xs, ys

    def plot(self, path, title="federated run"):
        """Writes a PNG: loss per round (left) and accuracy per round (right), global and per device."""
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        figure, (loss_axes, accuracy_axes) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=100)
        names = sorted({device["name"] for record in self.rounds for device in record.get("devices", [])})
        for name in names:
            xs, losses, accuracies = [], [], []
            for record in self.rounds:
                for device in record.get("devices", []):
                    if device["name"] == name and device.get("ok"):
                        xs.append(record["round"])
                        losses.append(_number(device.get("eval_loss")))
                        accuracies.append(_number(device.get("eval_accuracy")))
            loss_axes.plot(xs, losses, marker=".", linewidth=0.8, alpha=0.45, label=f"{name} eval")
            accuracy_axes.plot(xs, accuracies, marker=".", linewidth=0.8, alpha=0.45, label=f"{name} eval")
        for key, label, style in (("train_loss", "train (weighted)", "-"), ("eval_loss", "eval (weighted)", "--"),
                                  ("central_loss", "global model, central eval", "-")):
            xs, ys = self.series(key)
            if any(math.isfinite(y) for y in ys):
                loss_axes.plot(xs, ys, style, linewidth=2.2, marker="o", label=label)
        for key, label in (("eval_accuracy", "eval (weighted)"), ("central_accuracy", "global model, central eval")):
            xs, ys = self.series(key)
            if any(math.isfinite(y) for y in ys):
                accuracy_axes.plot(xs, ys, linewidth=2.2, marker="o", label=label)
        for record in self.rounds:
            if not record.get("aggregated", True):
                for axes in (loss_axes, accuracy_axes):
                    axes.axvline(record["round"], color="red", alpha=0.25, linewidth=6)
        loss_axes.set(title=f"{title}: loss", xlabel="round", ylabel="loss")
        accuracy_axes.set(title=f"{title}: accuracy", xlabel="round", ylabel="accuracy", ylim=(0, 1.02))
        for axes in (loss_axes, accuracy_axes):
            axes.grid(alpha=0.3)
            axes.legend(fontsize=7)
        figure.tight_layout()
        temporary = f"{path}.tmp{os.getpid()}.png"
        figure.savefig(temporary, format="png")
        plt.close(figure)
        os.replace(temporary, path)


def _number(value):
    return float("nan") if value is None else value
