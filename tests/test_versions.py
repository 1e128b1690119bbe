import pytest

from harness.stack import compare_versions, split_stack_id, stack_sort_key, version_key

ASCENDING = [
    "7.0.0",
    "8.0.RC1",
    "8.0.RC2.alpha003",
    "8.0.RC2.beta1",
    "8.0.RC2",
    "8.0.RC3",
    "8.0.0",
    "8.0.1",
    "8.1.RC1",
    "8.1.0",
    "10.0.0",
]


def test_cann_versions_sort_as_versions_not_strings():
    assert sorted(reversed(ASCENDING), key=lambda v: _padded(v)) == ASCENDING


def _padded(version):
    key = version_key(version)
    return key + ((0, 0, 0),) * (16 - len(key))


@pytest.mark.parametrize("older,newer", list(zip(ASCENDING, ASCENDING[1:])))
def test_each_neighbour_pair_orders(older, newer):
    assert compare_versions(older, newer) == -1
    assert compare_versions(newer, older) == 1


@pytest.mark.parametrize("older,newer", [
    ("2.1.0rc1", "2.1.0"), ("2.1.0", "2.1.0.post1"), ("2.4.0a0", "2.4.0b1"),
    ("2.4.0.dev20240101", "2.4.0rc1"), ("12.1", "12.4"), ("9.8", "12.1"),
])
def test_pep440_and_cuda_versions(older, newer):
    assert compare_versions(older, newer) == -1


def test_local_suffix_and_case_are_ignored():
    assert compare_versions("2.4.0+cpu", "2.4.0") == 0
    assert compare_versions("8.0.rc3", "8.0.RC3") == 0
    assert compare_versions("8.0", "8.0.0") == 0


def test_stack_ids_split_and_sort():
    assert split_stack_id("cann-8.0.RC3") == ("cann", "8.0.RC3")
    ids = ["cann-8.1.RC1", "cann-8.0.0", "cann-8.0.RC3"]
    assert sorted(ids, key=stack_sort_key) == ["cann-8.0.RC3", "cann-8.0.0", "cann-8.1.RC1"]
    with pytest.raises(ValueError, match="malformed stack id"):
        split_stack_id("cann")
