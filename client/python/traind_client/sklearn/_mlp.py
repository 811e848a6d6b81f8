"""TraindMLPRegressor and TraindMLPClassifier: scikit-learn's MLPRegressor / MLPClassifier (1.2) trained by traind.

The network is built as ONNX at fit (Gemm layers with the activation, scikit-learn's Glorot initialisation drawn
from the same random_state in the same order, so that the same random_state starts from the same weights), and
trained with the daemon's SGD (momentum, Nesterov) or Adam; alpha is the daemon optimizer's L2 penalty on the
weights (alpha / batch_size added to the gradient, as scikit-learn's backpropagation does); learning_rate
constant / invscaling / adaptive are the daemon's schedulers. Batches are scikit-learn's (gen_batches over the
shuffled indices, the last one shorter), an epoch one call on the daemon.

Differences from scikit-learn, by design: float32 training; momentum is PyTorch's (the buffer accumulates
gradients and the current rate multiplies it; scikit-learn's velocity accumulates rate-scaled gradients), which is
the same at a constant rate but not across an invscaling or adaptive change of rate; solver='lbfgs' is not offered (a full-batch
quasi-Newton method, not a stochastic one: a ValueError says so); Adam's epsilon is added to the bias-corrected
root of the second moment (PyTorch's placement; scikit-learn adds it before the correction, a difference of
eps * (1 - sqrt(1 - beta_2^t)) in the denominator); the last, shorter batch uses alpha / batch_size too;
loss_curve_ holds the data loss without the L2 term; multilabel targets are not supported.
"""

import numbers

import numpy as np
from sklearn.base import ClassifierMixin, RegressorMixin, BaseEstimator, is_classifier
from sklearn.model_selection import train_test_split
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, Options, StrOptions
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import check_is_fitted, column_or_1d

from traind_client.sklearn import _graphs
from traind_client.sklearn._base import TraindEstimatorMixin, warn_not_converged

import warnings


