"""TraindSGDRegressor and TraindSGDClassifier: scikit-learn's SGDRegressor / SGDClassifier (1.2) trained by traind.

The model is an ONNX Gemm (X @ coef + intercept) built at fit; the loss is scikit-learn's, as an ONNX loss graph;
penalty / alpha / l1_ratio become the daemon optimizer's elastic-net penalty on the coefficients (not the
intercept, as scikit-learn); learning_rate constant / optimal / invscaling / adaptive with eta0 and power_t become
the daemon's schedulers of those names. batch_size=1 (the default) is scikit-learn's per-example SGD: every
example is an optimizer step, all of an epoch's run in one call on the daemon.

Differences from scikit-learn, by design: training runs in float32; `average` (ASGD) and `class_weight` /
`sample_weight` are not offered; a multi-class SGDClassifier trains its one-vs-all problems jointly (one model,
the sum of the binary losses; scikit-learn runs them apart, each stopping on its own), so n_iter_ is the joint
count.
"""

import numbers

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.model_selection import train_test_split
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d

from traind_client.sklearn import _graphs
from traind_client.sklearn._base import TraindEstimatorMixin, warn_not_converged

REGRESSION_LOSSES = ("squared_error", "huber", "epsilon_insensitive", "squared_epsilon_insensitive")
CLASSIFICATION_LOSSES = ("hinge", "log_loss", "modified_huber", "squared_hinge", "perceptron") + REGRESSION_LOSSES
DEFAULT_EPSILON = 0.1


