"""traind_client.fleet without daemons: every aggregation strategy against its formula computed by hand, update
clipping, strategy state round trips, fleet files, the history's JSON and PNG, the progress bar."""

import io
import json
import math
import os
import tempfile
import unittest

import numpy as np

from traind_client import fleet
from traind_client.fleet._progress import RoundProgress

GLOBAL = np.array([1.0, -2.0, 0.5, 3.0], np.float32)
CLIENTS = [np.array([2.0, -1.0, 0.5, 3.0], np.float32), np.array([0.0, -2.0, 1.5, 1.0], np.float32),
           np.array([1.0, -5.0, 0.0, 3.5], np.float32)]
EXAMPLES = [10, 30, 60]


class StrategiesTest(unittest.TestCase):
    def results(self):
        return list(zip(CLIENTS, EXAMPLES))

    def test_fedavg_is_the_example_weighted_mean(self):
        expected = sum(c.astype(np.float64) * n for c, n in zip(CLIENTS, EXAMPLES)) / sum(EXAMPLES)
        out = fleet.FedAvg().aggregate(GLOBAL, self.results())
        self.assertEqual(out.dtype, np.float32)
        np.testing.assert_allclose(out, expected, rtol=1e-6)
        half = fleet.FedAvg(server_lr=0.5).aggregate(GLOBAL, self.results())
        np.testing.assert_allclose(half, GLOBAL + 0.5 * (expected - GLOBAL), rtol=1e-6)

    def test_fedavgm_accumulates_server_momentum(self):
        strategy = fleet.FedAvgM(server_lr=1.0, momentum=0.5)
        mean_update = sum((c.astype(np.float64) - GLOBAL) * n for c, n in zip(CLIENTS, EXAMPLES)) / sum(EXAMPLES)
        first = strategy.aggregate(GLOBAL, self.results())
        np.testing.assert_allclose(first, GLOBAL + mean_update, rtol=1e-6)
        # the same clients' parameters again, now relative to `first`
        second_update = sum((c.astype(np.float64) - first) * n for c, n in zip(CLIENTS, EXAMPLES)) / sum(EXAMPLES)
        second = strategy.aggregate(first, self.results())
        np.testing.assert_allclose(second, first + (0.5 * mean_update + second_update), rtol=1e-5, atol=1e-6)

    def test_fedadam_follows_reddi_et_al(self):
        strategy = fleet.FedAdam(server_lr=0.1, beta1=0.9, beta2=0.99, tau=1e-3)
        delta = sum((c.astype(np.float64) - GLOBAL) * n for c, n in zip(CLIENTS, EXAMPLES)) / sum(EXAMPLES)
        m = 0.1 * delta
        v = 0.01 * delta * delta
        out = strategy.aggregate(GLOBAL, self.results())
        np.testing.assert_allclose(out, GLOBAL + 0.1 * m / (np.sqrt(v) + 1e-3), rtol=1e-5)
        np.testing.assert_allclose(strategy.state["m"], m)
        np.testing.assert_allclose(strategy.state["v"], v)

    def test_median_and_trimmed_mean_ignore_a_wild_client(self):
        wild = np.full(4, 1e6, np.float32)
        results = self.results() + [(wild, 1000)]
        median = fleet.FedMedian().aggregate(GLOBAL, results)
        updates = np.stack([c.astype(np.float64) - GLOBAL for c in CLIENTS + [wild]])
        np.testing.assert_allclose(median, GLOBAL + np.median(updates, axis=0), rtol=1e-6)
        self.assertLess(np.abs(median).max(), 10)
        trimmed = fleet.FedTrimmedAvg(trim=0.25).aggregate(GLOBAL, results)
        expected = GLOBAL + np.sort(updates, axis=0)[1:3].mean(axis=0)
        np.testing.assert_allclose(trimmed, expected, rtol=1e-6)
        self.assertLess(np.abs(trimmed).max(), 10)
        # FedAvg is not robust: the wild client dominates
        self.assertGreater(np.abs(fleet.FedAvg().aggregate(GLOBAL, results)).max(), 1e5)

    def test_clipping_bounds_each_update(self):
        update = np.array([3.0, 4.0])
        np.testing.assert_allclose(fleet.clip_update(update, 1.0), [0.6, 0.8])
        np.testing.assert_array_equal(fleet.clip_update(update, 10.0), update)
        far = GLOBAL + np.array([300, 0, 0, 400], np.float32)
        out = fleet.FedAvg(clip_norm=5.0).aggregate(GLOBAL, [(far, 1)])
        np.testing.assert_allclose(out, GLOBAL + np.array([3, 0, 0, 4], np.float32), rtol=1e-6)

    def test_bad_results_are_refused(self):
        with self.assertRaisesRegex(ValueError, "shape"):
            fleet.FedAvg().aggregate(GLOBAL, [(np.zeros(3, np.float32), 1)])
        with self.assertRaisesRegex(ValueError, "not finite"):
            fleet.FedAvg().aggregate(GLOBAL, [(np.full(4, np.nan, np.float32), 1)])
        with self.assertRaisesRegex(ValueError, "at least one"):
            fleet.FedAvg().aggregate(GLOBAL, [])
        with self.assertRaisesRegex(ValueError, "positive"):
            fleet.FedAvg().aggregate(GLOBAL, [(GLOBAL, 0)])
        with self.assertRaisesRegex(ValueError, "unknown strategy"):
            fleet.make_strategy("fedsgd")
        self.assertEqual(fleet.make_strategy("FedAvgM", momentum=0.8, server_lr=None).config(),
                         {"name": "fedavgm", "clip_norm": None, "server_lr": 1.0, "momentum": 0.8})


