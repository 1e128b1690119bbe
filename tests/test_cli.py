import json

import pytest

from harness import baselines, cli, results
from harness.results import Record, RunResults, lower


@pytest.fixture
def store(tmp_path, fingerprint):
    rule = {"err": lower(rel=2.0, abs=1e-6)}
    for stack, err, status in (("torch-2.3.0", 1e-3, "pass"), ("torch-2.4.0", 5e-3, "fail")):
        fp = dict(fingerprint, stack_id=stack)
        run = RunResults(fp, {"ops/a": Record("ops/a", status=status, metrics={"err": err},
                                              rules=rule),
                              "ops/b": Record("ops/b")}, finished="2026-01-01T00:00:00Z")
        results.write(run, baselines.path_for(tmp_path, fp))
    return tmp_path


def test_baseline_list(store, capsys):
    assert cli.main(["baseline", "list", "--dir", str(store)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "torch-2.3.0" in out[0] and "torch-2.4.0" in out[1] and "1 fail, 1 pass" in out[1]


def test_baseline_show(store, capsys):
    assert cli.main(["baseline", "show", "torch-2.3.0", "--dir", str(store)]) == 0
    assert "records: 2 (ops 2)" in capsys.readouterr().out


def test_baseline_diff_reports_regressions_and_exits_1(store, capsys):
    assert cli.main(["baseline", "diff", "torch-2.3.0", "torch-2.4.0", "--dir", str(store)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "VERDICT: NO-GO (1 failing check(s); 1 capability(ies) lost)"
    assert out[1] == "torch-2.3.0 -> torch-2.4.0 on cpu/x86-64-avx2; baseline torch-2.3.0"
    assert "  [capability lost] ops/a: status pass -> fail FAILS" in out


def test_baseline_unknown_stack_is_a_clear_error(store):
    with pytest.raises(SystemExit, match="no baseline 'torch-9.9'"):
        cli.main(["baseline", "show", "torch-9.9", "--dir", str(store)])


def test_baseline_corrupt_file_is_a_clear_error(store):
    [path] = store.glob("*/*/torch-2.3.0.json")
    path.write_text("{")
    with pytest.raises(SystemExit, match="not valid JSON"):
        cli.main(["baseline", "show", str(path)])


def test_faults_list_json(capsys):
    assert cli.main(["faults", "list", "--json", "--family", "example"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert {f["name"] for f in listed} == {"example.add_drift", "example.relu_leaks",
                                          "example.scope_audit"}


def test_faults_unknown_family_is_an_error():
    with pytest.raises(SystemExit, match="no fault in family"):
        cli.main(["faults", "list", "--family", "nope"])
