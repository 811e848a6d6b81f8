"""traind_client.fleet: federated training across many traind daemons.

    from traind_client import fleet
    devices = fleet.load_fleet("fleet.json")                 # or [fleet.Device("10.0.0.1:50051", data=...), ...]
    run = fleet.FederatedRun(devices, "artifacts/", rounds=10, strategy=fleet.FedAvg(),
                             local_epochs=1, batch_size=32, state_dir="run-state")
    history = run.run()                                       # resumes from run-state/ when it holds a run
    history.save_json("history.json"); history.plot("history.png")

Also a command line: `python3 -m traind_client.fleet --help` (run, status, plot), which `trainctl fleet` runs.
"""

from traind_client.fleet._devices import Device, load_fleet
from traind_client.fleet._history import History
from traind_client.fleet._run import DeviceFailure, FederatedRun, read_artifacts
from traind_client.fleet.strategies import (STRATEGIES, FedAdam, FedAvg, FedAvgM, FedMedian, FedTrimmedAvg,
                                            Strategy, clip_update, make_strategy)

__all__ = ["Device", "DeviceFailure", "FedAdam", "FedAvg", "FedAvgM", "FedMedian", "FedTrimmedAvg", "FederatedRun",
           "History", "STRATEGIES", "Strategy", "clip_update", "load_fleet", "make_strategy", "read_artifacts"]
