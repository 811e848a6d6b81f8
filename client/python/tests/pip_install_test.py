"""The package installs the way Python users install things, offline: a venv over Debian's packages
(--system-site-packages) and `pip install --no-index ./client/python`, with the stubs generated while building and
nothing generated in the source tree beforehand."""

import os
import shutil
import subprocess
import tempfile
import unittest


def runfile(path):
    return os.path.join(os.environ["TEST_SRCDIR"], os.environ["TEST_WORKSPACE"], path)


class PipInstallTest(unittest.TestCase):
    def test_installs_offline_into_a_venv_and_imports(self):
        root = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        # A checkout's layout: client/python beside proto/ (copied, so pip's in-tree build writes here only).
        shutil.copytree(runfile("client/python"), os.path.join(root, "client", "python"),
                        ignore=shutil.ignore_patterns("tests", "BUILD.bazel", "*.runfiles*"))
        os.makedirs(os.path.join(root, "proto", "traind", "v1"))
        shutil.copyfile(runfile("proto/traind/v1/training_service.proto"),
                        os.path.join(root, "proto", "traind", "v1", "training_service.proto"))
        self.assertFalse(os.path.exists(os.path.join(root, "client/python/traind_client/_proto/"
                                                           "training_service_pb2.py")))
        venv = os.path.join(root, "venv")
        subprocess.run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv], check=True)
        env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
        env.pop("PYTHONPATH", None)
        install = subprocess.run([os.path.join(venv, "bin", "pip"), "install", "./client/python"], cwd=root,
                                 env=env, capture_output=True, text=True)
        self.assertEqual(install.returncode, 0, install.stdout + install.stderr)
        check = subprocess.run(
            [os.path.join(venv, "bin", "python"), "-c",
             "import traind_client, traind_client.training.api, traind_client.training.onnxblock, "
             "traind_client.training.artifacts as a; from traind_client._proto import training_service_pb2_grpc; "
             "print(traind_client.__file__, traind_client.v1.TrainStepRequest.DESCRIPTOR.full_name)"],
            cwd="/", env=env, capture_output=True, text=True)
        self.assertEqual(check.returncode, 0, check.stderr)
        self.assertIn(os.path.join(venv, "lib"), check.stdout)
        self.assertIn("traind.v1.TrainStepRequest", check.stdout)


if __name__ == "__main__":
    unittest.main()
