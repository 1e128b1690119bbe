"""Records and run results: the data model every check writes and baselines keep.

A :class:`Record` is what one check measured (pass or fail): a status, metrics, and a
:class:`Rule` per metric saying which direction is better and how much change is a
regression. A :class:`RunResults` is one run's records plus its fingerprint; a baseline
is a results file kept (see :mod:`harness.baselines`). Every field of the file, its
versions and their migrations: docs/schema.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gzip
import json
import math
import os
import re
import tempfile
import zlib
from pathlib import Path
from typing import Any, Callable, Optional, Union

from harness.ids import STATUSES, Status

SCHEMA_VERSION = 2
"""The version this harness writes and reads (older ones through :data:`MIGRATIONS`)."""
BETTER = ("lower", "higher", "equal")
SEVERITIES = ("review", "regression")

MetricValue = Union[float, int, bool, str, None]
NON_FINITE = ("inf", "-inf", "nan")
"""How a non-finite float metric is stored (JSON has no inf/nan)."""


class SchemaError(ValueError):
    """A results or baseline document that does not follow the schema."""


class NewerSchemaError(SchemaError):
    """A document written by a newer harness (a ``schema_version`` above ours)."""


# Note [Schema versions and migrations]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A baseline lives for months and is committed; the harness that reads it changes. So a
# file says which schema wrote it (``schema_version``) and this module reads every older
# version through a chain of steps, as asv does with ``api_version`` and its
# ``update_to_N`` functions: ``update_to_N`` takes a version N-1 document and returns the
# version N one, and :func:`migrate` applies the steps from the file's version up to
# :data:`SCHEMA_VERSION`. A document newer than this harness is refused (its fields may
# mean something this code does not know), with the fix: upgrade the harness.
#
# Changing the format is therefore: bump SCHEMA_VERSION, write ``update_to_<N>`` (pure,
# on plain JSON data: give every field the old version lacked the value that says what an
# old file meant, rename or reshape what changed) and add its row to MIGRATIONS; then a
# test that reads a version N-1 file (tests/test_results.py) and the table in
# docs/schema.md. A step never reads the new code's defaults: it writes what the old
# file meant, so the reader can rely on the field being there. Writing always uses the
# newest version; nothing writes an old one.


def update_to_2(doc: dict) -> dict:
    """Version 1 -> 2: the run-level fields the judgement reads are always present.

    Version 1 wrote ``faults`` only when a fault was active and ``complete`` only when the
    session did not finish, so their absence meant none and complete; ``seed`` could be
    missing in hand-made files. ``selection`` (which checks the run selected: filters,
    markers, ``--run-slow``) is new in version 2; a version 1 file did not record it, so it
    is ``None``: unknown, which a comparison must treat as "maybe different".

    Two things version 1 said elsewhere: its harness errors (an unusable baseline, an
    unwritable path) were only in ``verdict.errors``, and version 2 judges from the
    run-level ``errors``, so they are copied there (a run that was NO-GO for them stays
    NO-GO when judged again); and a benchmark judged slower than its baseline was recorded
    ``fail`` (its record carries ``info.bench_verdict``), which version 2 calls ``slower``.
    """
    doc.setdefault("seed", None)
    doc.setdefault("faults", [])
    doc.setdefault("complete", True)
    doc.setdefault("selection", None)
    verdict = doc.get("verdict")
    said = verdict.get("errors") if isinstance(verdict, dict) else None
    doc.setdefault("errors", [e for e in said if isinstance(e, str)]
                   if isinstance(said, list) else [])
    records = doc.get("records")
    if isinstance(records, dict):
        doc["records"] = {rid: _slower_if_bench_fail(rec) for rid, rec in records.items()}
    return doc


def _slower_if_bench_fail(record: Any) -> Any:
    """A version 1 benchmark record that failed its bench verdict, as ``slower``."""
    if isinstance(record, dict) and record.get("status") == "fail" \
            and record.get("suite") == "bench" \
            and isinstance(record.get("info"), dict) and "bench_verdict" in record["info"]:
        return {**record, "status": "slower"}
    return record


MIGRATIONS: dict[int, Callable[[dict], dict]] = {
    2: update_to_2,
}
"""Target version -> the step from the version before it (Note [Schema versions and
migrations]). One row per version above 1, none missing (checked at import)."""

if sorted(MIGRATIONS) != list(range(2, SCHEMA_VERSION + 1)):
    raise ImportError(f"harness.results: MIGRATIONS has steps to {sorted(MIGRATIONS)} but "
                      f"SCHEMA_VERSION {SCHEMA_VERSION} needs exactly one step to each of "
                      f"{list(range(2, SCHEMA_VERSION + 1))}: add the missing update_to_N")


def migrate(data: Any, source: str = "document") -> dict:
    """``data`` (a parsed results file of any known version) as a :data:`SCHEMA_VERSION`
    document; the input is not changed.

    Raises :class:`NewerSchemaError` for a file written by a newer harness (``source``,
    e.g. the path, names it in the message) and :class:`SchemaError` for a document that
    has no usable ``schema_version``.
    """
    if not isinstance(data, dict):
        raise SchemaError("top level is not an object")
    version = data.get("schema_version")
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise SchemaError(f"schema_version is {version!r}, expected a version number from "
                          f"1 to {SCHEMA_VERSION}; it was written by another tool")
    if version > SCHEMA_VERSION:
        raise NewerSchemaError(
            f"{source}: schema_version {version} is newer than this harness reads "
            f"(versions 1 to {SCHEMA_VERSION}); a newer harness wrote it. Upgrade the "
            "harness (pip install --upgrade npu-conformance, or update the checkout) to "
            "read it; do not re-record it with this one")
    doc = dict(data)
    for target in range(version + 1, SCHEMA_VERSION + 1):
        doc = MIGRATIONS[target](doc)
        doc["schema_version"] = target
    return doc


class DuplicateRecord(ValueError):
    """Two checks of one run recorded the same id (the message names both tests)."""


@dataclasses.dataclass(frozen=True)
class Rule:
    """How a metric may change before it is a regression.

    ``better="lower"``: regression when ``new > max(old * rel, old + abs)``;
    ``better="higher"``: regression when ``new < min(old / rel, old - abs)``;
    ``better="equal"``: regression when ``|new - old| > abs`` (or when non-numeric
    values differ). ``abs`` is the absolute floor, so a baseline of exactly 0.0 does not
    turn 1e-9 into an infinite regression. ``noise`` (optional) makes the comparison
    noise-aware: the record carries ``<metric>.spread`` (e.g. the samples' MAD), and a
    change must also exceed ``noise`` times the combined spread.

    ``severity`` says what a change beyond the rule means (Note [Review or regression]
    in :mod:`harness.regress`): ``"review"`` (a metric moved while the check still
    passes: a person looks, the run is not NO-GO) or ``"regression"`` (the change itself
    is a loss: a lower max batch, a slower benchmark, another optimizer-state dtype).
    Unset, it is ``"regression"`` for ``equal`` rules and ``"review"`` otherwise.
    """

    better: str = "lower"
    rel: float = 2.0
    abs: float = 0.0
    noise: Optional[float] = None
    severity: Optional[str] = None

    def __post_init__(self) -> None:
        if self.better not in BETTER:
            raise SchemaError(f"rule better={self.better!r}; expected one of {BETTER}")
        if not (isinstance(self.rel, (int, float)) and self.rel >= 1.0):
            raise SchemaError(f"rule rel={self.rel!r}; expected a ratio >= 1.0")
        if not (isinstance(self.abs, (int, float)) and self.abs >= 0):
            raise SchemaError(f"rule abs={self.abs!r}; expected a number >= 0")
        if self.noise is not None and not (isinstance(self.noise, (int, float))
                                           and not isinstance(self.noise, bool)
                                           and self.noise >= 0):
            raise SchemaError(f"rule noise={self.noise!r}; expected a number >= 0")
        if self.severity is not None and self.severity not in SEVERITIES:
            raise SchemaError(f"rule severity={self.severity!r}; expected one of {SEVERITIES}")

    @property
    def alerts_as(self) -> str:
        """What a change beyond this rule is: ``"review"`` or ``"regression"``."""
        if self.severity is not None:
            return self.severity
        return "regression" if self.better == "equal" else "review"

    def to_json(self) -> dict:
        return dict(self.json)

    @functools.cached_property
    def json(self) -> dict:
        """:meth:`to_json`, built once per rule and shared (read it, never change it):
        a default run writes 200,000 rules, 19,000 distinct ones (:meth:`from_json`)."""
        out = {"better": self.better, "rel": self.rel, "abs": self.abs}
        if self.noise is not None:
            out["noise"] = self.noise
        if self.severity is not None:
            out["severity"] = self.severity
        return out

    @classmethod
    def from_json(cls, data: Any) -> Rule:
        """The rule ``data`` describes; one shared (frozen) instance per description: the
        default run's 83,000 rules are 19,000 distinct ones, and every test's records are
        read back from JSON (Note [Records travel with reports]), the baseline's too."""
        if isinstance(data, Rule):
            return data
        if not isinstance(data, dict):
            raise SchemaError(f"rule {data!r} is not an object")
        try:  # the type too: {"rel": 2} and {"rel": 2.0} write back as they were read
            key: Optional[tuple] = (tuple(data.items()), tuple(map(type, data.values())))
            return _RULES[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable value: refused below, never cached
            key = None
        unknown = set(data) - {"better", "rel", "abs", "noise", "severity"}
        if unknown:
            raise SchemaError(f"rule has unknown keys {sorted(unknown)}")
        rule = cls(**data)
        if key is not None and len(_RULES) < _RULES_KEPT:
            _RULES[key] = rule
        return rule

    def describe(self) -> str:
        noise = f", noise x{self.noise}" if self.noise is not None else ""
        if self.better == "equal":
            return f"must stay equal (tolerance {self.abs:g})"
        return f"{self.better} is better, ratio {self.rel:g}, floor {self.abs:g}{noise}"


_RULES: dict[tuple, Rule] = {}
_RULES_KEPT = 1 << 16
"""Rules built from JSON, by their description (:meth:`Rule.from_json`); past
``_RULES_KEPT`` descriptions new ones are built and not kept (a few MB at most)."""


def lower(rel: float = 2.0, abs: float = 0.0, **kw) -> Rule:  # noqa: A002 - mirrors JSON
    """A rule for an error-like metric (lower is better)."""
    return Rule("lower", rel, abs, **kw)


def higher(rel: float = 1.0, abs: float = 0.0, **kw) -> Rule:  # noqa: A002
    """A rule for a quality-like metric (higher is better)."""
    return Rule("higher", max(rel, 1.0), abs, **kw)


def equal(abs: float = 0.0) -> Rule:  # noqa: A002
    """A rule for a metric that must not change (dtypes, counts, max batch)."""
    return Rule("equal", 1.0, abs)


@dataclasses.dataclass
class Record:
    """What one check measured."""

    id: str
    status: str = "pass"
    metrics: dict[str, MetricValue] = dataclasses.field(default_factory=dict)
    rules: dict[str, Rule] = dataclasses.field(default_factory=dict)
    suite: str = ""
    test: str = ""
    message: str = ""
    info: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.id or not isinstance(self.id, str):
            raise SchemaError(f"record id {self.id!r} must be a non-empty string")
        if self.status not in STATUSES:
            raise SchemaError(f"record {self.id}: status {self.status!r}; expected one of "
                              f"{STATUSES}")
        self.status = Status(self.status)  # Note [One status type] in harness/ids.py
        rules, metrics = self.rules, self.metrics
        # the usual record (Rules, and numbers whose sum is finite, which it is only if
        # each is) is checked by C loops; anything else value by value
        if {*map(type, rules.values())} <= _RULE_TYPE:
            self.rules = dict(rules)
        else:
            self.rules = {name: Rule.from_json(rule) for name, rule in rules.items()}
        numbers = {*map(type, metrics.values())} <= _NUMBER_TYPES
        if numbers and _finite_sum(metrics.values()):
            self.metrics = dict(metrics)
        else:
            self.metrics = {name: _clean_metric(self.id, name, value)
                            for name, value in metrics.items()}
        missing = self.rules.keys() - self.metrics.keys()
        if missing:
            raise SchemaError(f"record {self.id}: rules for metrics it lacks: {sorted(missing)}")
        if not numbers:  # only a string metric can break its rule's kind
            for name, rule in self.rules.items():
                value = self.metrics[name]
                if rule.better != "equal" and isinstance(value, str) and value not in NON_FINITE:
                    raise SchemaError(f"record {self.id}: metric {name}={value!r} is a string "
                                      f"but its rule is '{rule.better} is better'; store a "
                                      "number (strings are for metrics under an equal rule)")
        if not self.suite:
            self.suite = self.id.split("/", 1)[0]

    @property
    def headline(self) -> str:
        """The message in one line, as summaries and the report's tables show it: its
        first line, and the next where the first only introduces it ("distributed check
        'barrier' (world size 2):" says where, the next line what went wrong)."""
        lines = [line.strip() for line in self.message.splitlines() if line.strip()]
        if len(lines) > 1 and lines[0].endswith(":"):
            return f"{lines[0]} {lines[1]}"
        return lines[0] if lines else ""

    def to_json(self) -> dict:
        out: dict[str, Any] = {"suite": self.suite, "status": self.status,
                               "metrics": dict(self.metrics),
                               "rules": {k: r.json for k, r in self.rules.items()}}
        if self.test:
            out["test"] = self.test
        if self.message:
            out["message"] = self.message
        if self.info:
            out["info"] = self.info
        return out

    @classmethod
    def from_json(cls, record_id: str, data: Any) -> Record:
        if not isinstance(data, dict):
            raise SchemaError(f"record {record_id}: not an object")
        unknown = set(data) - {"suite", "status", "metrics", "rules", "test", "message", "info"}
        if unknown:
            raise SchemaError(f"record {record_id}: unknown keys {sorted(unknown)}")
        for key, kind in (("metrics", dict), ("rules", dict), ("info", dict)):
            if key in data and not isinstance(data[key], kind):
                raise SchemaError(f"record {record_id}: {key} must be an object")
        return cls(id=record_id, status=data.get("status", ""), metrics=data.get("metrics", {}),
                   rules=data.get("rules", {}), suite=data.get("suite", ""),
                   test=data.get("test", ""), message=data.get("message", ""),
                   info=data.get("info", {}))


_RULE_TYPE = {Rule}
_NUMBER_TYPES = {float, int}


def _finite_sum(values) -> bool:
    """Whether ``sum(values)`` is finite (an int past the float range: False)."""
    try:
        return math.isfinite(sum(values))
    except OverflowError:
        return False


def _clean_metric(record_id: str, name: str, value: Any) -> MetricValue:
    kind = type(value)
    if kind is float:  # most metrics: the one check a finite float needs
        return value if math.isfinite(value) else repr(value)
    if kind is int or kind is str:
        return value
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return repr(value)  # JSON has no inf/nan; keep it readable and comparable
        return value
    try:  # numpy / torch scalars
        return _clean_metric(record_id, name, value.item())
    except AttributeError:
        raise SchemaError(f"record {record_id}: metric {name}={value!r} is not a JSON "
                          "scalar") from None


@dataclasses.dataclass
class RunResults:
    """One run: fingerprint, records, per-test outcomes, and what regress found."""

    fingerprint: dict[str, Any]
    records: dict[str, Record] = dataclasses.field(default_factory=dict)
    started: str = ""
    finished: str = ""
    seed: Optional[int] = None
    outcomes: dict[str, str] = dataclasses.field(default_factory=dict)
    findings: list[dict] = dataclasses.field(default_factory=list)
    baseline: Optional[str] = None
    faults: list[str] = dataclasses.field(default_factory=list)
    complete: bool = True
    verdict: Optional[dict] = None
    selection: Optional[dict[str, Any]] = None
    """What the run selected (``markexpr``, ``keyword``, ``op_filter``, ``run_slow``,
    ``run_benchmarks``, ``args``; None: unknown): a comparison across different
    selections says so (:mod:`harness.verdict`)."""
    errors: list[str] = dataclasses.field(default_factory=list)
    """Harness errors of the run (an unusable baseline, an unwritable path, a duplicate
    record id): each makes the run NO-GO."""

    def add(self, record: Record) -> None:
        """Add one record; :class:`DuplicateRecord` naming both tests when its id is taken."""
        old = self.records.get(record.id)
        if old is not None:
            raise DuplicateRecord(
                f"record id {record.id!r} recorded twice in one run: by "
                f"{old.test or '(unknown test)'} and by {record.test or '(unknown test)'}; "
                "give one of the checks another id")
        self.records[record.id] = record

    def to_json(self) -> dict:
        out: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION, "fingerprint": self.fingerprint,
            "started": self.started, "finished": self.finished, "seed": self.seed,
            "records": {rid: self.records[rid].to_json() for rid in sorted(self.records)},
        }
        if self.outcomes:
            out["outcomes"] = dict(sorted(self.outcomes.items()))
        if self.findings:
            out["findings"] = self.findings
        if self.baseline:
            out["baseline"] = self.baseline
        if self.faults:
            out["faults"] = self.faults
        if not self.complete:
            out["complete"] = False
        if self.verdict is not None:
            out["verdict"] = self.verdict
        if self.selection is not None:
            out["selection"] = self.selection
        if self.errors:
            out["errors"] = self.errors
        return out

    @classmethod
    def from_json(cls, data: Any, source: str = "document") -> RunResults:
        """A run from a parsed results file of any known version (read through
        :func:`migrate`; ``source`` names the file in a version error)."""
        data = migrate(data, source)
        fingerprint = data.get("fingerprint")
        if not isinstance(fingerprint, dict) or "device_type" not in fingerprint \
                or "stack_id" not in fingerprint:
            raise SchemaError("fingerprint is missing or lacks device_type/stack_id")
        records = data.get("records")
        if not isinstance(records, dict):
            raise SchemaError("records is missing or not an object")
        _check_types(data)
        return cls(fingerprint=fingerprint,
                   records={rid: Record.from_json(rid, rec) for rid, rec in records.items()},
                   started=data.get("started", ""), finished=data.get("finished", ""),
                   seed=data.get("seed"), outcomes=data.get("outcomes", {}),
                   findings=data.get("findings", []), baseline=data.get("baseline"),
                   faults=data.get("faults", []), complete=data.get("complete", True) is not False,
                   verdict=data.get("verdict"), selection=data.get("selection"),
                   errors=list(data.get("errors") or []))


_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "started": (str,), "finished": (str,), "seed": (int, type(None)), "outcomes": (dict,),
    "findings": (list,), "baseline": (str, type(None)), "faults": (list,),
    "complete": (bool,), "verdict": (dict, type(None))}


