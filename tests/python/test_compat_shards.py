"""The compatibility gate's shards (tests/compat/exclusions.py, --compat-shard K/N): every test id falls in
exactly one shard, the split does not depend on the process (xdist workers and later sessions see the same
one), and malformed specs are refused; the runner's --ids file (a run's failures) gives back the test ids, and
its --rerun-failed reads a run's failures from the JUnit report and reruns them without workers. Needs pytest
only."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "compat"))
from exclusions import parse_shard, shard_of  # noqa: E402

IDS = [f"test_flash_attn.py::test_flash_attn_output[{i}-{d}-False-True]" for i in range(300) for d in (59, 128)]


def test_each_id_falls_in_exactly_one_shard_and_shards_are_balanced():
    counts = [0] * 7
    for nodeid in IDS:
        shard = shard_of(nodeid, 7)
        assert 0 <= shard < 7
        counts[shard] += 1
    assert sum(counts) == len(IDS)
    assert min(counts) > len(IDS) / 7 / 2  # no shard starved (CRC-32 spreads the ids)


def test_the_split_is_fixed():
    # CRC-32, not Python's per-process salted hash: these values hold on every machine and run.
    assert shard_of("a", 10) == 7  # zlib.crc32(b"a") = 3904355907
    assert shard_of(IDS[0], 1) == 0


@pytest.mark.parametrize("spec,expected", [("", None), ("0/4", ((0,), 4)), ("3/4", ((3,), 4)), ("1-3/64", ((1, 2, 3), 64)),
                                           ("9,2,5-6/64", ((2, 5, 6, 9), 64)), ("0-0/1", ((0,), 1))])
def test_parse_shard_accepts_k_of_n(spec, expected):
    assert parse_shard(spec) == expected


@pytest.mark.parametrize("spec", ["4/4", "1", "a/b", "-1/3", "1/0", "3-1/4", "1-4/4", "1,/4", "1-/4", ",2/4"])
def test_parse_shard_refuses_malformed_specs(spec):
    with pytest.raises(pytest.UsageError, match="--compat-shard"):
        parse_shard(spec)


def test_ids_file_lines_give_the_test_ids():
    import run_flash_attn_tests

    lines = ["FAILED test_flash_attn.py::test_flash_attn_kvcache[1-131072-gqa-1-dtype0] - torch.OutOfMemoryError\n",
             "\n",
             "test_flash_attn.py::test_flash_attn_output[128-40-False]\n",
             "test_flash_attn_race_condition[97-1]\n"]
    assert run_flash_attn_tests.parse_test_ids(lines) == [
        "test_flash_attn_kvcache[1-131072-gqa-1-dtype0]", "test_flash_attn_output[128-40-False]",
        "test_flash_attn_race_condition[97-1]"]


def test_rerun_takes_the_failed_and_errored_cases_of_the_junit_report():
    import run_flash_attn_tests

    xml = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="4">
<testcase classname="test_flash_attn" name="test_flash_attn_output[128-40-False]" time="0.1"/>
<testcase classname="test_flash_attn" name="test_flash_attn_kvcache[1-131072-gqa]" time="0.2">
<failure message="torch.OutOfMemoryError">trace</failure></testcase>
<testcase classname="test_flash_attn" name="test_flash_attn_race_condition[97-1]" time="0.0">
<error message="setup">trace</error></testcase>
<testcase classname="test_flash_attn" name="test_flash_attn_qkvpacked[64]" time="0.0">
<skipped message="excluded"/></testcase></testsuite></testsuites>"""
    assert run_flash_attn_tests.failed_ids_of_junit(xml) == [
        "test_flash_attn_kvcache[1-131072-gqa]", "test_flash_attn_race_condition[97-1]"]


@pytest.mark.parametrize("args,expected", [(["-n", "4", "-x"], ["-x"]), (["-n4"], []), (["-nauto"], []), (["--numprocesses", "8"], []),
                                           (["--numprocesses=8", "-k", "kvcache"], ["-k", "kvcache"]),
                                           (["-x", "--no-header"], ["-x", "--no-header"])])
def test_rerun_drops_the_worker_count(args, expected):
    import run_flash_attn_tests

    assert run_flash_attn_tests.without_workers(args) == expected
