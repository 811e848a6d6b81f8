"""A progress bar per round: redrawn in place on a terminal, one line per finished round otherwise."""

import sys


class RoundProgress:
    def __init__(self, round_number, rounds, devices, stream=None, width=24):
        self.round, self.rounds, self.devices, self.width = round_number, rounds, devices, width
        self.stream = stream if stream is not None else sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.ok = self.failed = 0

    def _line(self, suffix=""):
        done = self.ok + self.failed
        filled = int(self.width * done / max(1, self.devices))
        return (f"round {self.round:3d}/{self.rounds} [{'#' * filled}{'.' * (self.width - filled)}] "
                f"{done}/{self.devices} devices ({self.failed} failed){suffix}")

    def device_done(self, ok):
        if ok:
            self.ok += 1
        else:
            self.failed += 1
        if self.tty:
            self.stream.write("\r" + self._line())
            self.stream.flush()

    def finish(self, summary):
        self.stream.write(("\r" if self.tty else "") + self._line("  " + summary) + "\n")
        self.stream.flush()