def _check_types(data: dict) -> None:
    """The top-level fields' types, and a fingerprint whose ids are usable (a
    ``stack_id`` of ``"garbage"`` would fail every reader that sorts stacks)."""
    from harness.stack import split_stack_id

    for key, types in _FIELD_TYPES.items():
        if key in data and not isinstance(data[key], types):
            raise SchemaError(f"{key} is a {type(data[key]).__name__}; expected "
                              f"{' or '.join(t.__name__ for t in types)}")
    fingerprint = data["fingerprint"]
    for key in ("device_type", "stack_id", "device_slug"):
        if key in fingerprint and not isinstance(fingerprint[key], str):
            raise SchemaError(f"fingerprint {key} is not a string")
    try:
        split_stack_id(fingerprint["stack_id"])
    except ValueError as exc:
        raise SchemaError(f"fingerprint: {exc}") from None
    for key, value in data.get("outcomes", {}).items():
        if not isinstance(value, str):
            raise SchemaError(f"outcome of {key!r} is not a string")
    for record in data["records"].values():
        if isinstance(record, dict):
            for key in ("suite", "test", "message", "status"):
                if key in record and not isinstance(record[key], str):
                    raise SchemaError(f"a record's {key} is not a string")


# ------------------------------------------------------------------------------ I/O