class _BaseTraindSGD(TraindEstimatorMixin, BaseEstimator):
    _parameter_constraints: dict = {
        "penalty": [StrOptions({"l2", "l1", "elasticnet"}), None],
        "alpha": [Interval(numbers.Real, 0, None, closed="left")],
        "l1_ratio": [Interval(numbers.Real, 0, 1, closed="both")],
        "fit_intercept": ["boolean"],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left"), None],
        "shuffle": ["boolean"],
        "verbose": ["verbose"],
        "epsilon": [Interval(numbers.Real, 0, None, closed="left")],
        "random_state": ["random_state"],
        "learning_rate": [StrOptions({"constant", "optimal", "invscaling", "adaptive"})],
        "eta0": [Interval(numbers.Real, 0, None, closed="left")],
        "power_t": [Interval(numbers.Real, None, None, closed="neither")],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(numbers.Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(numbers.Integral, 1, None, closed="left")],
        "warm_start": ["boolean"],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "address": [str, None],
    }

    # ---- what the subclasses define ----

    def _targets(self, y):
        """The loss graph's target [n, n_outputs] (float32) for labels / values y."""
        raise NotImplementedError

    # ---- training ----

    def _check_schedule(self):
        if self.learning_rate != "optimal" and self.eta0 <= 0.0:
            raise ValueError("eta0 must be > 0")
        if self.learning_rate == "optimal" and self.alpha == 0:
            raise ValueError("alpha must be > 0 since learning_rate is 'optimal'. alpha is used to compute the "
                             "optimal learning rate.")

    def _optimizer(self):
        """SGD, scikit-learn's penalty on the coefficients only (the daemon's elastic-net option)."""
        spec = {"sgd": {"lr": float(self.eta0) if self.learning_rate != "optimal" else 1.0}}
        if self.penalty is not None and self.alpha > 0:
            l1_ratio = {"l2": 0.0, "l1": 1.0, "elasticnet": float(self.l1_ratio)}[self.penalty]
            spec["penalty"] = {"alpha": float(self.alpha), "l1_ratio": l1_ratio, "parameters": ["coef"]}
        return spec

    def _scheduler(self):
        """The daemon's scheduler for learning_rate (t counts examples: scale = examples per step)."""
        scale = float(self.batch_size)
        if self.learning_rate == "optimal":
            return {"optimal": {"alpha": float(self.alpha), "scale": scale}}
        if self.learning_rate == "invscaling":
            return {"inverse_scaling": {"power_t": float(self.power_t), "offset": 1.0, "scale": scale, "interval": 1}}
        if self.learning_rate == "adaptive":
            return {"adaptive": {"patience": int(self.n_iter_no_change), "tol": float(self.tol or 0.0),
                                 "factor": 0.2, "min_lr": 1e-6}}
        return {"constant": {}}

    def _loss(self, n_outputs):
        graph = _graphs.sgd_loss_graph(self.loss, "decision", n_outputs, epsilon=float(self.epsilon))
        return {"custom": {"graph": {"onnx_bytes": graph.SerializeToString()}, "target_names": [_graphs.TARGET]}}

    def _requires_grad(self):
        return ["coef", "intercept"] if self.fit_intercept else ["coef"]

    def _artifacts_from_fitted(self):
        coef = np.asarray(self.coef_, np.float32).reshape(self._n_model_outputs(), -1).T
        model = _graphs.linear_model(coef, np.asarray(self.intercept_, np.float32).reshape(-1))
        return model, self._loss(coef.shape[1]), self._optimizer(), (), self._requires_grad()

    def _fit(self, X, targets, *, incremental, max_iter, validation_data=None):
        self._check_schedule()
        n_outputs = targets.shape[1]
        fresh = self._session() is None or not incremental
        if fresh:
            if hasattr(self, "coef_"):  # warm start, coef_init, or a partial_fit after a fit
                coef = np.asarray(self.coef_, np.float32).reshape(n_outputs, -1).T
                intercept = np.asarray(self.intercept_, np.float32).reshape(-1)
            else:
                coef = np.zeros((X.shape[1], n_outputs), np.float32)
                intercept = np.zeros(n_outputs, np.float32)
            self._open_session(_graphs.linear_model(coef, intercept), self._loss(n_outputs), self._optimizer(),
                               requires_grad=self._requires_grad(), scheduler=self._scheduler(),
                               learning_rate=float(self.eta0) if self.learning_rate != "optimal" else 1.0, seed=1)
        session = self._session()
        validation = None
        if validation_data is not None:
            X_val, y_val = validation_data
            validation = lambda: self._validation_score(X_val, y_val)  # noqa: E731
        adaptive = self.learning_rate == "adaptive"
        epochs, losses, _ = self._run_epochs(
            session, {"X": np.ascontiguousarray(X, np.float32), _graphs.TARGET: targets},
            batch_size=int(self.batch_size), max_iter=max_iter,
            shuffle=self.shuffle, rng=self._rng, tol=self.tol, n_iter_no_change=self.n_iter_no_change,
            patience_exceeds=False, adaptive=adaptive, validation=validation,
            on_epoch=(lambda loss, score: self._store_parameters()) if validation is not None else None)
        self._store_parameters()
        self.n_iter_ = epochs
        self.t_ = getattr(self, "t_", 1.0) if incremental else 1.0
        self.t_ += epochs * X.shape[0]
        if not incremental and self.tol is not None and epochs == max_iter:
            warn_not_converged("Maximum number of iteration reached before convergence. Consider increasing "
                               "max_iter to improve the fit.")
        return self

    def _start_fit(self, coef_init, intercept_init, n_features, n_outputs):
        """fit's start: coef_init / intercept_init, else warm_start keeps the fitted coefficients, else none."""
        self._rng = check_random_state(self.random_state)
        if coef_init is not None:
            coef = np.asarray(coef_init, np.float64).reshape(n_outputs, n_features)
            intercept = np.zeros(n_outputs) if intercept_init is None else np.asarray(intercept_init, np.float64)
            self._set_coefficients(coef, intercept.reshape(n_outputs))
        elif not self.warm_start or np.asarray(getattr(self, "coef_", ())).size != n_outputs * n_features:
            for attribute in ("coef_", "intercept_", "t_"):
                self.__dict__.pop(attribute, None)

    def _store_parameters(self):
        values = self._parameters(["coef", "intercept"])
        self._set_coefficients(values["coef"].T.astype(np.float64), values["intercept"].astype(np.float64))

    def _validation_split(self, X, y, stratify):
        X_train, X_val, y_train, y_val = train_test_split(
            X, y, test_size=self.validation_fraction, random_state=self._rng,
            stratify=y if stratify else None)
        if X_val.shape[0] < 2:
            raise ValueError(f"The validation_fraction={self.validation_fraction} is too small for "
                             f"{X.shape[0]} samples.")
        return X_train, X_val, y_train, y_val

    def _validation_score(self, X_val, y_val):
        self._store_parameters()
        return self.score(X_val, y_val)

    def _decision(self, X):
        check_is_fitted(self, "coef_")
        X = self._validate_data(X, reset=False, dtype=[np.float64, np.float32])
        return self._infer(X, "decision")

    def _more_tags(self):
        return {"preserves_dtype": [np.float64]}


