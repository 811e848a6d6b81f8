"""What the Python benches share: this build's files from the runfiles, the CPU's name, CPU seconds from /proc,
and a traind daemon of this build on 127.0.0.1 port 0 with its own state directory."""

import json
import os
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def runfile(path, target):
    """A file of this build: beside this script in its runfiles tree, else under bazel-bin."""
    for candidate in (os.path.join(HERE, "..", path), os.path.join(HERE, "..", "bazel-bin", path)):
        if os.path.exists(candidate):
            return candidate
    raise FileNotFoundError(f"{path}: build it (bazel build -c opt {target})")


def busy_seconds():
    """CPU seconds the whole machine has been busy (all cores), from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, idle, iowait, irq, softirq, steal = values
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def process_seconds(pid):
    """CPU seconds of a process (all its threads, ended ones included)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_name():
    for line in subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines():
        if line.startswith("Model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


class Daemon:
    """traind on 127.0.0.1 port 0, `threads` per session by default, as deploy/run.sh starts it (GOMP_SPINCOUNT)."""

    def __init__(self, threads, target):
        self.state = tempfile.mkdtemp(prefix="traind-bench.")
        ready = os.path.join(self.state, "ready.json")
        env = dict(os.environ, GOMP_SPINCOUNT=os.environ.get("GOMP_SPINCOUNT", "10000"))
        self.process = subprocess.Popen(
            [runfile("server/traind", target), "--listen=127.0.0.1:0", "--metrics_listen=",
             f"--state_dir={self.state}/s", f"--ready_file={ready}", f"--default_num_threads={threads}",
             "--log_level=warn"], env=env)
        deadline = time.monotonic() + 60
        while not os.path.exists(ready):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("traind did not start")
            time.sleep(0.05)
        with open(ready) as f:
            self.address = json.load(f)["grpc_address"]

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=30)
