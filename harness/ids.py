"""Record ids and record statuses: the one place that builds, parses and names them.

A record id is ``<suite>/<subject>/<dtype>/<variant>/...``, stable across runs and torch
versions: baselines are keyed by it. The families with structure build their ids here
(:func:`op_record`, :func:`opinfo_record`, :func:`model_record`, :func:`auto_record`) and
every reader parses them here (:func:`op_case_of`, :func:`subject_of`,
:func:`filtered_out`), so a format change is one edit.

Note [One status type]
~~~~~~~~~~~~~~~~~~~~~~
:class:`Status` is a ``str`` enum: ``Status.PASS == "pass"`` and ``json.dumps`` writes
``"pass"``, so stored files are unchanged while code names statuses through one type.
What a status means for a verdict is here too: :data:`FAILING` fails the check that
recorded it, :func:`rank` orders capability (a fall in rank from the baseline's status is
a regression, Note [Review or regression] in :mod:`harness.regress`). ``slower`` is a
benchmark judged slower than its baseline over process runs (Note [Bench verdict]): it
fails its check like ``fail`` but says what it is, so no reader has to know that a
benchmark's ``fail`` meant "slower".
"""

from __future__ import annotations

import enum
import re
from pathlib import Path
from typing import Optional


class Status(str, enum.Enum):
    """A record's status (Note [One status type])."""

    PASS = "pass"
    FAIL = "fail"
    ERROR = "error"
    SLOWER = "slower"
    UNSUPPORTED = "unsupported"
    FALLBACK = "fallback"
    SKIP = "skip"

    def __str__(self) -> str:
        return self.value


STATUSES = tuple(s.value for s in Status)
FAILING = (Status.FAIL, Status.ERROR, Status.SLOWER)
"""Statuses that fail the check that recorded them (and make the run NO-GO)."""
LOST = (Status.FAIL, Status.ERROR, Status.UNSUPPORTED, Status.FALLBACK)
"""Statuses that, after a ``pass`` in the baseline, mean a capability was lost."""
_RANK = {Status.PASS: 4, Status.SLOWER: 3, Status.FALLBACK: 2, Status.UNSUPPORTED: 1,
         Status.FAIL: 0, Status.ERROR: 0}


def status(value: str) -> Status:
    """``"pass"`` -> :attr:`Status.PASS`; ValueError naming the statuses for anything else."""
    try:
        return Status(value)
    except ValueError:
        raise ValueError(f"status {value!r}; expected one of {STATUSES}") from None


def rank(value: str) -> Optional[int]:
    """How much capability a status shows (higher: more); None for ``skip`` (not run)."""
    return _RANK.get(Status(value))


def worst(statuses) -> str:
    """The worst of ``statuses`` (``pass`` for none)."""
    order = (Status.ERROR, Status.FAIL, Status.SLOWER, Status.UNSUPPORTED, Status.FALLBACK,
             Status.SKIP, Status.PASS)
    present = {s if type(s) is Status else Status(s) for s in statuses}
    return next((s.value for s in order if s in present), Status.PASS.value)


# ---------------------------------------------------------------------------- build

DIRECTIONS = ("fwd", "bwd")
SUITES_DIR = "suites"


def op_case(op: str, dtype: str, direction: str, sample: str) -> str:
    """The catalog's case id, what ``--op-filter`` matches: ``exp-float16-fwd-odd257``."""
    return f"{op}-{dtype}-{direction}-{sample}"


def op_record(op: str, dtype: str, direction: str, sample: str) -> str:
    """``ops/<op>/<dtype>/<fwd|bwd>/<sample>``."""
    return f"ops/{op}/{dtype}/{direction}/{sample}"


def opinfo_case(key: str, dtype: str) -> str:
    """The OpInfo case id, what ``--op-filter`` matches in the sweep: ``opinfo/<op>/<dtype>``."""
    return f"opinfo/{key}/{dtype}"


def opinfo_record(key: str, dtype: str, direction: str, digest: str) -> str:
    """``opinfo/<op>[:<variant>]/<dtype>/<fwd|bwd>/<digest>``."""
    return f"{opinfo_case(key, dtype)}/{direction}/{digest}"


def model_record(model: str, op: str, digest: str, direction: str) -> str:
    """``model/<model>/<aten op>/<call digest>/<fwd|bwd>``."""
    return f"model/{model}/{op}/{digest}/{direction}"


def model_inventory_record(model: str, op: Optional[str] = None) -> str:
    """``model/<model>/inventory/<aten op>`` (``model/<model>/inventory`` for the whole
    inventory when it was not taken)."""
    return f"model/{model}/inventory" + (f"/{op}" if op is not None else "")


def graph_record(model: str, dtype: str, backend: str, *what: object) -> str:
    """``graph/<model>/<dtype>/<backend>/<what>...``: a graph-mode record (``backend``:
    ``cheap`` or ``device`` for a compiled step, ``dynamo`` for what Dynamo decides whatever
    compiles: graphs, breaks, recompiles)."""
    return record("graph", model, dtype, backend, *what)