class _BaseTraindMLP(TraindEstimatorMixin, BaseEstimator):
    _parameter_constraints: dict = {
        "hidden_layer_sizes": ["array-like", Interval(numbers.Integral, 1, None, closed="left")],
        "activation": [StrOptions({"identity", "logistic", "tanh", "relu"})],
        "solver": [StrOptions({"sgd", "adam", "lbfgs"})],
        "alpha": [Interval(numbers.Real, 0, None, closed="left")],
        "batch_size": [StrOptions({"auto"}), Interval(numbers.Integral, 1, None, closed="left")],
        "learning_rate": [StrOptions({"constant", "invscaling", "adaptive"})],
        "learning_rate_init": [Interval(numbers.Real, 0, None, closed="neither")],
        "power_t": [Interval(numbers.Real, 0, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "shuffle": ["boolean"],
        "random_state": ["random_state"],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "verbose": ["verbose"],
        "warm_start": ["boolean"],
        "momentum": [Interval(numbers.Real, 0, 1, closed="both")],
        "nesterovs_momentum": ["boolean"],
        "early_stopping": ["boolean"],
        "validation_fraction": [Interval(numbers.Real, 0, 1, closed="left")],
        "beta_1": [Interval(numbers.Real, 0, 1, closed="left")],
        "beta_2": [Interval(numbers.Real, 0, 1, closed="left")],
        "epsilon": [Interval(numbers.Real, 0, None, closed="neither")],
        "n_iter_no_change": [Interval(numbers.Integral, 1, None, closed="left"), Options(numbers.Real, {np.inf})],
        "max_fun": [Interval(numbers.Integral, 1, None, closed="left")],
        "address": [str, None],
    }

    def __init__(self, hidden_layer_sizes=(100,), activation="relu", *, solver="adam", alpha=0.0001,
                 batch_size="auto", learning_rate="constant", learning_rate_init=0.001, power_t=0.5, max_iter=200,
                 shuffle=True, random_state=None, tol=1e-4, verbose=False, warm_start=False, momentum=0.9,
                 nesterovs_momentum=True, early_stopping=False, validation_fraction=0.1, beta_1=0.9, beta_2=0.999,
                 epsilon=1e-8, n_iter_no_change=10, max_fun=15000, address=None):
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.solver = solver
        self.alpha = alpha
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.learning_rate_init = learning_rate_init
        self.power_t = power_t
        self.max_iter = max_iter
        self.shuffle = shuffle
        self.random_state = random_state
        self.tol = tol
        self.verbose = verbose
        self.warm_start = warm_start
        self.momentum = momentum
        self.nesterovs_momentum = nesterovs_momentum
        self.early_stopping = early_stopping
        self.validation_fraction = validation_fraction
        self.beta_1 = beta_1
        self.beta_2 = beta_2
        self.epsilon = epsilon
        self.n_iter_no_change = n_iter_no_change
        self.max_fun = max_fun
        self.address = address

    # ---- what the subclasses define: _encode (targets), _loss, _prediction ----

    def _layer_units(self, n_features, n_outputs):
        hidden = [self.hidden_layer_sizes] if np.isscalar(self.hidden_layer_sizes) else list(self.hidden_layer_sizes)
        if any(size <= 0 for size in hidden):
            raise ValueError(f"hidden_layer_sizes must be > 0, got {hidden}.")
        return [n_features] + [int(size) for size in hidden] + [n_outputs]

    def _initialize(self, n_features, n_outputs):
        """scikit-learn's _initialize: Glorot-uniform weights and intercepts from self._random_state, in order."""
        units = self._layer_units(n_features, n_outputs)
        self.n_outputs_ = n_outputs
        self.n_layers_ = len(units)
        self.n_iter_ = 0
        self.t_ = 0
        self.coefs_, self.intercepts_ = [], []
        factor = 2.0 if self.activation == "logistic" else 6.0
        for fan_in, fan_out in zip(units[:-1], units[1:]):
            bound = np.sqrt(factor / (fan_in + fan_out))
            self.coefs_.append(self._random_state.uniform(-bound, bound, (fan_in, fan_out)))
            self.intercepts_.append(self._random_state.uniform(-bound, bound, fan_out))
        self.loss_curve_ = []
        self._no_improvement_count = 0
        if self.early_stopping:
            self.validation_scores_, self.best_validation_score_, self.best_loss_ = [], -np.inf, None
        else:
            self.validation_scores_, self.best_validation_score_, self.best_loss_ = None, None, np.inf

    def _weights(self):
        return [f"coefs_{i}" for i in range(len(self.coefs_))]

    def _model(self):
        return _graphs.mlp_model(self.coefs_, self.intercepts_, self.activation, self.out_activation_)

    def _optimizer(self, batch_size):
        if self.solver == "sgd":
            momentum = float(self.momentum)
            spec = {"sgd": {"lr": float(self.learning_rate_init), "momentum": momentum,
                            "nesterov": bool(self.nesterovs_momentum and momentum > 0)}}
        else:
            spec = {"adamw": {"lr": float(self.learning_rate_init), "beta1": float(self.beta_1),
                              "beta2": float(self.beta_2), "eps": float(self.epsilon), "weight_decay": 0.0}}
        if self.alpha > 0:
            # scikit-learn adds alpha * W to the batch's summed gradient and divides by the batch size.
            spec["penalty"] = {"alpha": float(self.alpha) / batch_size, "l1_ratio": 0.0,
                               "parameters": self._weights()}
        return spec

    def _scheduler(self, n_train, batch_size):
        if self.solver != "sgd" or self.learning_rate == "constant":
            return {"constant": {}}
        if self.learning_rate == "invscaling":
            # learning_rate_init / (t + 1)^power_t with t the examples seen, updated after each epoch.
            steps = -(-n_train // batch_size)
            return {"inverse_scaling": {"power_t": float(self.power_t), "offset": 1.0, "scale": float(n_train),
                                        "interval": steps}}
        # 'adaptive': MLP stops (or divides by 5) once more than n_iter_no_change epochs did not improve.
        patience = int(min(self.n_iter_no_change, 2**40)) + 1
        return {"adaptive": {"patience": patience, "tol": float(self.tol), "factor": 0.2, "min_lr": 1e-6}}

    def _artifacts_from_fitted(self):
        return (self._model(), self._loss(), self._optimizer(1), ["output"],
                [name for i in range(len(self.coefs_)) for name in (f"coefs_{i}", f"intercepts_{i}")])

    def _batch_size(self, n_samples):
        if self.batch_size == "auto":
            return min(200, n_samples)
        if self.batch_size < 1 or self.batch_size > n_samples:
            warnings.warn("Got `batch_size` less than 1 or larger than sample size. It is going to be clipped")
        return int(np.clip(self.batch_size, 1, n_samples))

    def _store_parameters(self):
        names = [name for i in range(len(self.coefs_)) for name in (f"coefs_{i}", f"intercepts_{i}")]
        values = self._parameters(names)
        self.coefs_ = [values[f"coefs_{i}"].astype(np.float64) for i in range(len(self.coefs_))]
        self.intercepts_ = [values[f"intercepts_{i}"].astype(np.float64) for i in range(len(self.intercepts_))]

    def _fit(self, X, y, incremental):
        if self.solver == "lbfgs":
            raise ValueError("solver='lbfgs' is not available in traind's MLP estimators: traind trains with "
                             "stochastic optimizers ('sgd', 'adam')")
        if self.early_stopping and incremental:
            raise ValueError("partial_fit does not support early_stopping=True")
        targets = self._encode(y)
        n_outputs = self._n_outputs(targets)
        first = not hasattr(self, "coefs_") or (not self.warm_start and not incremental)
        if first:
            self._random_state = check_random_state(self.random_state)
            self._set_output_activation()
            self._initialize(X.shape[1], n_outputs)
        elif self.coefs_[0].shape[0] != X.shape[1]:
            raise ValueError(f"X has {X.shape[1]} features, but the network expects {self.coefs_[0].shape[0]}")
        validation = None
        if self.early_stopping:
            stratify = y if is_classifier(self) and targets.ndim == 1 else None
            X, X_val, targets, _, y, y_val = train_test_split(X, targets, y, random_state=self._random_state,
                                                              test_size=self.validation_fraction, stratify=stratify)
            validation = (X_val, y_val)
        batch_size = self._batch_size(X.shape[0])
        if first or not incremental or self._session() is None:
            self._open_session(self._model(), self._loss(), self._optimizer(batch_size), additional_outputs=["output"],
                               scheduler=self._scheduler(X.shape[0], batch_size),
                               learning_rate=float(self.learning_rate_init), seed=1)
        session = self._session()
        best = {}

        def validation_score():
            X_val, y_val = validation
            return self.score(X_val, y_val)

        def on_epoch(loss, score):
            self.loss_curve_.append(loss / self._loss_scale())
            self.t_ += X.shape[0]
            self.n_iter_ += 1
            if score is not None:
                self.validation_scores_.append(score)
                if score > self.best_validation_score_:
                    self.best_validation_score_ = score
                    best["parameters"] = session.client.get_parameters(session.session_id).buffer
            else:
                self.best_loss_ = min(self.best_loss_, self.loss_curve_[-1])

        epochs, _, _ = self._run_epochs(
            session, {"X": np.ascontiguousarray(X, np.float32), _graphs.TARGET: targets}, batch_size=batch_size,
            max_iter=1 if incremental else self.max_iter, shuffle=self.shuffle, rng=self._random_state,
            tol=self.tol, n_iter_no_change=self.n_iter_no_change, patience_exceeds=True,
            adaptive=self.solver == "sgd" and self.learning_rate == "adaptive",
            validation=validation_score if validation is not None else None, on_epoch=on_epoch)
        if "parameters" in best:  # early stopping: the best validation epoch's weights, as scikit-learn
            session.client.set_parameters(session.session_id, buffer=best["parameters"])
        self._store_parameters()
        if not incremental and epochs == self.max_iter:
            warn_not_converged(f"Stochastic Optimizer: Maximum iterations ({self.max_iter}) reached and the "
                               "optimization hasn't converged yet.")
        return self

    def _output(self, X):
        check_is_fitted(self, "coefs_")
        X = self._validate_data(X, reset=False, dtype=[np.float64, np.float32])
        return self._infer(X, "output").astype(np.float64)

    def _more_tags(self):
        return {"preserves_dtype": [np.float64]}


class TraindMLPRegressor(RegressorMixin, _BaseTraindMLP):
    """sklearn.neural_network.MLPRegressor, trained by traind (see this module's docstring)."""

    def _set_output_activation(self):
        self.out_activation_ = "identity"

    def _encode(self, y):
        return np.ascontiguousarray(y.reshape(len(y), -1), np.float32)

    def _n_outputs(self, targets):
        return targets.shape[1]

    def _loss_scale(self):
        return self.n_outputs_  # scikit-learn's loss averages over the outputs too

    def _loss(self):
        graph = _graphs.half_squared_error_graph("logits", self.n_outputs_)
        return {"custom": {"graph": {"onnx_bytes": graph.SerializeToString()}, "target_names": [_graphs.TARGET]}}

    def _prepare(self, X, y, reset):
        X, y = self._validate_data(X, y, reset=reset, multi_output=True, y_numeric=True,
                                   dtype=[np.float64, np.float32])
        if y.ndim == 2 and y.shape[1] == 1:
            y = column_or_1d(y, warn=True)
        return X, y

    def fit(self, X, y):
        self._validate_params()
        X, y = self._prepare(X, y, reset=True)
        return self._fit(X, y, incremental=False)

    def partial_fit(self, X, y):
        first = not hasattr(self, "coefs_")
        if first:
            self._validate_params()
        X, y = self._prepare(X, y, reset=first)
        return self._fit(X, y, incremental=True)

    def predict(self, X):
        output = self._output(X)
        return output.ravel() if output.shape[1] == 1 else output

    def _more_tags(self):
        return {**super()._more_tags(), "multioutput": True}


class TraindMLPClassifier(ClassifierMixin, _BaseTraindMLP):
    """sklearn.neural_network.MLPClassifier, trained by traind (see this module's docstring): softmax output and
    cross-entropy for several classes, a logistic output and binary cross-entropy for two."""

    def _set_output_activation(self):
        self.out_activation_ = "logistic" if len(self.classes_) == 2 else "softmax"

    def _encode(self, y):
        indices = np.searchsorted(self.classes_, y)
        if len(self.classes_) == 2:
            return indices.astype(np.float32).reshape(-1, 1)
        return indices.astype(np.int64)

    def _n_outputs(self, targets):
        return 1 if targets.ndim == 2 else len(self.classes_)

    def _loss_scale(self):
        return 1.0

    def _loss(self):
        kind = "BCE_WITH_LOGITS" if len(self.classes_) == 2 else "CROSS_ENTROPY"
        return {"builtin": {"type": kind, "output_name": "logits", "target_name": _graphs.TARGET}}

    def _prepare(self, X, y, reset):
        X, y = self._validate_data(X, y, reset=reset, dtype=[np.float64, np.float32])
        y = column_or_1d(y, warn=True)
        check_classification_targets(y)
        if type_of_target(y) not in ("binary", "multiclass"):
            raise ValueError(f"{type(self).__name__} supports binary and multiclass targets, got "
                             f"{type_of_target(y)}")
        return X, y

    def fit(self, X, y):
        self._validate_params()
        X, y = self._prepare(X, y, reset=True)
        if not self.warm_start or not hasattr(self, "classes_"):
            self.classes_ = np.unique(y)
        if len(self.classes_) < 2:
            raise ValueError(f"The number of classes has to be greater than one; got {len(self.classes_)} class")
        if np.setdiff1d(y, self.classes_).size:
            raise ValueError("warm_start can only be used where `y` has the same classes as in the previous call "
                             "to fit.")
        return self._fit(X, y, incremental=False)

    def partial_fit(self, X, y, classes=None):
        first = not hasattr(self, "classes_")
        if first:
            self._validate_params()
            if classes is None:
                raise ValueError("classes must be passed on the first call to partial_fit.")
            self.classes_ = np.unique(classes)
            if len(self.classes_) < 2:
                raise ValueError("The number of classes has to be greater than one")
        X, y = self._prepare(X, y, reset=first)
        if np.setdiff1d(y, self.classes_).size:
            raise ValueError(f"y has labels {np.setdiff1d(y, self.classes_)} that are not in classes {self.classes_}")
        return self._fit(X, y, incremental=True)

    def predict_proba(self, X):
        output = self._output(X)
        if output.shape[1] == 1:
            return np.hstack([1 - output, output])
        return output

    def predict_log_proba(self, X):
        return np.log(self.predict_proba(X))

    def predict(self, X):
        probabilities = self.predict_proba(X)
        return self.classes_[probabilities.argmax(axis=1)]
