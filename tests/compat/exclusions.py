"""pytest plugin of the compatibility gate (run_flash_attn_tests.py loads it with -p): deselects the
excluded cases of flash-attn's tests/test_flash_attn.py, each with its reason (docs/compat.md lists
them), reports the counts, and optionally keeps one shard of the rest (a fixed split by test id, so that
runs on different days and machines add up to the whole file) and/or a seeded random sample of it."""

import random
import zlib

import pytest

# Tests that decode flash-attn's S_dmask (the dropout pattern and unnormalised probabilities returned by
# return_attn_probs=True): flashattn returns None in that slot. Their dropout_p == 0 cases stay in.
READS_S_DMASK = {
    "test_flash_attn_qkvpacked",
    "test_flash_attn_varlen_qkvpacked",
    "test_flash_attn_output",
    "test_flash_attn_varlen_output",
}

# Whole tests excluded, by name (present in flash-attn's main after 2.8.3; absent at the pinned 2.8.3).
EXCLUDED_TESTS = {
    "test_flash_attn_varlen_paged_kv_num_splits": "calls flash-attn's internal _flash_attn_varlen_forward",
    "test_flash_attn_generator_arg_must_be_none": "calls flash-attn's extension module flash_attn_gpu directly",
    "test_flash_attn_kvcache_paged_block_table_bounds": (
        "expects an error from cache_seqlens values on the GPU, which flash-attn reads back to the host; "
        "flashattn does not check the values of CUDA index tensors (no synchronisation, docs/semantics.md)"
    ),
}


def pytest_addoption(parser):
    group = parser.getgroup("flashattn compat")
    group.addoption("--compat-sample", type=int, default=0, help="keep this many random cases (0: all)")
    group.addoption("--compat-seed", type=int, default=0, help="seed of --compat-sample")
    group.addoption("--compat-shard", default="", help="K/N, K1-K2/N or K1,K2/N: keep the cases whose test id hashes to one of the Ks mod N")


def parse_shard(text):
    """(shards, N) of 'K/N', 'K1-K2/N' (K1 to K2 inclusive) or 'K1,K2,.../N', each 0 <= K < N, shards a sorted
    tuple; None for ''. One run over several shards collects flash-attn's file (~500k cases, most of a
    shard's time) once for all of them."""
    if not text:
        return None
    spec, sep, n = text.partition("/")
    shards = set()
    ok = bool(sep) and n.isdigit() and int(n) > 0
    for part in spec.split(",") if ok else []:
        lo, dash, hi = part.partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            ok = False
            break
        first, last = int(lo), int(hi) if dash else int(lo)
        if not 0 <= first <= last < int(n):
            ok = False
            break
        shards.update(range(first, last + 1))
    if not ok:
        raise pytest.UsageError(f"--compat-shard: expected K/N, K1-K2/N or K1,K2/N with 0 <= K < N, got {text!r}")
    return tuple(sorted(shards)), int(n)


def shard_of(nodeid, count):
    """The shard of a test id: CRC-32 of its UTF-8 bytes mod count (stable across runs, machines and
    pytest-xdist workers, unlike Python's salted hash)."""
    return zlib.crc32(nodeid.encode()) % count


def exclusion_reason(item):
    name = getattr(item, "originalname", None) or item.name.split("[")[0]
    if name in EXCLUDED_TESTS:
        return EXCLUDED_TESTS[name]
    params = getattr(getattr(item, "callspec", None), "params", {})
    if name in READS_S_DMASK and params.get("dropout_p", 0.0) > 0:
        return "reads S_dmask (flash-attn's dropout pattern), which flashattn does not return"
    return None


# Last, so that the sample is drawn from what -k and -m left.
@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    kept, dropped = [], {}
    for item in items:
        reason = exclusion_reason(item)
        if reason is None:
            kept.append(item)
        else:
            dropped.setdefault(reason, []).append(item)
    shard = parse_shard(config.getoption("--compat-shard"))
    sampled_out = []
    per_shard = {}
    if shard is not None:
        wanted, count = set(shard[0]), shard[1]
        in_shard = []
        for item in kept:
            k = shard_of(item.nodeid, count)
            if k in wanted:
                in_shard.append(item)
                per_shard[k] = per_shard.get(k, 0) + 1
            else:
                sampled_out.append(item)
        kept = in_shard
    sample = config.getoption("--compat-sample")
    if 0 < sample < len(kept):
        chosen = set(random.Random(config.getoption("--compat-seed")).sample(range(len(kept)), sample))
        sampled_out += [item for i, item in enumerate(kept) if i not in chosen]
        kept = [item for i, item in enumerate(kept) if i in chosen]
    deselected = [item for group in dropped.values() for item in group] + sampled_out
    if deselected:
        config.hook.pytest_deselected(items=deselected)
    items[:] = kept
    config._flashattn_compat = (dropped, len(sampled_out), len(kept), per_shard)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    dropped, sampled_out, kept, per_shard = getattr(config, "_flashattn_compat", ({}, 0, 0, {}))
    terminalreporter.section("flashattn compatibility gate")
    for reason, group in dropped.items():
        terminalreporter.write_line(f"excluded {len(group):6d}: {reason}")
    if sampled_out:
        terminalreporter.write_line(f"not sampled {sampled_out:6d} (--compat-shard, --compat-sample)")
    terminalreporter.write_line(f"run {kept:6d}")
    if len(per_shard) > 1:
        terminalreporter.write_line("run per shard: " + ", ".join(f"{k}: {n}" for k, n in sorted(per_shard.items())))
