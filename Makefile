# The two commands of the README:
#   make bench   set up, build, run flashattn-bench on every backend this machine has
#   make test    set up, build (CUDA kernels too when nvcc is present), run the C++ and Python tests, then
#                the C++ suite under AddressSanitizer + UBSan and under ThreadSanitizer, and a
#                TEST_FUZZ_TIME-second fuzz run
# Everything else is a building block of those two.

BUILD ?= build
JOBS ?= $(shell nproc)
VENV := .venv
CMAKE := $(VENV)/bin/cmake
CTEST := $(VENV)/bin/ctest
PY := $(VENV)/bin/python
CMAKE_ARGS ?=
# GPU architectures of the build folder, passed on every configure so that the folder follows the target
# that uses it (a cached value would otherwise outlive `make test`'s 90a-only build).
CUDA_ARCHS ?= 80;90a

.PHONY: all setup setup-torch configure build test test-cpp test-python bench format clean

all: build

setup:
	./scripts/setup.sh

configure: setup
	$(CMAKE) -S . -B $(BUILD) -G Ninja -DCMAKE_MAKE_PROGRAM=$(abspath $(VENV)/bin/ninja) \
	  '-DFLASHATTN_CUDA_ARCHS=$(CUDA_ARCHS)' $(CMAKE_ARGS)

build: configure
	$(CMAKE) --build $(BUILD) -j $(JOBS)

# OMP_WAIT_POLICY=passive: ctest runs $(JOBS) test processes at once, each with an OpenMP team of nproc
# threads, and libgomp's default spin-waiting threads then take the cores from the threads with work: a test
# of thousands of tiny sequences took 22 s instead of 1.5 s, and the whole ctest run 156 s instead of 85 s
# (bench/NOTES.md, session 23). Passive threads sleep at barriers; what the tests check is unchanged.
test-cpp: build
	cd $(BUILD) && OMP_WAIT_POLICY=passive $(abspath $(CTEST)) --output-on-failure -j $(JOBS) --no-tests=error

# The Python package is built without CUDA and with one instruction-set build of cpu_flash here: its tests
# run on CPU arrays and CPU torch tensors (numpy, torch, torch.compile, transformers), and the CUDA kernels and
# the portable CPU build are already compiled (and so checked) by the C++ build above.
# FLASHATTN_REQUIRE_TORCH makes a missing torch or transformers a failure, not a skip.
setup-torch:
	./scripts/setup.sh --torch

test-python: setup-torch
	$(PY) -m pip install -q --no-build-isolation -C cmake.define.FLASHATTN_CUDA=OFF -C cmake.define.FLASHATTN_NATIVE=ON .
	FLASHATTN_REQUIRE_TORCH=1 $(PY) -m pytest -q tests/python

TEST_FUZZ_TIME ?= 60

# The test build compiles the CUDA kernels once, for 90a: the sm_80 instances are the same source (a
# compile check is what CI gets from them on a machine without a GPU), and both architectures doubled the
# longest step of CI. `make build` and the wheel keep FLASHATTN_CUDA_ARCHS's default (80;90a).
test-cpp: CUDA_ARCHS = 90a

# Each part in turn, with its wall time printed ("[make test] PART: N s") so that a CI log shows where its
# minutes went.
test:
	@scripts/timed.sh test-cpp $(MAKE) test-cpp
	@scripts/timed.sh test-python $(MAKE) test-python
	@scripts/timed.sh test-asan $(MAKE) test-asan
	@scripts/timed.sh test-tsan $(MAKE) test-tsan
	@scripts/timed.sh fuzz $(MAKE) fuzz FUZZ_TIME=$(TEST_FUZZ_TIME)

bench: build
	./$(BUILD)/tools/bench/flashattn-bench

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD)

# Sanitizer and fuzzing runs of the CPU code (docs/reliability.md), each in its own build directory,
# CUDA off. They need Clang with compiler-rt and LLVM's libomp (Debian: clang, libomp-dev): libFuzzer
# ships with Clang, and libomp is the OpenMP runtime ThreadSanitizer can be told about (Archer).
#   make test-asan   the C++ suite under AddressSanitizer + UndefinedBehaviorSanitizer
#   make test-tsan   the C++ suite under ThreadSanitizer (OpenMP synchronisation through Archer)
#   make fuzz        libFuzzer on the C API for FUZZ_TIME seconds, from the seed corpus
.PHONY: test-asan test-tsan fuzz