def atomic_write_text(path: Union[str, Path], text: Union[str, bytes]) -> None:
    """Write ``text`` (or bytes) so that ``path`` holds either the old or the new content,
    never half.

    Temp file in the same folder, flush, fsync, rename over the target, fsync the folder.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp",
                               dir=path.parent)
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a baseline is a shared file
        data = text.encode("utf-8") if isinstance(text, str) else text
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def remove_stale_temp_files(path: Union[str, Path]) -> list[Path]:
    """Delete temp files of :func:`atomic_write_text` for ``path`` left by a killed process.

    A temp file is named ``.<name>.<pid>.<random>.tmp``; one whose process no longer runs
    was left by a ``kill -9`` (a signal nothing can clean up after) and is removed here,
    by the next writer.
    """
    path = Path(path)
    removed = []
    for tmp in path.parent.glob(f".{path.name}.*.tmp"):
        pid = tmp.name[len(path.name) + 2:].split(".", 1)[0]
        if pid.isdigit() and not pid_alive(int(pid)):
            with contextlib.suppress(OSError):
                tmp.unlink()
                removed.append(tmp)
    return removed


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (ours counts as running)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# Note [A run encoded once]
# ~~~~~~~~~~~~~~~~~~~~~~~~~
# A run's end writes its records twice: one per line in the results file (:func:`dumps`)
# and as one compact object in the store (``harness.store``). Both hold each record's
# compact JSON, so the records are encoded once (:func:`encode`, one encoder for ~10,000
# records) and each writer joins the same texts: the file byte for byte as before, the
# store's body ``json.dumps(records, separators=(",", ":"))`` byte for byte (its digest,
# which makes storing a run again store nothing, is unchanged).

_RECORD_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


@dataclasses.dataclass(frozen=True)
class Encoded:
    """A run's document with its records encoded once (Note [A run encoded once]):
    ``head`` is the document without ``records``; ``records`` each record as ``(its id,
    the record)`` in compact JSON text, in the run's order."""

    head: dict
    records: list[tuple[str, str]]

    def compact_records(self) -> str:
        """The records object as ``json.dumps(records, separators=(",", ":"))`` makes it."""
        return "{" + ",".join([f"{rid}:{rec}" for rid, rec in self.records]) + "}"


