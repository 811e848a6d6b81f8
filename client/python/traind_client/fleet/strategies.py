"""Aggregation strategies of a federated run: numpy on the manager, over flat float32 parameter buffers.

Every strategy sees the round's global parameters and, for each daemon that trained, its parameters after local
training and how many examples it trained on; it returns the next global parameters. Server-side optimizers keep
their state (momentum, Adam moments) in `state`, a dict of numpy arrays and numbers that the run checkpoints with
the global parameters, so a resumed manager continues exactly where it stopped.

    FedAvg          McMahan et al. 2017: the example-weighted mean of the clients' parameters.
    FedAvgM         Hsu et al. 2019: server momentum over the averaged update.
    FedAdam         Reddi et al. 2021 ("Adaptive Federated Optimization"): Adam over the averaged update.
    FedMedian       Yin et al. 2018: the coordinate-wise median of the clients' updates (robust, unweighted).
    FedTrimmedAvg   Yin et al. 2018: the coordinate-wise mean after trimming a fraction at each end (robust).

Update clipping (`clip_norm`, any strategy): each client's update (its parameters minus the global ones) is scaled
down to that L2 norm before aggregation, which bounds what one faulty or hostile device can move.
"""

import math

import numpy as np


def clip_update(update, clip_norm):
    """`update` scaled so that its L2 norm is at most `clip_norm` (unchanged when it already is, or without a bound)."""
    if clip_norm is None:
        return update
    norm = float(np.linalg.norm(update.astype(np.float64)))
    if not math.isfinite(norm):
        raise ValueError("a client's update is not finite")
    if norm <= clip_norm or norm == 0.0:
        return update
    return (update * (clip_norm / norm)).astype(update.dtype)


class Strategy:
    """Base class. Subclasses implement `_aggregate(global_params, updates, weights) -> new global params`, where
    `updates` is a [clients, parameters] float64 array of (clipped) updates and `weights` the examples each trained.
    """

    name = "strategy"

    def __init__(self, *, clip_norm=None):
        if clip_norm is not None and not clip_norm > 0:
            raise ValueError("clip_norm must be positive")
        self.clip_norm = clip_norm
        self.state = {}

    def config(self):
        """The settings that define the strategy (recorded in the run's checkpoint and history)."""
        return {"name": self.name, "clip_norm": self.clip_norm}

    def aggregate(self, global_params, results):
        """The next global parameters from `results`, a non-empty list of (client_params, examples)."""
        if not results:
            raise ValueError("aggregate needs at least one result")
        global64 = np.asarray(global_params, dtype=np.float64)
        updates = np.empty((len(results), global64.size), dtype=np.float64)
        weights = np.empty(len(results), dtype=np.float64)
        for i, (params, examples) in enumerate(results):
            params = np.asarray(params)
            if params.shape != global64.shape:
                raise ValueError(f"a client's parameters have shape {params.shape}, the global ones {global64.shape}")
            if not np.all(np.isfinite(params)):
                raise ValueError("a client's parameters are not finite")
            update = params.astype(np.float64) - global64
            updates[i] = clip_update(update, self.clip_norm)
            weights[i] = float(examples)
        if np.any(weights < 0) or weights.sum() <= 0:
            raise ValueError("the clients' example counts must be positive")
        new = self._aggregate(global64, updates, weights)
        return new.astype(np.float32)

    def _aggregate(self, global_params, updates, weights):
        raise NotImplementedError

    @staticmethod
    def _weighted_mean(updates, weights):
        return (weights[:, None] * updates).sum(axis=0) / weights.sum()


class FedAvg(Strategy):
    """global + the example-weighted mean update (= the weighted mean of the clients' parameters without
    clipping). `server_lr` scales the step (1: plain FedAvg)."""

    name = "fedavg"

    def __init__(self, *, server_lr=1.0, clip_norm=None):
        super().__init__(clip_norm=clip_norm)
        self.server_lr = float(server_lr)

    def config(self):
        return dict(super().config(), server_lr=self.server_lr)

    def _aggregate(self, global_params, updates, weights):
        return global_params + self.server_lr * self._weighted_mean(updates, weights)


