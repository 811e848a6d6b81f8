"""Crash-safe files for the manager's run state: the checkpoint format's atomic write (temp file, fsync, rename),
then an fsync of the directory so that the rename itself survives a power cut."""

import os

from traind_client._checkpoint import write_atomically as _write_file


def write_atomically(path, data):
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    _write_file(path, data)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