def encode(results: RunResults, doc: Optional[dict] = None) -> Encoded:
    """``results`` (or ``doc``, its ``to_json()``, read and not changed) as :class:`Encoded`."""
    doc = results.to_json() if doc is None else doc
    record = _RECORD_ENCODER.encode
    return Encoded({key: value for key, value in doc.items() if key != "records"},
                   [(json.dumps(rid), record(rec)) for rid, rec in doc["records"].items()])


def dumps(results: RunResults, encoded: Optional[Encoded] = None) -> str:
    """JSON with one record per line: compact for 10,000 records, readable in a diff.
    ``encoded``: its :func:`encode` when the caller has it (Note [A run encoded once])."""
    encoded = encode(results) if encoded is None else encoded
    head = json.dumps(encoded.head, indent=1, allow_nan=False)[:-2]  # drop the closing "\n}"
    lines = [f" {rid}: {rec}" for rid, rec in encoded.records]
    body = ",\n".join(lines)
    return f'{head},\n "records": {{\n{body}\n }}\n}}\n' if lines else \
        f'{head},\n "records": {{}}\n}}\n'


RESULT_NAME = re.compile(r"^\d{8}T\d{6,12}Z-[a-z0-9]+\.json(\.gz)?$")
"""``results/<UTC time>-<device_type>.json.gz``: what :func:`prune` may delete (plain
``.json`` too: what earlier harnesses wrote)."""
RESULTS_SUFFIX = ".json.gz"
"""What a run writes: the JSON of :func:`dumps`, gzip-compressed (Note [Compressed run
files])."""
GZIP_LEVEL = 3
GZIP_MAGIC = b"\x1f\x8b"

