#!/usr/bin/env python3
"""The compatibility gate: flash-attn's own tests/test_flash_attn.py, at a pinned commit, run against
flashattn through an alias package named `flash_attn` (tests/compat/alias). Needs a CUDA device, torch,
einops, pytest and an installed flashattn built with CUDA. See docs/compat.md.

    python tests/compat/run_flash_attn_tests.py --fetch-only     # on a machine with network access
    python tests/compat/run_flash_attn_tests.py [--sample N] [--shard K/N] [-- pytest args]   # on the GPU machine
    python tests/compat/run_flash_attn_tests.py --shard 9-20/64 -- -n 8   # several shards, one collection
    python tests/compat/run_flash_attn_tests.py --ids failed.txt -- -n 2   # only these test ids (a run's failures)
    python tests/compat/run_flash_attn_tests.py --shard 11-18/64 --rerun-failed -- -n 4   # failures again, alone

The file is fetched once into tests/compat/.upstream/<commit>/ (ignored by git, never committed) and
checked against its git blob hash, so a run uses exactly the pinned file. Exit status: pytest's.
"""

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
import urllib.request
import xml.etree.ElementTree as ElementTree
from pathlib import Path

# flash-attn v2.8.3, the release whose semantics flashattn follows, and its test file's git blob hash.
PINNED_COMMIT = "060c9188beec3a8b62b33a3bfa6d5d2d44975fab"
PINNED_BLOB = "d5bb6ba853128cfa4b34b78489dbd90b6c664308"
URL = "https://raw.githubusercontent.com/Dao-AILab/flash-attention/{commit}/tests/test_flash_attn.py"

HERE = Path(__file__).resolve().parent


def git_blob_hash(data):
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_file(commit, blob, fetch):
    path = HERE / ".upstream" / commit / "test_flash_attn.py"
    if not path.exists():
        if not fetch:
            sys.exit(f"run_flash_attn_tests: {path} is missing: run with --fetch-only on a machine with network "
                     "access first (the GPU machine has none), then bring tests/compat/.upstream along")
        data = urllib.request.urlopen(URL.format(commit=commit), timeout=60).read()
        if blob and git_blob_hash(data) != blob:
            sys.exit(f"run_flash_attn_tests: fetched file has blob hash {git_blob_hash(data)}, expected {blob}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    elif blob and git_blob_hash(path.read_bytes()) != blob:
        sys.exit(f"run_flash_attn_tests: {path} was modified (blob hash differs from {blob}); delete it to refetch")
    return path


def parse_test_ids(lines):
    """The test ids in `lines`, one per non-empty line, as pytest prints them (`FAILED test_flash_attn.py::name[...]
    - reason`, `test_flash_attn.py::name[...]` or `name[...]`), without the file name."""
    ids = []
    for line in lines:
        token = next((t for t in line.split() if "::" in t or t.startswith("test_")), "")
        if token:
            ids.append(token.split("::", 1)[-1])
    return ids


def failed_ids_of_junit(xml_text):
    """The ids (name[params], as --ids takes them) of the test cases that failed or errored in a pytest
    --junitxml report."""
    root = ElementTree.fromstring(xml_text)
    return [case.get("name") for case in root.iter("testcase")
            if case.find("failure") is not None or case.find("error") is not None]


def without_workers(pytest_args):
    """pytest_args without pytest-xdist's worker count (-n K, -nK, --numprocesses K / =K): the rerun of a
    run's failures goes one test at a time, as their out-of-memory failures need."""
    out, skip = [], False
    for a in pytest_args:
        if skip:
            skip = False
        elif a in ("-n", "--numprocesses"):
            skip = True
        elif not (a.startswith("--numprocesses=") or (a.startswith("-n") and (a[2:].isdigit() or a[2:] == "auto"))):
            out.append(a)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commit", default=PINNED_COMMIT, help="flash-attention commit (default: v2.8.3)")
    parser.add_argument("--blob", default=None, help="expected git blob hash of the file (default: the pinned one "
                        "for the pinned commit, unchecked for another)")
    parser.add_argument("--fetch-only", action="store_true", help="fetch the file and exit")
    parser.add_argument("--no-fetch", action="store_true", help="never use the network")
    parser.add_argument("--sample", type=int, default=0, help="run this many random cases (0: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of --sample")
    parser.add_argument("--shard", default="", help="K/N: run shard K of N (a fixed split by test id; the N "
                        "shards together are the whole file); K1-K2/N or K1,K2/N: several shards in one run, "
                        "which collects the file once")
    parser.add_argument("--ids", default="", help="a file of test ids (one per line, as pytest prints them after "
                        "FAILED, with or without the file name): run only those, e.g. a shard's failures again")
    parser.add_argument("--rerun-failed", action="store_true", help="run the cases that failed again, one at a "
                        "time (no pytest-xdist workers): parallel workers share the device's memory, and the large "
                        "cases fail out of memory beside each other; the exit status is then the rerun's")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args()
    blob = args.blob if args.blob is not None else (PINNED_BLOB if args.commit == PINNED_COMMIT else "")
    path = test_file(args.commit, blob, fetch=not args.no_fetch)
    if args.fetch_only:
        print(path)
        return 0

    env = dict(os.environ)
    # The alias package first, so `import flash_attn` is ours even where flash-attn itself is installed.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE / "alias"), str(HERE), env.get("PYTHONPATH")]))
    probe = "import torch, flash_attn, flashattn; assert torch.cuda.is_available(), 'no CUDA device'; " \
            "print('flash_attn ->', flash_attn.flash_attn_func.__module__, '| backends:', " \
            "[b['name'] for b in flashattn.list_backends()])"
    check = subprocess.run([sys.executable, "-c", probe], env=env, cwd=path.parent)
    if check.returncode != 0:
        print("run_flash_attn_tests: needs torch with a CUDA device, einops and flashattn built with CUDA",
              file=sys.stderr)
        return check.returncode
    targets = [str(path)]
    if args.ids:
        with open(args.ids) as f:
            ids = parse_test_ids(f)
        if not ids:
            sys.exit(f"run_flash_attn_tests: --ids {args.ids}: expected test ids, one per line, got none")
        targets = [f"{path}::{i}" for i in ids]
    pytest = [sys.executable, "-m", "pytest", "-p", "exclusions", "-p", "no:cacheprovider", "-q"]
    selection = ["--compat-sample", str(args.sample), "--compat-seed", str(args.seed), "--compat-shard", args.shard]
    if not args.rerun_failed:
        return subprocess.run(pytest + selection + targets + args.pytest_args, env=env, cwd=path.parent).returncode
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "first.xml"
        first = subprocess.run(pytest + selection + targets + args.pytest_args + [f"--junitxml={report}"], env=env,
                               cwd=path.parent).returncode
        failed = failed_ids_of_junit(report.read_text()) if report.exists() else []
        if first == 0 or not failed:
            return first
        print(f"run_flash_attn_tests: {len(failed)} failed; running them again, one at a time", flush=True)
        # The ids alone select the cases (each was in the sample and the shards already).
        rerun = pytest + [f"{path}::{i}" for i in failed] + without_workers(args.pytest_args)
        return subprocess.run(rerun, env=env, cwd=path.parent).returncode

if __name__ == "__main__":
    sys.exit(main())