SAN_CXX ?= clang++
SAN_TEST_FILTER ?= *
# ThreadSanitizer checks how threads share memory, and the OpenMP regions of the largest cases are the same
# regions as the small cases' with more iterations: these three tests (the chunked-prefill catalogue cases of
# 2048 keys, one head of 1000 x 3000) were 100 of the TSan run's 257 s. They run in `make test-cpp` and under
# ASan + UBSan.
TSAN_TEST_FILTER ?= $(SAN_TEST_FILTER):-CpuFlashLong.OneHead1000x3000:*/cpu_flash_*varlen_1x1500_2048x2048*
FUZZ_TIME ?= 120
# -O1: the sanitizer builds' longest step was compiling the CPU kernels' SIMD templates at -O2 under
# ASan + UBSan (bench/NOTES.md, session 16); -O1 is also what the sanitizers' documentation advises.
SAN_OPT_FLAGS ?= '-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -DNDEBUG'
# One instruction-set build of cpu_flash (this machine's, FLASHATTN_NATIVE) under the sanitizers: the portable
# build's four copies are the same source, and `make test-cpp` runs the catalogue on each of them.
SAN_CONFIGURE = $(CMAKE) -G Ninja -DCMAKE_MAKE_PROGRAM=$(abspath $(VENV)/bin/ninja) -DCMAKE_CXX_COMPILER=$(SAN_CXX) \
                -DCMAKE_BUILD_TYPE=RelWithDebInfo $(SAN_OPT_FLAGS) -DFLASHATTN_CUDA=OFF -DFLASHATTN_MPI=OFF -DFLASHATTN_BUILD_BENCH=OFF \
                -DFLASHATTN_NATIVE=ON
ASAN_OPTS = abort_on_error=1:detect_leaks=1:detect_stack_use_after_return=1
SAN_ENV = UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
          LSAN_OPTIONS=suppressions=$(abspath tests/sanitizers/lsan.supp)

test-asan: setup
	$(SAN_CONFIGURE) -S . -B build-asan '-DFLASHATTN_SANITIZE=address;undefined'
	$(CMAKE) --build build-asan -j $(JOBS) --target flashattn_tests
	ASAN_OPTIONS=$(ASAN_OPTS) $(SAN_ENV) \
	  ./build-asan/tests/cpp/flashattn_tests --gtest_brief=1 '--gtest_filter=$(SAN_TEST_FILTER)'

test-tsan: setup
	$(SAN_CONFIGURE) -S . -B build-tsan -DFLASHATTN_SANITIZE=thread
	$(CMAKE) --build build-tsan -j $(JOBS) --target flashattn_tests
	OMP_TOOL_LIBRARIES=$$(sed -n 's/^FLASHATTN_ARCHER_LIBRARY:FILEPATH=//p' build-tsan/CMakeCache.txt) \
	  TSAN_OPTIONS='halt_on_error=1 ignore_noninstrumented_modules=1 second_deadlock_stack=1' \
	  ./build-tsan/tests/cpp/flashattn_tests --gtest_brief=1 '--gtest_filter=$(TSAN_TEST_FILTER)'

# A build of its own: libFuzzer's coverage instrumentation tripled the ASan suite's time when the two
# shared one (bench/NOTES.md, session 15). New inputs go to build-fuzz/corpus; the committed seeds are
# tests/fuzz/corpus.tar (one file rather than ~400 small ones), unpacked into build-fuzz/seeds and only
# read; a failing input is saved as build-fuzz/crash-<sha1> and replays with
# ./build-fuzz/tests/fuzz/flashattn_fuzz_c_api <file>.
fuzz: setup
	$(SAN_CONFIGURE) -S . -B build-fuzz '-DFLASHATTN_SANITIZE=fuzzer;address;undefined' -DFLASHATTN_BUILD_FUZZ=ON \
	  -DFLASHATTN_BUILD_TESTS=OFF
	$(CMAKE) --build build-fuzz -j $(JOBS) --target flashattn_fuzz_c_api
	mkdir -p build-fuzz/corpus build-fuzz/seeds
	tar -xf tests/fuzz/corpus.tar -C build-fuzz/seeds
	ASAN_OPTIONS=$(ASAN_OPTS):allocator_may_return_null=1 $(SAN_ENV) \
	  ./build-fuzz/tests/fuzz/flashattn_fuzz_c_api -max_total_time=$(FUZZ_TIME) -timeout=30 -print_final_stats=1 \
	  -artifact_prefix=build-fuzz/ build-fuzz/corpus build-fuzz/seeds