# Note [Compressed run files]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A default run's file is ~10,000 records of metrics and rules, 10 to 14 MB of JSON written
# at the end of every run, kept in results/, uploaded by CI and read by every view. Its text
# repeats itself (the same metric names and rules in every record), so gzip (level 3)
# keeps ~12% of it: the JSON inside is byte for byte what :func:`dumps` makes, so no field
# changes and ``zcat run.json.gz | jq`` reads it. Baselines stay plain ``.json``: they are
# reviewed in git, where a diff must be readable. :func:`load` reads both, by the content's
# first bytes (not the name), and caps the decompressed size as it caps a plain file's.


def is_results_file(path: Union[str, Path]) -> bool:
    """Whether ``path`` is named like a results or baseline file (``.json``, ``.json.gz``)."""
    name = Path(path).name
    return name.endswith(".json") or name.endswith(RESULTS_SUFFIX)


def run_name(path: Union[str, Path]) -> str:
    """A results file's name without ``.json`` / ``.json.gz``: the run a file is."""
    name = Path(path).name
    return name[:-len(RESULTS_SUFFIX)] if name.endswith(RESULTS_SUFFIX) else \
        name.removesuffix(".json")


def results_files(folder: Union[str, Path]) -> list[Path]:
    """The results files in ``folder`` (``*.json`` and ``*.json.gz``), sorted by name."""
    folder = Path(folder)
    return sorted(p for p in folder.iterdir() if p.is_file() and is_results_file(p)) \
        if folder.is_dir() else []


