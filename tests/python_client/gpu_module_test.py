"""ONNX Runtime's Module(..., device=...) on traind's GPU executor (OpenCL; pocl in CI): a Module on "gpu" trains
as one on "cpu" over the same artifacts and batches, "gpu:N" names a device of the daemon, and a daemon without any
OpenCL platform refuses a GPU Module with FAILED_PRECONDITION (never a CPU session in disguise). The GPU cases are
skipped, with a message, where this machine has no OpenCL device at all."""

import os
import unittest

import numpy as np

import traind_client
from daemon import Daemon, scratch_dir
from testing_models import WeightedAverageLoss, two_head_model
from traind_client.training import artifacts
from traind_client.training.api import CheckpointState, Module, Optimizer

BATCH = 4
# Bazel runs tests with HOME empty, where pocl would keep its compiled kernels under /.cache: the daemons share the
# per-user directory the C++ GPU tests use (engine/gpu/gpu_testing.cc), so each kernel compiles once per machine.
POCL_ENV = {} if os.environ.get("HOME", "").startswith("/") or "POCL_CACHE_DIR" in os.environ else {
    "POCL_CACHE_DIR": f"/tmp/traind-test-pocl-cache-{os.getuid()}"}


def batch(seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((BATCH, 3)).astype(np.float32), rng.standard_normal((BATCH, 2)).astype(np.float32),
            rng.standard_normal((BATCH, 5)).astype(np.float32))


def make_artifacts(client):
    directory = scratch_dir("artifacts")
    artifacts.generate_artifacts(two_head_model(BATCH), loss=WeightedAverageLoss(),
                                 optimizer=artifacts.OptimType.AdamW, artifact_directory=directory, client=client)
    return directory


def train(client, directory, device, steps):
    """Losses of `steps` AdamW steps, the eval loss, the final parameters and the session's executor of a Module on
    `device`."""
    state = CheckpointState.load_checkpoint(os.path.join(directory, "checkpoint"))
    module = Module(os.path.join(directory, "training_model.onnx"), state,
                    os.path.join(directory, "eval_model.onnx"), device=device, client=client)
    optimizer = Optimizer(os.path.join(directory, "optimizer_model.onnx"), module)
    losses = []
    for step in range(steps):
        module.train()
        loss = module(*batch(step))
        losses.append(float(np.asarray(loss)))
        optimizer.step()
        module.lazy_reset_grad()
    module.eval()
    eval_loss = float(np.asarray(module(*batch(100))))
    executor = client.get_session(module.session_id).executor
    module.close()
    return losses, eval_loss, {name: state.parameters[name].data for name in state.parameters}, executor


class GpuModuleTest(unittest.TestCase):
    def test_a_gpu_module_trains_as_a_cpu_module(self):
        with Daemon(env=POCL_ENV) as daemon:
            devices = daemon.client.get_server_info().gpu_devices
            if not devices:
                self.skipTest("no OpenCL device on this machine (install pocl-opencl-icd: deploy/setup.sh)")
            client = daemon.client
            directory = make_artifacts(client)
            cpu_losses, cpu_eval, cpu_params, cpu_executor = train(client, directory, "cpu", 5)
            gpu_losses, gpu_eval, gpu_params, gpu_executor = train(client, directory, "gpu", 5)
            self.assertEqual((cpu_executor, gpu_executor), (traind_client.v1.CPU, traind_client.v1.GPU))
            np.testing.assert_allclose(gpu_losses, cpu_losses, rtol=1e-4)
            self.assertAlmostEqual(gpu_eval, cpu_eval, delta=1e-4 * abs(cpu_eval))
            for name, value in cpu_params.items():
                np.testing.assert_allclose(gpu_params[name], value, rtol=1e-4, atol=1e-5, err_msg=name)
            # "gpu:N" names device N of GetServerInfo's list; one past the last is refused by the daemon.
            state = CheckpointState.load_checkpoint(os.path.join(directory, "checkpoint"))
            module = Module(os.path.join(directory, "training_model.onnx"), state, device=f"gpu:{len(devices)}",
                            client=client)
            with self.assertRaisesRegex(traind_client.InvalidArgumentError, "device_index"):
                module(*batch(0))

    def test_without_opencl_a_gpu_module_is_a_failed_precondition(self):
        # An empty ICD directory: the OpenCL loader finds no platform at all.
        with Daemon(env={"OCL_ICD_VENDORS": scratch_dir("no-icd")}) as daemon:
            self.assertEqual(list(daemon.client.get_server_info().executors), ["cpu"])
            directory = make_artifacts(daemon.client)
            state = CheckpointState.load_checkpoint(os.path.join(directory, "checkpoint"))
            module = Module(os.path.join(directory, "training_model.onnx"), state, device="cuda",
                            client=daemon.client)
            with self.assertRaises(traind_client.FailedPreconditionError) as raised:
                module(*batch(0))
            self.assertEqual(raised.exception.reason, "NO_GPU")
            self.assertIn("OpenCL", str(raised.exception))


if __name__ == "__main__":
    unittest.main()
