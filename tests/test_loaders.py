"""Loaders never crash (Note [Loaders never crash] in harness/results.py).

Whatever is on disk, the results loader, the baseline selection and the history loader
end in a clean load or a :class:`harness.results.SchemaError` (the selection and history
turn it into their own error or note); nothing else escapes. Hypothesis writes the files:
arbitrary JSON, and valid files with one field swapped for arbitrary JSON (a random
document is almost never close enough to reach the field checks).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness import baselines, results
from harness.bench import history
from harness.results import Record, RunResults, SchemaError, lower

FP = {"device_type": "cpu", "device_slug": "x86-64-test", "stack_id": "torch-2.4.0",
      "device_name": "test"}

scalars = (st.none() | st.booleans() | st.integers() | st.text(max_size=8)
           | st.floats(allow_nan=False, allow_infinity=False))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=4),
                           max_leaves=12)


def _valid() -> dict:
    run = RunResults(dict(FP), started="2026-01-01T00:00:00Z", finished="2026-01-01T00:01:00Z",
                     seed=0, outcomes={"suites/a.py::t": "passed"}, faults=["f"])
    run.add(Record("ops/a/float32", metrics={"err": 1e-3, "kind": "x"},
                   rules={"err": lower(rel=2.0, abs=1e-6)}, test="suites/a.py::t",
                   info={"runs": [{"median": 1.0}]}))
    return run.to_json()


PATHS = [("schema_version",), ("fingerprint",), ("fingerprint", "stack_id"),
         ("fingerprint", "device_type"), ("fingerprint", "device_slug"), ("records",),
         ("records", "ops/a/float32"), ("records", "ops/a/float32", "status"),
         ("records", "ops/a/float32", "metrics"), ("records", "ops/a/float32", "metrics", "err"),
         ("records", "ops/a/float32", "rules"), ("records", "ops/a/float32", "rules", "err"),
         ("records", "ops/a/float32", "rules", "err", "rel"),
         ("records", "ops/a/float32", "rules", "err", "better"),
         ("records", "ops/a/float32", "info"), ("records", "ops/a/float32", "info", "runs"),
         ("records", "ops/a/float32", "suite"), ("records", "ops/a/float32", "message"),
         ("started",), ("finished",), ("seed",), ("outcomes",), ("findings",),
         ("baseline",), ("faults",), ("complete",), ("verdict",)]


@st.composite
def near_valid(draw) -> dict:
    doc = _valid()
    for path in draw(st.lists(st.sampled_from(PATHS), min_size=1, max_size=3)):
        node = doc
        for key in path[:-1]:
            if not isinstance(node, dict) or not isinstance(node.get(key), dict):
                break
            node = node[key]
        else:
            if isinstance(node, dict):
                node[path[-1]] = draw(json_values)
    return doc


def _every_loader(text: str) -> None:
    """Write ``text`` where each loader looks and run them: only SchemaError may escape
    ``results.load``; the selection and history must not raise at all."""
    with tempfile.TemporaryDirectory() as tmp:
        path = baselines.path_for(tmp, FP)
        path.parent.mkdir(parents=True)
        path.write_text(text)
        try:
            loaded = results.load(path)
        except SchemaError as exc:
            assert str(path) in str(exc)
        else:
            assert isinstance(loaded, RunResults)
        selection = baselines.select(tmp, FP)
        assert selection.results is not None or selection.error
        runs, what = history.load_runs(path.parent)
        assert isinstance(what, str) and len(runs) <= 1


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(json_values)
def test_arbitrary_json_loads_cleanly_or_is_a_schema_error(value):
    _every_loader(json.dumps(value))


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(near_valid())
def test_a_valid_file_with_a_field_swapped_loads_cleanly_or_is_a_schema_error(doc):
    _every_loader(json.dumps(doc))


def test_the_unmodified_document_loads():
    _every_loader(json.dumps(_valid()))
    assert RunResults.from_json(_valid()).records["ops/a/float32"].metrics["err"] == 1e-3


@pytest.mark.parametrize("text", [
    "[" * 100_000 + "]" * 100_000,
    '{"records": ' + "{\"a\": " * 50_000 + "1" + "}" * 50_001,
], ids=["list-100000-deep", "object-50000-deep"])
def test_deep_nesting_is_a_schema_error(text):
    _every_loader(text)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "deep.json"
        path.write_text(text)
        with pytest.raises(SchemaError, match="nested too deeply"):
            results.load(path)


@pytest.mark.parametrize("change,words", [
    (lambda d: d.update(started=5), "started is a int"),
    (lambda d: d["fingerprint"].update(stack_id="garbage"), "malformed stack id 'garbage'"),
    (lambda d: d["fingerprint"].update(stack_id=3), "stack_id is not a string"),
    (lambda d: d.update(outcomes=["x"]), "outcomes is a list"),
    (lambda d: d["records"]["ops/a/float32"].update(status=["pass"]), "status is not a string"),
    (lambda d: d["records"]["ops/a/float32"]["rules"]["err"].update(rel="x"),
     "rule rel='x'"),
], ids=["started-int", "stack-id-garbage", "stack-id-int", "outcomes-list", "status-list",
        "rule-rel-text"])
def test_wrong_types_are_named(change, words, tmp_path):
    doc = _valid()
    change(doc)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(SchemaError, match="not a harness results file") as caught:
        results.load(path)
    assert words in str(caught.value)


def test_a_file_over_the_size_cap_is_refused_unread_and_the_cap_is_adjustable(tmp_path,
                                                                              monkeypatch):
    path = tmp_path / "huge.json"
    with open(path, "wb") as handle:  # sparse: 65 MB on paper, nothing on disk
        handle.truncate(65 * 2**20)
    with pytest.raises(SchemaError, match=r"65 MB, over the 64 MB .* HARNESS_MAX_RESULTS_MB"):
        results.load(path)
    monkeypatch.setenv(results.MAX_BYTES_ENV, "100")
    with pytest.raises(SchemaError) as caught:  # read now: NUL bytes are not JSON
        results.load(path)
    assert "over the" not in str(caught.value)
    monkeypatch.setenv(results.MAX_BYTES_ENV, "lots")
    with pytest.raises(SchemaError, match="HARNESS_MAX_RESULTS_MB='lots' is not a number"):
        results.load(path)


def test_history_skips_a_bad_file_and_says_so(tmp_path):
    good = dict(_valid(), faults=[])  # a fault-injected run never enters history anyway
    (tmp_path / "20260101T000000Z-cpu.json").write_text(json.dumps(good))
    bad = dict(good, fingerprint=dict(FP, stack_id="garbage"))
    (tmp_path / "20260102T000000Z-cpu.json").write_text(json.dumps(bad))
    runs, what = history.load_runs(tmp_path)
    assert len(runs) == 1 and "1 unreadable file(s) skipped" in what


def test_an_unreadable_device_folder_is_an_error_not_an_empty_store(tmp_path):
    folder = baselines.device_dir(tmp_path, FP)
    folder.parent.mkdir(parents=True)
    os.symlink(folder.name, folder)  # a symlink loop
    selection = baselines.select(tmp_path, FP)
    assert selection.results is None and "cannot read the baseline folder" in selection.error
    assert baselines.unreadable(tmp_path) == [selection.error]
