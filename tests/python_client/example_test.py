"""The README's example, client/python/examples/train_digits.py, run as deploy/run.sh runs it: against a real
traind (through $TRAIND_ADDRESS), it must exit 0, which it does only when the held-back accuracy and the exported
model's accuracy (checked by the engine) both reach 95 %."""

import os
import re
import subprocess
import sys
import unittest

from daemon import Daemon, runfile, scratch_dir


class TrainDigitsExampleTest(unittest.TestCase):
    def test_trains_to_95_percent_and_the_exported_model_agrees(self):
        out = scratch_dir("digits")
        with Daemon() as daemon:
            env = dict(os.environ, TRAIND_ADDRESS=daemon.address, PYTHONPATH=os.pathsep.join(sys.path))
            run = subprocess.run([sys.executable, runfile("client/python/examples/train_digits.py"), "--out", out],
                                 env=env, capture_output=True, text=True, timeout=600)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)
        accuracies = [float(value) for value in re.findall(r"accuracy[^:]*: ([0-9.]+)%", run.stdout)]
        self.assertEqual(len(accuracies), 2, run.stdout)
        self.assertGreaterEqual(min(accuracies), 95.0)
        self.assertIn("loss", run.stdout.split("\r")[-1])  # the progress bar
        self.assertTrue(os.path.isfile(os.path.join(out, "digits.onnx")))


if __name__ == "__main__":
    unittest.main()