def prune(folder: Union[str, Path], keep: int) -> list[Path]:
    """Keep the newest ``keep`` run files in ``folder`` (names sort by time); 0 keeps all."""
    folder = Path(folder)
    if keep <= 0 or not folder.is_dir():
        return []
    runs = sorted(p for p in folder.iterdir() if RESULT_NAME.match(p.name))
    removed = []
    for path in runs[:-keep]:
        with contextlib.suppress(OSError):
            path.unlink()
            removed.append(path)
    return removed


def write(results: RunResults, path: Union[str, Path],
          encoded: Optional[Encoded] = None) -> Path:
    """Write atomically: gzip-compressed where the name ends ``.gz`` (a run's file), plain
    JSON otherwise (a baseline) (Note [Compressed run files]). ``encoded``: as
    :func:`dumps`."""
    text = dumps(results, encoded)
    if str(path).endswith(".gz"):
        atomic_write_text(path, gzip.compress(text.encode("utf-8"), GZIP_LEVEL, mtime=0))
    else:
        atomic_write_text(path, text)
    return Path(path)


def _decompressed(path: Path, raw: bytes, cap: int) -> bytes:
    """The content of a gzip file, refused past ``cap`` bytes before it is all inflated."""
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        data = inflate.decompress(raw, cap + 1)
    except zlib.error as exc:
        raise SchemaError(f"{path}: a damaged gzip file ({exc}): restore it or re-run") from None
    if len(data) > cap:
        raise SchemaError(f"{path}: decompresses to over the {cap / 2**20:.3g} MB a results "
                          f"file may have: not read. Check it is a harness results file, or "
                          f"raise the cap with {MAX_BYTES_ENV}=<MB>")
    if not inflate.eof:
        raise SchemaError(f"{path}: the gzip stream ends early (truncated?): restore it or "
                          "re-run")
    return data


