"""Keyword coverage of the op catalog (harness.ops.keywords)."""

import warnings

import pytest
import torch

from harness import cli
from harness.ops import BY_NAME, keywords
from harness.ops.spec import OpEntry, Sample, T


@pytest.fixture(scope="module")
def catalog_coverage():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return keywords.coverage()


def test_every_documented_keyword_of_a_catalog_op_is_exercised_or_explained(catalog_coverage):
    rows, _ = catalog_coverage
    missing = {r.api: r.missing for r in rows if r.missing}
    assert not missing, (f"catalog ops leave documented keywords unexercised without a reason: "
                         f"{missing}; add a sample to KEYWORD_SAMPLES in harness/ops/catalog.py "
                         f"or a reason to harness/ops/keywords.py")
    assert sum(len(r.exercised) for r in rows) >= 250


def test_a_new_row_that_leaves_a_keyword_at_its_default_is_reported():
    row = OpEntry("new_softmax", torch.softmax, (Sample("t", (T((4, 4)),), {"dim": 1}),))
    rows, _ = keywords.coverage([row])
    assert [(r.api, r.missing) for r in rows] == [("torch.softmax", ["dtype"])]


def test_documented_keywords_come_from_the_public_signature():
    assert keywords.documented("torch.sort") == {"dim": -1, "descending": False,
                                                 "stable": False, "out": None}
    assert keywords.signatures("torch.sort")[1] == "docstring"
    assert keywords.documented("torch.nn.functional.layer_norm")["eps"] == 1e-5
    assert keywords.signatures("torch.nn.functional.layer_norm")[1] == "inspect.signature"
    assert "alpha" in keywords.documented("torch._foreach_add")
    assert keywords.signatures("torch._foreach_add")[1] == "jit schema"


def test_options_count_when_passed_through_an_adapter_or_by_position():
    done, _ = keywords.exercised([BY_NAME["layer_norm"]], "torch.nn.functional.layer_norm")
    assert "eps" in done  # _layer_norm(x, w, b, eps) calls F.layer_norm positionally
    done, _ = keywords.exercised([BY_NAME["sort_descending_stable"]], "torch.sort")
    assert {"descending", "stable", "dim"} <= done


def test_command_prints_the_table_with_totals(catalog_coverage, monkeypatch, capsys):
    # the command prints the catalog's coverage, which the fixture computed already (once
    # more would cost 3-11 s of the test command); the first test checks that coverage
    monkeypatch.setattr(keywords, "coverage", lambda: catalog_coverage)
    assert cli.main(["ops", "keywords"]) == 0
    out = capsys.readouterr().out
    assert "torch.nn.functional.batch_norm" in out
    assert "documented keywords:" in out and "0 missing" in out.splitlines()[-1]
