# Top-level entry points. `make run` and `make test` do all set-up on a fresh Debian bookworm machine:
# install missing packages (when root), configure, build Release, then run / test.
BUILD ?= build
JOBS ?= $(shell nproc)
PACKAGES = build-essential cmake libopenblas-dev libdnnl-dev nlohmann-json3-dev libcli11-dev \
           googletest libgtest-dev libbenchmark-dev python3 python3-numpy python3-torch

.PHONY: all deps configure build run test bench clean

all: build

deps:
	@./tools/install_deps.sh $(PACKAGES)

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release > $(BUILD).configure.log 2>&1 || (cat $(BUILD).configure.log; exit 1)

build: configure
	@cmake --build $(BUILD) -j$(JOBS)

run: build
	@./$(BUILD)/tfm train --task reverse --arch encoder --out runs/reverse

test: build
	@cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 900

bench: build
	@/usr/bin/python3 bench/compare_torch.py --tfm ./$(BUILD)/tfm

clean:
	rm -rf $(BUILD) $(BUILD).configure.log
