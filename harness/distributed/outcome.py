"""What a launch leaves: each rank's report, and each sub-check's outcome across ranks.

Plain data read back from the ranks' files (Note [Rank results on disk] in
:mod:`harness.distributed.rankfiles`); the judging of the values is
:mod:`harness.distributed.judge`'s.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional


class DistributedError(AssertionError):
    """A distributed check did not complete: rank exceptions or hung ranks, all named."""


@dataclasses.dataclass
class RankError:
    """An exception raised on one rank, with its traceback."""

    rank: int
    type: str
    message: str
    traceback: str

    def describe(self) -> str:
        return (f"rank {self.rank} raised {self.type}: {self.message}\n"
                + _indent(self.traceback.rstrip()))


@dataclasses.dataclass
class RankReport:
    """Everything one rank left behind (Note [Rank results on disk])."""

    rank: int
    pid: int
    exit_code: Optional[int]
    state: str  # starting | ready | running | finished | crashed | missing
    current: Optional[str]
    results: dict[str, dict]
    killed: bool = False
    stack: str = ""
    log_tail: str = ""
    device: str = ""  # the torch device the rank made current (``npu:1``), "" before that
    notes: dict = dataclasses.field(default_factory=dict)
    """sub-check -> what the rank noted while in it (``RankContext.note``)."""
    fallback_ops: list = dataclasses.field(default_factory=list)
    """ops the rank's output reports falling back to the CPU (Note [Fallbacks on every
    rank] in :mod:`harness.distributed.launcher`)."""


@dataclasses.dataclass
class CheckOutcome:
    """One sub-check across ranks: each rank's value, each rank's error, who never finished."""

    name: str
    world_size: int
    values: dict[int, Any]
    errors: dict[int, RankError]
    hung: list[int]           # ranks still inside this sub-check when they were killed
    not_reached: list[int]    # ranks that stopped (hung, crashed) before reaching it
    context: str = ""         # launch-level detail (timeouts, crashed ranks, logs)
    devices: dict[int, str] = dataclasses.field(default_factory=dict)
    """rank -> the device it ran on, as the rank reported it (``npu:1``)."""
    notes: dict[int, dict] = dataclasses.field(default_factory=dict)
    """rank -> what it noted in this sub-check (``RankContext.note``), finished or not."""
    logs: dict[int, str] = dataclasses.field(default_factory=dict)
    """rank -> the end of its output, for ranks that did not finish the launch."""
    fallbacks: dict[int, list] = dataclasses.field(default_factory=dict)
    """rank -> ops its output reports falling back to the CPU (the whole launch)."""

    @property
    def ok(self) -> bool:
        return not (self.errors or self.hung or self.not_reached)

    @property
    def finished(self) -> list[int]:
        return sorted(self.values) + sorted(self.errors)

    def problem(self) -> str:
        """Why this sub-check is not complete ("" when every rank returned a value)."""
        if self.ok:
            return ""
        lines = [f"distributed check {self.name!r} (world size {self.world_size}):"]
        if self.hung:
            lines.append(f"ranks {self.hung} hung in {self.name!r} and were killed; ranks "
                         f"{sorted(self.values) + sorted(self.errors)} finished it")
        if self.not_reached:
            lines.append(f"ranks {self.not_reached} never reached {self.name!r}")
        for error in self.errors.values():
            lines.append(error.describe())
        if self.context:
            lines.append(self.context)
        return "\n".join(lines)

    def raise_if_failed(self) -> None:
        __tracebackhide__ = True
        if not self.ok:
            raise DistributedError(self.problem())


@dataclasses.dataclass
class LaunchResult:
    """A launch: every rank's report, and whether the watchdog had to kill it."""

    world_size: int
    backend: str
    port: int
    ranks: list[RankReport]
    checks: list[str]
    timed_out: bool
    timeout: float
    seconds: float
    out_dir: str
    why: str = ""  # why the watchdog killed the ranks
    began: float = 0.0  # wall clock (``time.time()``) when the first rank was started

    @property
    def hung(self) -> list[int]:
        """Ranks that had not finished every sub-check when they were killed."""
        return sorted(r.rank for r in self.ranks if r.killed and r.state != "finished")

    @property
    def finished(self) -> list[int]:
        return sorted(r.rank for r in self.ranks if r.state == "finished")

    def summary(self) -> str:
        lines = []
        if self.timed_out:
            lines.append(f"{self.why}: killed; ranks {self.hung} hung, ranks "
                         f"{self.finished} finished")
        for report in self.ranks:
            where = f" in {report.current!r}" if report.current else ""
            if report.state != "finished" or report.exit_code not in (0, None):
                lines.append(f"rank {report.rank} (pid {report.pid}): {report.state}{where}, "
                             f"exit code {report.exit_code}"
                             + (" (killed by the launcher)" if report.killed else ""))
                if report.stack:
                    lines.append(f"  rank {report.rank} stack when killed:\n"
                                 + _indent(_trim_stack(report.stack), 4))
                if report.log_tail:
                    lines.append(f"  rank {report.rank} output ends:\n"
                                 + _indent(report.log_tail, 4))
        return "\n".join(lines)

    def outcome(self, name: str) -> CheckOutcome:
        """The outcome of one sub-check (by name) across every rank."""
        if name not in self.checks:
            raise KeyError(f"sub-check {name!r} was not part of this launch; it ran "
                           f"{self.checks}")
        values: dict[int, Any] = {}
        errors: dict[int, RankError] = {}
        hung: list[int] = []
        not_reached: list[int] = []
        for report in self.ranks:
            result = report.results.get(name)
            if result is not None and result.get("ok"):
                values[report.rank] = result.get("value")
            elif result is not None:
                errors[report.rank] = RankError(report.rank, result.get("type", "?"),
                                                result.get("message", ""),
                                                result.get("traceback", ""))
            elif report.current == name and report.state == "running" and report.killed:
                hung.append(report.rank)
            elif report.current == name:
                errors[report.rank] = RankError(
                    report.rank, "RankDied", f"the rank process ended (exit code "
                    f"{report.exit_code}, state {report.state}) inside {name!r}",
                    report.log_tail)
            else:
                not_reached.append(report.rank)
        context = "" if not (hung or not_reached) else self.summary()
        return CheckOutcome(name, self.world_size, values, errors, sorted(hung),
                            sorted(not_reached), context,
                            {r.rank: r.device for r in self.ranks if r.device},
                            {r.rank: r.notes[name] for r in self.ranks if name in r.notes},
                            {r.rank: r.log_tail for r in self.ranks if r.log_tail},
                            {r.rank: r.fallback_ops for r in self.ranks if r.fallback_ops})

    def outcomes(self) -> dict[str, CheckOutcome]:
        return {name: self.outcome(name) for name in self.checks}

    def to_json(self) -> dict:
        """Everything :meth:`from_json` needs, plus ``hung`` and ``finished`` for readers."""
        return {"world_size": self.world_size, "backend": self.backend, "port": self.port,
                "checks": list(self.checks), "timed_out": self.timed_out,
                "timeout": self.timeout, "seconds": round(self.seconds, 2),
                "out_dir": self.out_dir, "why": self.why, "began": self.began,
                "hung": self.hung, "finished": self.finished,
                "ranks": [dataclasses.asdict(r) for r in self.ranks]}

    @classmethod
    def from_json(cls, data: dict) -> LaunchResult:
        """A launch another process made (Note [Distributed launches under xdist] in
        :mod:`harness.distributed.cases`)."""
        ranks = [RankReport(**report) for report in data["ranks"]]
        return cls(data["world_size"], data["backend"], data["port"], ranks,
                   list(data["checks"]), data["timed_out"], data["timeout"],
                   data["seconds"], data["out_dir"], data.get("why", ""),
                   data.get("began", 0.0))


def _indent(text: str, n: int = 2) -> str:
    return "\n".join(" " * n + line for line in text.splitlines())


def _trim_stack(text: str, keep: int = 40) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return "\n".join(lines[-keep:])
