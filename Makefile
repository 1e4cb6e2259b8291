# The two commands of the README:
#   make bench   set up, build, run flashattn-bench on every backend this machine has
#   make test    set up, build (CUDA kernels too when nvcc is present), run the C++ and Python tests
# Everything else is a building block of those two.

BUILD ?= build
JOBS ?= $(shell nproc)
VENV := .venv
CMAKE := $(VENV)/bin/cmake
CTEST := $(VENV)/bin/ctest
PY := $(VENV)/bin/python
CMAKE_ARGS ?=

.PHONY: all setup configure build test test-cpp test-python bench format clean

all: build

setup:
	./scripts/setup.sh

configure: setup
	$(CMAKE) -S . -B $(BUILD) -G Ninja -DCMAKE_MAKE_PROGRAM=$(abspath $(VENV)/bin/ninja) $(CMAKE_ARGS)

build: configure
	$(CMAKE) --build $(BUILD) -j $(JOBS)

test-cpp: build
	cd $(BUILD) && $(abspath $(CTEST)) --output-on-failure -j $(JOBS) --no-tests=error

# The Python package is built without CUDA here: its tests run on CPU arrays, and the CUDA kernels
# are already compiled (and so checked) by the C++ build above.
test-python: setup
	$(PY) -m pip install -q --no-build-isolation -C cmake.define.FLASHATTN_CUDA=OFF .
	$(PY) -m pytest -q tests/python

test: test-cpp test-python

bench: build
	./$(BUILD)/tools/bench/flashattn-bench

format:
	clang-format -i $$(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD)
