# The two commands a new user needs (README):
#   make run    set up this machine, build, and run the main job (pipebench run, defaults)
#   make check  set up this machine, build, and run every test
BUILD ?= build
JOBS ?= $(shell nproc)
# Tests wait on child processes, servers, sockets and signals part of their time: one more test
# than cores keeps the cores busy.
TEST_JOBS ?= $(shell echo $$(( $$(nproc) + 1 )))
CMAKE_FLAGS ?=

.PHONY: all setup build run check check-gpu check-s3 sanitize tsan clean install
all: build

setup:
	@scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD) -j $(JOBS)

run: build
	$(BUILD)/pipebench run

# Tests labelled gpu need an NVIDIA GPU and driver; `make check-gpu` runs them where there is one.
check: build
	cd $(BUILD) && ctest --output-on-failure -j $(TEST_JOBS) -LE 'gpu|s3'

# The S3 tests start radosgw in a one-node Ceph cluster (about a minute): `make check-s3`.
# Ceph's packages come only with this target (scripts/setup.sh --s3).
check-s3: build
	@scripts/setup.sh --s3
	cd $(BUILD) && ctest --output-on-failure -L s3

check-gpu: build
	cd $(BUILD) && ctest --output-on-failure -L gpu

# The test suite under AddressSanitizer + UndefinedBehaviorSanitizer, then ThreadSanitizer. The
# CUDA module is left out of both (no GPU runs it there; `make check` builds it with warnings as
# errors), and the TSan build makes only what the threaded tests run.
sanitize: setup
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DPB_WERROR=ON -DPB_CUDA=OFF -DPB_SANITIZE=address,undefined >/dev/null
	@cmake --build build-asan -j $(JOBS)
	cd build-asan && LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp ctest --output-on-failure -j $(TEST_JOBS) -LE 'nosan|gpu'

tsan: setup
	@cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DPB_WERROR=ON -DPB_CUDA=OFF -DPB_SANITIZE=thread >/dev/null
	@cmake --build build-tsan -j $(JOBS) --target pipebench_cli \
	  $$(cd build-tsan && ctest -N -L threads | sed -n 's/^ *Test *#[0-9]*: *//p')
	cd build-tsan && ctest --output-on-failure -j $(JOBS) -L threads

# Installs the program, the library, the headers, pipebench.pc and the Python helpers under
# PREFIX (default /usr/local); the Python package then installs with `pip install ./python`.
PREFIX ?= /usr/local
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

clean:
	rm -rf build build-asan build-tsan
