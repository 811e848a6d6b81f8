"""TraindEstimator: any ONNX graph as a scikit-learn estimator, trained by traind with one of its losses."""

import numbers

import numpy as np
import onnx
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils import check_random_state
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted
from onnx import numpy_helper

from traind_client.sklearn import _graphs
from traind_client.sklearn._base import TraindEstimatorMixin, warn_not_converged

_BUILTIN_LOSSES = {"mse": "MSE", "l1": "L1", "cross_entropy": "CROSS_ENTROPY", "bce_with_logits": "BCE_WITH_LOGITS"}


class TraindEstimator(TraindEstimatorMixin, RegressorMixin, BaseEstimator):
    """A user's ONNX graph trained by traind behind scikit-learn's API.

    onnx_model: an onnx.ModelProto, its bytes, a path, or a callable (n_features, n_outputs) -> ModelProto that
        builds one for the data at fit; None: a linear model (Gemm). The graph's first input takes X (float32
        [batch, n_features]), its `output` (default: the first output) is what predict returns.
    loss: "mse", "l1", "cross_entropy" (y holds class ids; predict returns the arg-max class),
        "bce_with_logits", or a traind.v1.LossSpec dict whose target is named "target".
    optimizer: a traind.v1.OptimizerSpec dict (default {"adamw": {"lr": 0.01, "weight_decay": 0}}); scheduler: a traind.v1.SchedulerSpec
        dict or None. batch_size, max_iter, shuffle, random_state, tol, n_iter_no_change: as MLPRegressor's.
    Fitted: n_iter_, loss_curve_, parameters_ ({initializer: array}), classes_ with cross_entropy.
    """

    _parameter_constraints: dict = {
        "onnx_model": [None, bytes, str, onnx.ModelProto, callable],
        "loss": [StrOptions(set(_BUILTIN_LOSSES)), dict],
        "output": [str, None],
        "optimizer": [dict, None],
        "scheduler": [dict, None],
        "batch_size": [Interval(numbers.Integral, 1, None, closed="left")],
        "max_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "shuffle": ["boolean"],
        "random_state": ["random_state"],
        "tol": [Interval(numbers.Real, 0, None, closed="left"), None],
        "n_iter_no_change": [Interval(numbers.Integral, 1, None, closed="left")],
        "verbose": ["verbose"],
        "address": [str, None],
    }

    def __init__(self, onnx_model=None, *, loss="mse", output=None, optimizer=None, scheduler=None, batch_size=32,
                 max_iter=200, shuffle=True, random_state=None, tol=1e-4, n_iter_no_change=10, verbose=0,
                 address=None):
        self.onnx_model = onnx_model
        self.loss = loss
        self.output = output
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.shuffle = shuffle
        self.random_state = random_state
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.verbose = verbose
        self.address = address

    def _classifying(self):
        return self.loss == "cross_entropy"

    def _build(self, n_features, n_outputs):
        source = self.onnx_model
        if source is None:
            rng = check_random_state(self.random_state)
            bound = 1.0 / np.sqrt(n_features)
            return _graphs.linear_model(rng.uniform(-bound, bound, (n_features, n_outputs)),
                                        np.zeros(n_outputs), output="output")
        if callable(source) and not isinstance(source, (bytes, str, onnx.ModelProto)):
            source = source(n_features, n_outputs)
        if isinstance(source, onnx.ModelProto):
            return source
        if isinstance(source, bytes):
            return onnx.load_from_string(source)
        return onnx.load(source)

    def _loss_spec(self, output):
        if isinstance(self.loss, dict):
            return self.loss
        return {"builtin": {"type": _BUILTIN_LOSSES[self.loss], "output_name": output, "target_name": "target"}}

    def _artifacts_from_fitted(self):
        model = onnx.ModelProto()
        model.CopyFrom(self._fitted_model)
        initializers = {tensor.name: index for index, tensor in enumerate(model.graph.initializer)}
        for name, value in self.parameters_.items():
            model.graph.initializer[initializers[name]].CopyFrom(numpy_helper.from_array(value, name))
        return model, self._loss_spec(self.output_), self._optimizer_spec(), [], list(self.parameters_)

    def _optimizer_spec(self):
        return self.optimizer if self.optimizer is not None else {"adamw": {"lr": 0.01, "weight_decay": 0.0}}

    def fit(self, X, y):
        self._validate_params()
        X, y = self._validate_data(X, y, multi_output=not self._classifying(), y_numeric=not self._classifying(),
                                   dtype=[np.float64, np.float32])
        if self._classifying():
            self.classes_, ids = np.unique(y, return_inverse=True)
            targets = ids.astype(np.int64)
            n_outputs = len(self.classes_)
        else:
            targets = np.ascontiguousarray(y.reshape(len(y), -1), np.float32)
            n_outputs = targets.shape[1]
        model = self._build(X.shape[1], n_outputs)
        self.output_ = self.output or model.graph.output[0].name
        self._fitted_model = model
        rng = check_random_state(self.random_state)
        trainable = [tensor.name for tensor in model.graph.initializer
                     if tensor.data_type in (onnx.TensorProto.FLOAT, onnx.TensorProto.DOUBLE)]
        session = self._open_session(model, self._loss_spec(self.output_), self._optimizer_spec(),
                                     additional_outputs=[] if self.output_ in [o.name for o in model.graph.output]
                                     else [self.output_], scheduler=self.scheduler,
                                     seed=int(rng.randint(1, 2**31 - 1)))
        input_name = model.graph.input[0].name
        if input_name != "X":
            raise ValueError(f"TraindEstimator feeds X to an input named 'X'; the model's first input is "
                             f"'{input_name}'")
        epochs, losses, _ = self._run_epochs(
            session, {"X": np.ascontiguousarray(X, np.float32), "target": targets}, batch_size=min(self.batch_size,
                                                                                                    len(X)),
            max_iter=self.max_iter, shuffle=self.shuffle, rng=rng, tol=self.tol, n_iter_no_change=self.n_iter_no_change,
            patience_exceeds=True, adaptive=False)
        self.n_iter_ = epochs
        self.loss_curve_ = losses
        self.parameters_ = self._parameters(trainable)
        if self.tol is not None and epochs == self.max_iter:
            warn_not_converged(f"Maximum iterations ({self.max_iter}) reached before convergence.")
        return self

    def predict(self, X):
        check_is_fitted(self, "parameters_")
        X = self._validate_data(X, reset=False, dtype=[np.float64, np.float32])
        output = self._infer(X, self.output_).astype(np.float64)
        if self._classifying():
            return self.classes_[output.argmax(axis=1)]
        return output.ravel() if output.ndim == 2 and output.shape[1] == 1 else output

    def score(self, X, y, sample_weight=None):
        if self._classifying():
            from sklearn.metrics import accuracy_score
            return accuracy_score(y, self.predict(X), sample_weight=sample_weight)
        return super().score(X, y, sample_weight)

    def _more_tags(self):
        return {"multioutput": self.loss != "cross_entropy", "preserves_dtype": [np.float64]}
