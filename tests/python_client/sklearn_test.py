"""traind_client.sklearn against the real daemon.

- scikit-learn's own conformance suite (sklearn.utils.estimator_checks.check_estimator) on every estimator;
- the same fits as scikit-learn's SGDRegressor / SGDClassifier with shuffle=False, for every loss, penalty and
  learning-rate schedule: the same coefficients within float32 precision (scikit-learn computes in float64);
- MLPClassifier / MLPRegressor from the same random_state: the same initial weights and batches, the same
  training within float32 precision (SGD with momentum) or near it (Adam's epsilon placement);
- the schedules and penalties run on the daemon (its session's learning rate is the schedule's);
- Pipeline, GridSearchCV, pickling, partial_fit, warm_start, early stopping.
"""

import os
import pickle
import unittest
import warnings

import numpy as np
from sklearn.datasets import load_digits, make_classification, make_regression
from sklearn.linear_model import SGDClassifier, SGDRegressor
from sklearn.model_selection import GridSearchCV
from sklearn.neural_network import MLPClassifier, MLPRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import _set_checking_parameters, check_estimator

from daemon import Daemon
from traind_client.sklearn import (TraindEstimator, TraindMLPClassifier, TraindMLPRegressor, TraindSGDClassifier,
                                   TraindSGDRegressor)
from traind_client.sklearn._base import _sessions

SGD_LOSSES = ["hinge", "log_loss", "modified_huber", "squared_hinge", "perceptron", "squared_error", "huber",
              "epsilon_insensitive", "squared_epsilon_insensitive"]


def relative_error(actual, expected):
    return np.abs(np.asarray(actual) - np.asarray(expected)).max() / max(np.abs(expected).max(), 1e-12)


def regression_data(n=120, features=5, seed=0):
    X, y = make_regression(n, features, noise=0.5, random_state=seed)
    return StandardScaler().fit_transform(X), (y - y.mean()) / y.std()


class SklearnTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = Daemon().__enter__()
        os.environ["TRAIND_ADDRESS"] = cls.daemon.address
        warnings.simplefilter("ignore")

    @classmethod
    def tearDownClass(cls):
        cls.daemon.__exit__(None, None, None)

    def test_check_estimator(self):
        """scikit-learn's conformance suite. Checks that cannot apply are declared in the estimators' tags
        (_xfail_checks, with the reason) and skipped by check_estimator itself. The estimators are set up as
        scikit-learn's own test suite sets up the estimators they follow (_set_checking_parameters: max_iter 5;
        its MLPs get max_iter 100 and keep batch_size 'auto'; its SGD estimators train per example)."""
        for estimator in [TraindSGDRegressor(), TraindSGDClassifier(), TraindMLPRegressor(), TraindMLPClassifier(),
                          TraindEstimator()]:
            _set_checking_parameters(estimator)
            if isinstance(estimator, (TraindMLPRegressor, TraindMLPClassifier)):
                estimator.set_params(max_iter=100, batch_size="auto")
            elif isinstance(estimator, (TraindSGDRegressor, TraindSGDClassifier)):
                estimator.set_params(batch_size=1)
            with self.subTest(type(estimator).__name__):
                check_estimator(estimator)

    def test_sgd_matches_scikit_learn(self):
        """Same data, same settings, no shuffling: the coefficients of scikit-learn's per-example SGD, for every
        loss, the three penalties and the schedules (computed by the daemon's optimizer and schedulers)."""
        X, y = make_classification(120, 4, n_informative=3, n_redundant=0, n_classes=3, random_state=0)
        for loss in SGD_LOSSES:
            settings = dict(loss=loss, shuffle=False, max_iter=2, tol=None, learning_rate="constant", eta0=0.01)
            expected = SGDClassifier(**settings).fit(X, y)
            actual = TraindSGDClassifier(**settings).fit(X, y)
            self.assertLess(relative_error(actual.coef_, expected.coef_), 1e-5, loss)
            self.assertLess(np.abs(actual.intercept_ - expected.intercept_).max(), 1e-5, loss)
            np.testing.assert_array_equal(actual.predict(X), expected.predict(X))
        X, y = regression_data()
        for settings in [dict(), dict(penalty="l1", alpha=0.01), dict(penalty="elasticnet", alpha=0.01, l1_ratio=0.4),
                         dict(penalty=None), dict(learning_rate="constant"), dict(learning_rate="adaptive", tol=0.1),
                         dict(learning_rate="invscaling", power_t=0.5, eta0=0.05), dict(loss="huber", epsilon=0.5),
                         dict(fit_intercept=False)]:
            settings = {"shuffle": False, "max_iter": 3, "tol": None, **settings}
            expected = SGDRegressor(**settings).fit(X, y)
            actual = TraindSGDRegressor(**settings).fit(X, y)
            self.assertLess(relative_error(actual.coef_, expected.coef_), 1e-5, settings)
            self.assertLess(np.abs(actual.intercept_ - expected.intercept_).max(), 1e-5, settings)
            self.assertEqual(actual.n_iter_, expected.n_iter_, settings)
            self.assertEqual(actual.t_, expected.t_, settings)
        # 'optimal' (the classifier's default) with hinge, and the L1 penalty zeroing coefficients.
        X, y = make_classification(200, 6, n_informative=4, random_state=1)
        settings = dict(shuffle=False, max_iter=3, tol=None, penalty="l1", alpha=0.01)
        expected, actual = SGDClassifier(**settings).fit(X, y), TraindSGDClassifier(**settings).fit(X, y)
        self.assertLess(relative_error(actual.coef_, expected.coef_), 1e-5)
        np.testing.assert_array_equal(actual.coef_ == 0, expected.coef_ == 0)

    def test_schedules_and_penalties_run_on_the_daemon(self):
        """The learning rate is the daemon session's: after 2 epochs of 50 examples with invscaling, it is
        eta0 / (1 + 100)^power_t, as scikit-learn's eta for the next example."""
        X, y = regression_data(50, 3)
        model = TraindSGDRegressor(learning_rate="invscaling", eta0=0.02, power_t=0.3, max_iter=2, tol=None,
                                   shuffle=False).fit(X, y)
        session = _sessions[model]
        rate = session.client.get_learning_rate(session.session_id)
        self.assertEqual(rate.optimizer_step, 100)
        self.assertAlmostEqual(rate.learning_rate, 0.02 / 101 ** 0.3, places=7)
        info = session.client.get_session(session.session_id)
        self.assertEqual(info.scheduler, "inverse_scaling")
        model = TraindSGDClassifier(max_iter=1, tol=None).fit(*make_classification(40, 3, n_informative=2,
                                                                                   n_redundant=0, random_state=0))
        self.assertEqual(model._session().client.get_session(model._session().session_id).scheduler, "optimal")

    def test_mlp_matches_scikit_learn(self):
        """The same random_state gives the same initial weights and the same shuffled batches: with SGD (momentum
        and Nesterov at a constant rate; invscaling without momentum) scikit-learn's trajectory within float32
        precision, with Adam close to it."""
        X, y = load_digits(return_X_y=True)
        X, y = X[:400] / 16, y[:400]
        for schedule in [dict(learning_rate="constant", momentum=0.8), dict(learning_rate="invscaling", momentum=0.0)]:
            settings = dict(hidden_layer_sizes=(20,), random_state=0, max_iter=4, solver="sgd", learning_rate_init=0.05,
                            alpha=1e-3, batch_size=50, **schedule)
            expected, actual = MLPClassifier(**settings).fit(X, y), TraindMLPClassifier(**settings).fit(X, y)
            for a, e in zip(actual.coefs_ + actual.intercepts_, expected.coefs_ + expected.intercepts_):
                self.assertLess(relative_error(a, e), 1e-4, schedule)
            # scikit-learn's loss_curve_ also holds the L2 term (0.5 alpha |W|^2 / batch), traind's the data loss.
            np.testing.assert_allclose(actual.loss_curve_, expected.loss_curve_, rtol=1e-3)
            self.assertEqual(actual.n_iter_, expected.n_iter_)
            self.assertEqual(actual.t_, expected.t_)
        X, y = regression_data(150, 4)
        settings = dict(hidden_layer_sizes=(8, 6), activation="tanh", random_state=3, max_iter=5, batch_size=32)
        expected, actual = MLPRegressor(**settings).fit(X, y), TraindMLPRegressor(**settings).fit(X, y)
        for a, e in zip(actual.coefs_, expected.coefs_):
            self.assertLess(relative_error(a, e), 1e-3)
        np.testing.assert_allclose(actual.predict(X), expected.predict(X), rtol=1e-3, atol=1e-3)

    def test_pipeline_and_grid_search(self):
        X, y = load_digits(return_X_y=True)
        X, y = X[:300], y[:300]
        search = GridSearchCV(make_pipeline(StandardScaler(), TraindSGDClassifier(max_iter=20, random_state=0)),
                              {"traindsgdclassifier__alpha": [1e-4, 1e-2], "traindsgdclassifier__penalty": ["l2", "l1"]},
                              cv=2)
        search.fit(X, y)
        self.assertGreater(search.best_score_, 0.85)
        self.assertEqual(set(search.cv_results_["param_traindsgdclassifier__penalty"]), {"l2", "l1"})
        self.assertGreater(search.score(X, y), 0.9)
        pipeline = make_pipeline(StandardScaler(), TraindMLPRegressor(hidden_layer_sizes=(16,), max_iter=200,
                                                                      learning_rate_init=0.01, random_state=0))
        X, y = regression_data(200, 4)
        self.assertGreater(pipeline.fit(X, y).score(X, y), 0.9)

    def test_pickle_partial_fit_warm_start_early_stopping(self):
        X, y = load_digits(return_X_y=True)
        X = X / 16
        model = TraindMLPClassifier(hidden_layer_sizes=(32,), max_iter=30, random_state=0).fit(X, y)
        restored = pickle.loads(pickle.dumps(model))
        self.assertNotIn(restored, _sessions)  # the daemon session does not travel with the pickle
        np.testing.assert_array_equal(restored.predict_proba(X[:50]), model.predict_proba(X[:50]))
        self.assertGreater(model.score(X, y), 0.9)
        # partial_fit: one epoch a call, from the weights so far.
        online, reference = TraindSGDRegressor(shuffle=False), SGDRegressor(shuffle=False)
        Xr, yr = regression_data(100, 3)
        for _ in range(3):
            online.partial_fit(Xr, yr)
            reference.partial_fit(Xr, yr)
        self.assertEqual(online.t_, 301)
        self.assertLess(relative_error(online.coef_, reference.coef_), 1e-5)
        classifier = TraindMLPClassifier(hidden_layer_sizes=(16,), random_state=0)
        classifier.partial_fit(X[:100], y[:100], classes=np.arange(10))
        classifier.partial_fit(X[100:200], y[100:200])
        self.assertEqual(classifier.n_iter_, 2)
        # warm_start continues from the fitted weights.
        warm = TraindSGDRegressor(max_iter=2, tol=None, warm_start=True, random_state=0).fit(Xr, yr)
        first = warm.coef_.copy()
        warm.fit(Xr, yr)
        self.assertFalse(np.array_equal(first, warm.coef_))
        # early stopping: a validation split, the best epoch's weights restored (MLP).
        stopped = TraindMLPClassifier(hidden_layer_sizes=(16,), early_stopping=True, max_iter=200, random_state=0,
                                      n_iter_no_change=3).fit(X, y)
        self.assertLess(stopped.n_iter_, 200)
        self.assertEqual(len(stopped.validation_scores_), stopped.n_iter_)
        self.assertEqual(max(stopped.validation_scores_), stopped.best_validation_score_)
        sgd = TraindSGDClassifier(early_stopping=True, random_state=0, max_iter=100).fit(X, y)
        self.assertLess(sgd.n_iter_, 100)
        with self.assertRaises(ValueError):
            TraindMLPClassifier(solver="lbfgs").fit(X[:20], y[:20])


if __name__ == "__main__":
    unittest.main()