class FedAvgM(Strategy):
    """Server momentum: v = momentum * v + mean_update; global += server_lr * v."""

    name = "fedavgm"

    def __init__(self, *, server_lr=1.0, momentum=0.9, clip_norm=None):
        super().__init__(clip_norm=clip_norm)
        if not 0 <= momentum < 1:
            raise ValueError("momentum must be in [0, 1)")
        self.server_lr, self.momentum = float(server_lr), float(momentum)

    def config(self):
        return dict(super().config(), server_lr=self.server_lr, momentum=self.momentum)

    def _aggregate(self, global_params, updates, weights):
        mean = self._weighted_mean(updates, weights)
        velocity = self.state.get("velocity")
        velocity = mean if velocity is None else self.momentum * velocity + mean
        self.state["velocity"] = velocity
        return global_params + self.server_lr * velocity


class FedAdam(Strategy):
    """Adam on the server over the mean update as a pseudo-gradient (Reddi et al., Algorithm 2):
    m = b1 m + (1 - b1) d;  v = b2 v + (1 - b2) d^2;  global += server_lr * m / (sqrt(v) + tau)."""

    name = "fedadam"

    def __init__(self, *, server_lr=0.03, beta1=0.9, beta2=0.99, tau=1e-3, clip_norm=None):
        super().__init__(clip_norm=clip_norm)
        if not (0 <= beta1 < 1 and 0 <= beta2 < 1 and tau > 0):
            raise ValueError("FedAdam needs 0 <= beta1, beta2 < 1 and tau > 0")
        self.server_lr, self.beta1, self.beta2, self.tau = float(server_lr), float(beta1), float(beta2), float(tau)

    def config(self):
        return dict(super().config(), server_lr=self.server_lr, beta1=self.beta1, beta2=self.beta2, tau=self.tau)

    def _aggregate(self, global_params, updates, weights):
        delta = self._weighted_mean(updates, weights)
        m = self.state.get("m", np.zeros_like(delta))
        v = self.state.get("v", np.zeros_like(delta))
        m = self.beta1 * m + (1 - self.beta1) * delta
        v = self.beta2 * v + (1 - self.beta2) * delta * delta
        self.state["m"], self.state["v"] = m, v
        return global_params + self.server_lr * m / (np.sqrt(v) + self.tau)


class FedMedian(Strategy):
    """global + the coordinate-wise median of the updates: a minority of arbitrary updates cannot move it far."""

    name = "fedmedian"

    def _aggregate(self, global_params, updates, weights):
        return global_params + np.median(updates, axis=0)


class FedTrimmedAvg(Strategy):
    """global + the coordinate-wise mean of the updates after dropping the `trim` fraction of the smallest and of the
    largest values of each coordinate (at least one each when trim > 0 and there are 3 or more clients)."""

    name = "fedtrimmedavg"

    def __init__(self, *, trim=0.2, clip_norm=None):
        super().__init__(clip_norm=clip_norm)
        if not 0 <= trim < 0.5:
            raise ValueError("trim must be in [0, 0.5)")
        self.trim = float(trim)

    def config(self):
        return dict(super().config(), trim=self.trim)

    def _aggregate(self, global_params, updates, weights):
        clients = updates.shape[0]
        cut = int(math.floor(self.trim * clients))
        if self.trim > 0 and cut == 0 and clients >= 3:
            cut = 1
        ordered = np.sort(updates, axis=0)
        kept = ordered[cut:clients - cut] if clients - 2 * cut > 0 else ordered
        return global_params + kept.mean(axis=0)


STRATEGIES = {cls.name: cls for cls in (FedAvg, FedAvgM, FedAdam, FedMedian, FedTrimmedAvg)}


def make_strategy(name, **options):
    """A strategy by name (fedavg, fedavgm, fedadam, fedmedian, fedtrimmedavg) with its options."""
    try:
        cls = STRATEGIES[name.lower()]
    except KeyError:
        raise ValueError(f"unknown strategy {name!r}; one of {sorted(STRATEGIES)}") from None
    return cls(**{key: value for key, value in options.items() if value is not None})
