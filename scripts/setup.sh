#!/usr/bin/env bash
# Installs what building and testing flashattn needs on a Debian/Ubuntu machine:
#   * system packages (compiler, GoogleTest, OpenMP runtime, Open MPI; Clang with its sanitizer runtimes,
#     libFuzzer and LLVM's libomp for `make test-asan`, `make fuzz` and `make test-tsan`) through apt when
#     missing;
#   * a Python virtual environment .venv with pinned build/test tools (requirements-dev.txt);
#   * with --torch, PyTorch and transformers in .venv too (requirements-torch.txt), for the torch tests.
# Idempotent: a second run only checks. The CUDA toolkit is optional and never installed here.
set -euo pipefail
cd "$(dirname "$0")/.."
with_torch=0
for arg in "$@"; do
  case "$arg" in
    --torch) with_torch=1 ;;
    *) echo "setup: unknown argument $arg (expected --torch)" >&2; exit 2 ;;
  esac
done

need=()
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
if command -v dpkg-query >/dev/null; then
  for pkg in g++ libgtest-dev python3-venv openmpi-bin libopenmpi-dev clang libclang-rt-dev libomp-dev; do
    have_pkg "$pkg" || need+=("$pkg")
  done
else
  # Not Debian/Ubuntu: the package names above mean nothing here, so nothing is checked; CMake names what
  # is missing when it configures.
  echo "setup: no dpkg: system packages not checked (needed: a C++20 compiler with OpenMP, GoogleTest;" \
       "optional: Open MPI, Clang with its sanitizer runtimes and libomp for make test-asan/test-tsan/fuzz)" >&2
fi
# python3-venv is only needed when the interpreter lacks the venv module (pyenv builds have it).
if python3 -c "import venv, ensurepip" 2>/dev/null; then
  need=("${need[@]/python3-venv}")
fi
need=($(printf '%s\n' "${need[@]}" | grep -v '^$' || true))
if ((${#need[@]})); then
  if ! command -v apt-get >/dev/null; then
    echo "setup: missing system packages ${need[*]} and no apt-get: install them by hand" >&2
    exit 1
  fi
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      echo "setup: missing system packages ${need[*]}; not root and no sudo: run as root" \
           "apt-get install ${need[*]}" >&2
      exit 1
    fi
    SUDO="sudo"
  fi
  echo "setup: installing ${need[*]}"
  log=$(mktemp)
  if ! { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq \
         --no-install-recommends "${need[@]}"; } >"$log" 2>&1; then
    cat "$log" >&2
    exit 1
  fi
  rm -f "$log"
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.requirements-dev.stamp
if [ ! -f "$stamp" ] || ! cmp -s requirements-dev.txt "$stamp"; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements-dev.txt
  cp requirements-dev.txt "$stamp"
fi
if ((with_torch)); then
  stamp=.venv/.requirements-torch.stamp
  if [ ! -f "$stamp" ] || ! cmp -s requirements-torch.txt "$stamp"; then
    echo "setup: installing $(grep -v '^#' requirements-torch.txt | tr '\n' ' ')"
    .venv/bin/python -m pip install -q -r requirements-torch.txt
    cp requirements-torch.txt "$stamp"
  fi
fi
versions="$(.venv/bin/cmake --version | head -1), $(.venv/bin/python --version)"
if ((with_torch)); then
  versions+=", $(.venv/bin/python -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)')"
fi
echo "setup: ok ($versions)"