MAX_BYTES_ENV = "HARNESS_MAX_RESULTS_MB"
DEFAULT_MAX_MB = 64
"""Largest results/baseline file :func:`load` reads (a full run's is a few MB): a bigger one
is refused before it is read, instead of taking memory several times its size."""


def max_bytes() -> int:
    """The size cap of :func:`load`: ``HARNESS_MAX_RESULTS_MB`` (MB), default 64."""
    text = os.environ.get(MAX_BYTES_ENV, "")
    try:
        mb = float(text) if text else DEFAULT_MAX_MB
    except ValueError:
        raise SchemaError(f"{MAX_BYTES_ENV}={text!r} is not a number of megabytes") from None
    return int(mb * 1024 * 1024) if math.isfinite(mb) and mb > 0 else DEFAULT_MAX_MB << 20


# Note [Loaders never crash]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~
# A results or baseline file comes from disk: truncated, hand-edited, another tool's, or
# hostile. :func:`load` turns every way it can be wrong into a SchemaError naming the file
# and the fix, and the CLI and plugin turn that into one line: bad JSON (with the line),
# JSON nested deeper than the parser recurses (RecursionError), a file over the size cap,
# and any value of the wrong type (a TypeError/ValueError while building the objects,
# caught here, so each field need not be guarded by hand). tests/test_loaders.py feeds
# arbitrary JSON to every loader and accepts nothing but a clean load or a SchemaError.