class TraindSGDRegressor(RegressorMixin, _BaseTraindSGD):
    """sklearn.linear_model.SGDRegressor, trained by traind (see this module's docstring). `batch_size` (default 1,
    scikit-learn's per-example SGD) and `address` (the daemon; default $TRAIND_ADDRESS) are traind's additions."""

    _parameter_constraints: dict = {
        **_BaseTraindSGD._parameter_constraints,
        "loss": [StrOptions(set(REGRESSION_LOSSES))],
    }

    def __init__(self, loss="squared_error", *, penalty="l2", alpha=0.0001, l1_ratio=0.15, fit_intercept=True,
                 max_iter=1000, tol=1e-3, shuffle=True, verbose=0, epsilon=DEFAULT_EPSILON, random_state=None,
                 learning_rate="invscaling", eta0=0.01, power_t=0.25, early_stopping=False, validation_fraction=0.1,
                 n_iter_no_change=5, warm_start=False, batch_size=1, address=None):
        self.loss = loss
        self.penalty = penalty
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        self.fit_intercept = fit_intercept
        self.max_iter = max_iter
        self.tol = tol
        self.shuffle = shuffle
        self.verbose = verbose
        self.epsilon = epsilon
        self.random_state = random_state
        self.learning_rate = learning_rate
        self.eta0 = eta0
        self.power_t = power_t
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.warm_start = warm_start
        self.batch_size = batch_size
        self.address = address

    def _n_model_outputs(self):
        return 1

    def _set_coefficients(self, coef, intercept):
        self.coef_ = coef.reshape(-1)
        self.intercept_ = intercept.reshape(1)

    def _prepare(self, X, y, reset):
        X, y = self._validate_data(X, y, reset=reset, dtype=[np.float64, np.float32], order="C",
                                   accept_large_sparse=False)
        y = column_or_1d(y, warn=True).astype(np.float64)
        return X, y

    def fit(self, X, y, coef_init=None, intercept_init=None):
        """Fits the model with per-example (or batch_size) SGD on the daemon, epochs until convergence."""
        self._validate_params()
        X, y = self._prepare(X, y, reset=True)
        self._start_fit(coef_init, intercept_init, X.shape[1], 1)
        validation = None
        if self.early_stopping:
            X, X_val, y, y_val = self._validation_split(X, y, stratify=False)
            validation = (X_val, y_val)
        return self._fit(X, y.reshape(-1, 1).astype(np.float32), incremental=False, max_iter=self.max_iter,
                         validation_data=validation)

    def partial_fit(self, X, y):
        """One epoch over X, y (scikit-learn's partial_fit: max_iter=1, no convergence check)."""
        first = not hasattr(self, "coef_")
        if first:
            self._validate_params()
        X, y = self._prepare(X, y, reset=first)
        if first or not hasattr(self, "_rng"):
            self._rng = check_random_state(self.random_state)
        return self._fit(X, y.reshape(-1, 1).astype(np.float32), incremental=True, max_iter=1)

    def predict(self, X):
        return self._decision(X).reshape(-1).astype(np.float64)



