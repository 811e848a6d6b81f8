"""A fleet: the daemons a federated run trains on, each with how to reach it and which data it trains on.

A fleet file is JSON (paths in it are relative to the file):

    {"devices": [
       {"name": "edge-1", "address": "10.0.0.1:50051", "tls_ca": "ca.pem", "token_file": "edge.token",
        "data": {"local_path": "digits"}, "eval": {"fraction": 0.2}},
       {"name": "edge-2", "address": "10.0.0.2:50051", "data": {"npz_file": "shard2.npz"},
        "eval": {"npz_file": "shard2-val.npz"}, "fit_timeout": 1800}
    ]}

`data` / `eval`: {"local_path": P} names data under the daemon's own --data_dir (it never leaves the device);
{"npz_file": F} is a file the manager uploads to that daemon (by digest, once). `eval` may also be
{"fraction": f}: the last f of the device's shuffled training data, held back.
"""

import dataclasses
import json
import os
from typing import Optional

from traind_client._channel import connect


@dataclasses.dataclass
class Device:
    """One daemon of a fleet."""
    address: str
    name: str = ""
    data: Optional[dict] = None   # {"local_path": ...} or {"npz_file": ...}
    eval: Optional[dict] = None   # as data, or {"fraction": f}
    tls_ca: Optional[str] = None
    tls_cert: Optional[str] = None
    tls_key: Optional[str] = None
    tls_server_name: Optional[str] = None
    token: Optional[str] = dataclasses.field(default=None, repr=False)
    fit_timeout: Optional[float] = None  # this device's deadline per round (default: the run's fit_timeout)

    def __post_init__(self):
        if not self.address:
            raise ValueError("a device needs an address")
        self.name = self.name or self.address
        for what, spec in (("data", self.data), ("eval", self.eval)):
            if spec is None:
                continue
            keys = set(spec)
            allowed = {"local_path", "npz_file"} | ({"fraction"} if what == "eval" else set())
            if len(keys) != 1 or not keys <= allowed:
                raise ValueError(f"device {self.name}: {what} must be one of {sorted(allowed)} (got {sorted(keys)})")
        if self.data is None:
            raise ValueError(f"device {self.name}: no training data ('data')")

    def connect(self, **options):
        """A traind_client.Client for this device (lazy: nothing is sent until the first call)."""
        return connect(self.address, tls_ca=self.tls_ca, tls_cert=self.tls_cert, tls_key=self.tls_key,
                       tls_server_name=self.tls_server_name, token=self.token or "", **options)


def load_fleet(path):
    """The devices of a fleet file (format above)."""
    with open(path) as file:
        try:
            document = json.load(file)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}: not JSON: {error}") from None
    if not isinstance(document, dict) or not isinstance(document.get("devices"), list) or not document["devices"]:
        raise ValueError(f"{path}: expected {{\"devices\": [...]}} with at least one device")
    base = os.path.dirname(os.path.abspath(path))

    def resolve(value):
        return value if value is None or os.path.isabs(value) else os.path.join(base, value)

    devices = []
    for index, entry in enumerate(document["devices"]):
        if not isinstance(entry, dict):
            raise ValueError(f"{path}: device {index} is not an object")
        entry = dict(entry)
        unknown = set(entry) - {"name", "address", "data", "eval", "tls_ca", "tls_cert", "tls_key",
                                "tls_server_name", "token_file", "fit_timeout"}
        if unknown:
            raise ValueError(f"{path}: device {index}: unknown keys {sorted(unknown)}")
        token = None
        if entry.get("token_file"):
            with open(resolve(entry.pop("token_file"))) as file:
                token = file.read(4096).strip()
        for key in ("tls_ca", "tls_cert", "tls_key"):
            entry[key] = resolve(entry.get(key))
        for key in ("data", "eval"):
            if isinstance(entry.get(key), dict) and "npz_file" in entry[key]:
                entry[key] = {"npz_file": resolve(entry[key]["npz_file"])}
        devices.append(Device(token=token, **entry))
    names = [device.name for device in devices]
    if len(set(names)) != len(names):
        raise ValueError(f"{path}: device names must be unique")
    return devices