class FleetFileTest(unittest.TestCase):
    def test_paths_are_relative_to_the_file_and_tokens_read_from_files(self):
        directory = tempfile.mkdtemp()
        with open(os.path.join(directory, "edge.token"), "w") as file:
            file.write("secret\n")
        with open(os.path.join(directory, "fleet.json"), "w") as file:
            json.dump({"devices": [
                {"name": "a", "address": "h1:1", "data": {"local_path": "d"}, "eval": {"fraction": 0.1},
                 "token_file": "edge.token", "tls_ca": "ca.pem"},
                {"address": "h2:2", "data": {"npz_file": "x.npz"}, "eval": {"npz_file": "/abs/v.npz"},
                 "fit_timeout": 7}]}, file)
        a, b = fleet.load_fleet(os.path.join(directory, "fleet.json"))
        self.assertEqual((a.name, a.token, a.tls_ca), ("a", "secret", os.path.join(directory, "ca.pem")))
        self.assertNotIn("secret", repr(a))
        self.assertEqual((b.name, b.data, b.eval, b.fit_timeout),
                         ("h2:2", {"npz_file": os.path.join(directory, "x.npz")}, {"npz_file": "/abs/v.npz"}, 7))

    def test_malformed_fleets_are_refused(self):
        directory = tempfile.mkdtemp()
        path = os.path.join(directory, "fleet.json")
        for document, message in (({"devices": []}, "at least one"),
                                  ({"devices": [{"address": "h:1"}]}, "no training data"),
                                  ({"devices": [{"address": "h:1", "data": {"s3": "x"}}]}, "data must be"),
                                  ({"devices": [{"address": "h:1", "data": {"local_path": "x"}, "port": 1}]},
                                   "unknown keys"),
                                  ({"devices": [{"address": "h:1", "data": {"local_path": "x"}},
                                                {"address": "h:1", "data": {"local_path": "y"}}]}, "unique")):
            with open(path, "w") as file:
                json.dump(document, file)
            with self.assertRaisesRegex(ValueError, message):
                fleet.load_fleet(path)


class HistoryTest(unittest.TestCase):
    def history(self):
        rounds = []
        for r in range(1, 4):
            rounds.append({"round": r, "aggregated": r != 2, "sampled": 2, "seconds": 0.5,
                           "global": {"train_loss": 1.0 / r, "eval_loss": 1.2 / r, "eval_accuracy": 0.5 + r / 10,
                                      "central_loss": float("nan"), "central_accuracy": None},
                           "devices": [{"name": "a", "ok": True, "eval_loss": 1.0 / r, "eval_accuracy": np.float32(0.6)},
                                       {"name": "b", "ok": r != 2, "eval_loss": None, "eval_accuracy": None}]})
        return fleet.History({"strategy": {"name": "fedavg"}}, rounds)

    def test_json_round_trip_without_nan(self):
        path = os.path.join(tempfile.mkdtemp(), "history.json")
        self.history().save_json(path)
        with open(path) as file:
            text = file.read()
        self.assertNotIn("NaN", text)
        loaded = fleet.History.load_json(path)
        self.assertEqual(len(loaded.rounds), 3)
        self.assertIsNone(loaded.rounds[0]["global"]["central_loss"])
        self.assertAlmostEqual(loaded.rounds[1]["devices"][0]["eval_accuracy"], 0.6, places=6)

    def test_plot_writes_a_png_with_both_panels(self):
        path = os.path.join(tempfile.mkdtemp(), "history.png")
        self.history().plot(path)
        import matplotlib.image
        image = matplotlib.image.imread(path)
        self.assertEqual(image.shape[:2], (420, 1100))
        self.assertGreater(float(image[..., :3].std()), 0.05)  # not a blank canvas


class ProgressTest(unittest.TestCase):
    def test_lines_when_not_a_terminal(self):
        stream = io.StringIO()
        progress = RoundProgress(2, 10, 3, stream=stream)
        progress.device_done(True)
        progress.device_done(False)
        progress.device_done(True)
        progress.finish("done")
        self.assertEqual(stream.getvalue(), "round   2/10 [########################] 3/3 devices (1 failed)  done\n")


if __name__ == "__main__":
    unittest.main()