def record(suite: str, subject: object, *rest: object) -> str:
    """``<suite>/<subject>/<dtype>/<variant>/...`` from its parts (each formatted as an
    f-string formats it), checked by :func:`check`: the builder every check without a
    family builder of its own uses (``ids.record("norm", "batchnorm2d", dtype, "eval")``)."""
    return check("/".join(f"{part}" for part in (suite, subject, *rest)))


_FORM_PROBLEM = re.compile(r"^/|/$|//|^\s|\s$|\s/|/\s|[\x00-\x1f]")
"""Where :func:`check` finds a problem (an empty part, a part with surrounding spaces, a
control character) in an id of two parts or more; the checks below say which."""


def check(record_id: str) -> str:
    """``record_id`` when it has the record id's form, else ValueError saying what is wrong:
    at least ``<suite>/<subject>``, no empty part (``a//b``, a trailing ``/``), no part with
    surrounding spaces, no control characters. Every record passes here (the recorder),
    so a hand-built id with a typo fails its check instead of becoming a new baseline key."""
    parts = record_id.split("/") if isinstance(record_id, str) else []
    if len(parts) >= 2 and _FORM_PROBLEM.search(record_id) is None:
        return record_id  # every record passes here: one regex for the usual id
    problem = None
    if len(parts) < 2:
        problem = "needs at least <suite>/<subject>"
    elif any(not p for p in parts):
        problem = "has an empty part"
    elif any(p != p.strip() for p in parts):
        problem = "has a part with surrounding spaces"
    elif any(ord(c) < 32 for c in record_id):
        problem = "has a control character"
    if problem is not None:
        raise ValueError(f"record id {record_id!r} {problem}: ids read "
                         "<suite>/<subject>/<dtype>/<variant>/... (harness/ids.py)")
    return record_id


def auto_record(nodeid: str) -> str:
    """The id of a test that records nothing itself:
    ``suites/norm/test_bn.py::TestX::test_y[fp16]`` -> ``norm/test_bn/TestX/test_y[fp16]``."""
    path, _, rest = nodeid.partition("::")
    parts = Path(path).with_suffix("").parts
    if parts and parts[0] == SUITES_DIR:
        parts = parts[1:]
    return "/".join([*parts, *rest.split("::")])


def filter_regex(case: str) -> str:
    """An ``--op-filter`` value that selects exactly one case id."""
    return "^" + re.sub(r"([.^$*+?{}\[\]\\|()])", r"\\\1", case) + "$"


# ---------------------------------------------------------------------------- parse

def suite_of(record_id: str) -> str:
    return record_id.split("/", 1)[0]


def op_case_of(record_id: str) -> Optional[str]:
    """The ``--op-filter`` id of an op or OpInfo record (None for other families):
    ``ops/exp/float16/fwd/odd257`` -> ``exp-float16-fwd-odd257``;
    ``opinfo/add/float32/fwd/0d1949c7`` -> ``opinfo/add/float32``."""
    parts = record_id.split("/")
    if parts[0] == "ops" and len(parts) == 5:
        return op_case(*parts[1:])
    if parts[0] == "opinfo" and len(parts) >= 3:
        return "/".join(parts[:3])
    return None


def direction_of(record_id: str) -> str:
    """``fwd`` / ``bwd`` for op and OpInfo records, else ``""``."""
    parts = record_id.split("/")
    return parts[3] if len(parts) > 3 and parts[0] in ("ops", "opinfo") else ""


def subject_of(record_id: str, suite: str = "") -> str:
    """The subject a record belongs to (Note [Report subjects] in harness/report/model.py):
    ``ops/<op>/<dtype>/<dir>/<sample>`` -> ``ops/<op>/<dtype>/<sample>``;
    ``opinfo/<op>/<dtype>/...`` -> ``opinfo/<op>/<dtype>``;
    ``amp/convergence/<dtype>/<model>/<criterion>`` -> ``amp/convergence/<dtype>/<model>``;
    every other id is its own subject."""
    suite = suite or suite_of(record_id)
    parts = record_id.split("/")
    if suite == "ops" and len(parts) >= 5 and parts[3] in DIRECTIONS:
        return "/".join(parts[:3] + ["/".join(parts[4:])])
    if suite == "opinfo" and len(parts) > 3:
        return "/".join(parts[:3])
    if suite == "amp" and len(parts) == 5 and parts[1] == "convergence":
        return "/".join(parts[:4])
    return record_id


def filtered_out(record_id: str, op_filter: Optional[str]) -> bool:
    """Whether ``--op-filter`` deselects this record (an op case it does not match)."""
    if not op_filter:
        return False
    case = op_case_of(record_id)
    return case is not None and re.search(op_filter, case) is None