def read_document(path: Union[str, Path]) -> Any:
    """The parsed JSON of a results/baseline file, plain or gzip-compressed (Note
    [Compressed run files]), before any schema check: for a reader that needs one field
    of many files (a run's outcomes). Errors are SchemaErrors naming the file and, for bad
    JSON, the line (Note [Loaders never crash])."""
    path = Path(path)
    try:
        size, cap = path.stat().st_size, max_bytes()
        if size > cap:
            raise SchemaError(f"{path}: {size / 2**20:.3g} MB, over the {cap / 2**20:.3g} MB "
                              f"a results file may have (a full run's is a few MB): not read. "
                              f"Check it is a harness results file, or raise the cap with "
                              f"{MAX_BYTES_ENV}=<MB>")
        raw = path.read_bytes()
        if raw[:2] == GZIP_MAGIC:
            raw = _decompressed(path, raw, cap)
        text = raw.decode("utf-8")
    except OSError as exc:
        raise SchemaError(f"{path}: cannot read ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise SchemaError(f"{path}:{line}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} "
                          f"at offset {exc.start}): the file is damaged or not a results file. "
                          "Restore it from version control or re-record it with "
                          "--baseline record") from exc
    try:
        data = json.loads(text)
    except RecursionError:
        raise SchemaError(f"{path}: JSON nested too deeply to be a results file. Restore it "
                          "from version control or re-record it with --baseline record") from None
    except json.JSONDecodeError as exc:
        hint = " (the file ends early: truncated?)" if exc.pos >= len(text.rstrip()) else ""
        raise SchemaError(f"{path}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}{hint}. "
                          "Restore it from version control or re-record it with "
                          "--baseline record") from exc
    return data


def load(path: Union[str, Path]) -> RunResults:
    """Read a results/baseline file; errors name the file and, for bad JSON, the line
    (Note [Loaders never crash])."""
    path = Path(path)
    data = read_document(path)
    try:
        return RunResults.from_json(data, source=str(path))
    except NewerSchemaError:
        raise  # it is a results file: the fix is a newer harness, not re-recording
    except (SchemaError, TypeError, ValueError, AttributeError, RecursionError) as exc:
        what = str(exc) if isinstance(exc, SchemaError) else \
            f"a value of the wrong type ({type(exc).__name__}: {exc})"
        raise SchemaError(f"{path}: not a harness results file: {what}. Re-record it with "
                          "--baseline record, or point --baseline-dir elsewhere") from exc