class TraindSGDClassifier(ClassifierMixin, _BaseTraindSGD):
    """sklearn.linear_model.SGDClassifier, trained by traind (see this module's docstring): one-vs-all with +1/-1
    targets, decision_function, predict, and predict_proba for log_loss and modified_huber as scikit-learn
    computes them from the decision values."""

    _parameter_constraints: dict = {
        **_BaseTraindSGD._parameter_constraints,
        "loss": [StrOptions(set(CLASSIFICATION_LOSSES))],
    }

    def __init__(self, loss="hinge", *, penalty="l2", alpha=0.0001, l1_ratio=0.15, fit_intercept=True,
                 max_iter=1000, tol=1e-3, shuffle=True, verbose=0, epsilon=DEFAULT_EPSILON, random_state=None,
                 learning_rate="optimal", eta0=0.0, power_t=0.5, early_stopping=False, validation_fraction=0.1,
                 n_iter_no_change=5, warm_start=False, batch_size=1, address=None):
        self.loss = loss
        self.penalty = penalty
        self.alpha = alpha
        self.l1_ratio = l1_ratio
        self.fit_intercept = fit_intercept
        self.max_iter = max_iter
        self.tol = tol
        self.shuffle = shuffle
        self.verbose = verbose
        self.epsilon = epsilon
        self.random_state = random_state
        self.learning_rate = learning_rate
        self.eta0 = eta0
        self.power_t = power_t
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.n_iter_no_change = n_iter_no_change
        self.warm_start = warm_start
        self.batch_size = batch_size
        self.address = address

    def _n_model_outputs(self):
        return 1 if len(self.classes_) == 2 else len(self.classes_)

    def _set_coefficients(self, coef, intercept):
        self.coef_ = coef.reshape(self._n_model_outputs(), -1)
        self.intercept_ = intercept.reshape(self._n_model_outputs())

    def _targets(self, y):
        """+1 / -1 per one-vs-all problem (binary: one problem, classes_[1] positive)."""
        if len(self.classes_) == 2:
            return np.where(y == self.classes_[1], 1.0, -1.0).astype(np.float32).reshape(-1, 1)
        return np.where(y[:, None] == self.classes_[None, :], 1.0, -1.0).astype(np.float32)

    def _prepare(self, X, y, reset):
        X, y = self._validate_data(X, y, reset=reset, dtype=[np.float64, np.float32], order="C",
                                   accept_large_sparse=False)
        y = column_or_1d(y, warn=True)
        check_classification_targets(y)
        return X, y

    def _set_classes(self, y, classes=None):
        self.classes_ = np.unique(y) if classes is None else np.asarray(classes)
        if len(self.classes_) < 2:
            raise ValueError(f"The number of classes has to be greater than one; got {len(self.classes_)} class")

    def fit(self, X, y, coef_init=None, intercept_init=None):
        """Fits the one-vs-all linear models with per-example (or batch_size) SGD on the daemon."""
        self._validate_params()
        X, y = self._prepare(X, y, reset=True)
        self._set_classes(y)
        self._start_fit(coef_init, intercept_init, X.shape[1], self._n_model_outputs())
        validation = None
        if self.early_stopping:
            X, X_val, y, y_val = self._validation_split(X, y, stratify=True)
            validation = (X_val, y_val)
        return self._fit(X, self._targets(y), incremental=False, max_iter=self.max_iter,
                         validation_data=validation)

    def partial_fit(self, X, y, classes=None):
        """One epoch over X, y; the first call needs `classes` (every label of the whole data)."""
        first = not hasattr(self, "classes_")
        if first:
            self._validate_params()
            if classes is None:
                raise ValueError("classes must be passed on the first call to partial_fit.")
        X, y = self._prepare(X, y, reset=first)
        if first:
            self._set_classes(y, classes)
            self._rng = check_random_state(self.random_state)
        elif classes is not None and not np.array_equal(np.unique(classes), self.classes_):
            raise ValueError("`classes=%r` is not the same as on last call to partial_fit, was: %r"
                             % (classes, self.classes_))
        unknown = np.setdiff1d(y, self.classes_)
        if len(unknown):
            raise ValueError(f"y has labels {unknown} that are not in classes {self.classes_}")
        return self._fit(X, self._targets(y), incremental=True, max_iter=1)

    def decision_function(self, X):
        decision = self._decision(X).astype(np.float64)
        return decision.reshape(-1) if decision.shape[1] == 1 else decision

    def predict(self, X):
        decision = self.decision_function(X)
        indices = (decision > 0).astype(int) if decision.ndim == 1 else decision.argmax(axis=1)
        return self.classes_[indices]

    def _check_proba(self):
        if self.loss not in ("log_loss", "modified_huber"):
            raise AttributeError(f"probability estimates are not available for loss={self.loss!r}")
        return True

    @available_if(_check_proba)
    def predict_proba(self, X):
        """As scikit-learn: the logistic of the decision (log_loss) or (clip(decision, -1, 1) + 1) / 2
        (modified_huber), one-vs-all estimates normalised to sum to 1."""
        decision = self.decision_function(X)
        if self.loss == "log_loss":
            probabilities = 1.0 / (1.0 + np.exp(-decision))
        else:
            probabilities = (np.clip(decision, -1, 1) + 1) / 2
        if decision.ndim == 1:
            return np.vstack([1 - probabilities, probabilities]).T
        totals = probabilities.sum(axis=1, keepdims=True)
        uniform = np.full_like(probabilities, 1.0 / probabilities.shape[1])
        return np.where(totals == 0, uniform, probabilities / np.where(totals == 0, 1, totals))

    @available_if(_check_proba)
    def predict_log_proba(self, X):
        return np.log(self.predict_proba(X))
