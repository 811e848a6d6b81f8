"""A real traind process for the Python client's tests: ephemeral ports on 127.0.0.1, a fresh state directory,
readiness from its --ready_file, and stopped (SIGTERM, then SIGKILL) when the test is done."""

import json
import os
import signal
import subprocess
import tempfile
import time
import urllib.request

import traind_client


def runfile(path):
    """A file of this workspace in the test's runfiles (or under $TRAIND_SOURCE_ROOT outside Bazel)."""
    if "TEST_SRCDIR" in os.environ:
        return os.path.join(os.environ["TEST_SRCDIR"], os.environ["TEST_WORKSPACE"], path)
    return os.path.join(os.environ.get("TRAIND_SOURCE_ROOT", "bazel-bin"), path)


def scratch_dir(name):
    return tempfile.mkdtemp(prefix=name + ".", dir=os.environ.get("TEST_TMPDIR"))


class Daemon:
    """`with Daemon("--flag=value") as daemon:` starts server/traind and connects daemon.client to it; `env` adds
    to (or overrides) the daemon's environment."""

    def __init__(self, *flags, threads=2, env=None):
        self.state_dir = scratch_dir("state")
        self.ready_file = self.state_dir + ".ready"
        self.log_path = self.state_dir + ".log"
        args = [runfile("server/traind"), "--listen=127.0.0.1:0", "--metrics_listen=127.0.0.1:0",
                f"--state_dir={self.state_dir}", f"--ready_file={self.ready_file}",
                f"--default_num_threads={threads}", *flags]
        # As deploy/run.sh and the systemd unit: idle OpenMP threads stop spinning soon, so that a daemon sharing
        # loaded cores with other tests is not slowed down many times over.
        env = dict(os.environ, GOMP_SPINCOUNT=os.environ.get("GOMP_SPINCOUNT", "10000"), **(env or {}))
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + 60
        while not os.path.exists(self.ready_file):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"traind did not start:\n{self.log()}")
            time.sleep(0.02)
        with open(self.ready_file) as file:
            ready = json.load(file)
        self.address = ready["grpc_address"]
        self.metrics_address = ready["metrics_address"]
        self.client = None

    def connect(self, **options):
        return traind_client.connect(self.address, **options)

    def log(self):
        with open(self.log_path, errors="replace") as file:
            return file.read()

    def metric(self, name, **labels):
        """The value of the first sample of a Prometheus metric of the daemon with these labels (0 when absent)."""
        text = urllib.request.urlopen(f"http://{self.metrics_address}/metrics", timeout=10).read().decode()
        for line in text.splitlines():
            series, _, value = line.rpartition(" ")
            metric, _, label_text = series.partition("{")
            if metric == name and all(f'{key}="{want}"' in label_text for key, want in labels.items()):
                return float(value)
        return 0.0

    def stop(self):
        if self.client is not None:
            self.client.close()
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self):
        self.client = self.connect()
        return self

    def __exit__(self, *exc_info):
        self.stop()
