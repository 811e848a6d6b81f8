"""traind_client.sklearn: scikit-learn estimators whose training runs on traind.

    from traind_client.sklearn import TraindSGDRegressor, TraindMLPClassifier
    model = TraindMLPClassifier(hidden_layer_sizes=(100,), random_state=0).fit(X, y)   # $TRAIND_ADDRESS
    model.predict(X_test)

TraindSGDRegressor / TraindSGDClassifier follow sklearn.linear_model.SGDRegressor / SGDClassifier (1.2),
TraindMLPRegressor / TraindMLPClassifier sklearn.neural_network.MLPRegressor / MLPClassifier, TraindEstimator
takes any ONNX graph. Hyper-parameters, fitted attributes and methods are scikit-learn's; the daemon trains (an
epoch per call), its optimizer applies the elastic-net penalty and its schedulers the learning-rate schedules.
Every estimator has an `address` parameter (default $TRAIND_ADDRESS). Each module's docstring lists where it
departs from scikit-learn.
"""

from traind_client.sklearn._estimator import TraindEstimator
from traind_client.sklearn._linear import TraindSGDClassifier, TraindSGDRegressor
from traind_client.sklearn._mlp import TraindMLPClassifier, TraindMLPRegressor

__all__ = ["TraindEstimator", "TraindMLPClassifier", "TraindMLPRegressor", "TraindSGDClassifier",
           "TraindSGDRegressor"]
