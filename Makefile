# Top-level entry points. `make run` and `make test` do all set-up on a fresh Debian bookworm machine:
# install missing packages (when root), configure, build Release, then run / test.
#   make test-asan   the unit suite under AddressSanitizer + UndefinedBehaviorSanitizer (build-san)
#   make fuzz        the libFuzzer targets, each for FUZZ_SECONDS, one per core at a time (built in the same build-san)
BUILD ?= build
JOBS ?= $(shell nproc)
# clang, libclang-rt-14-dev (libFuzzer, sanitizer runtimes) and libomp-dev (clang's OpenMP runtime) serve the
# sanitized build (`make test-asan`, `make fuzz`) only; pkgconf: every configure finds SentencePiece and PCRE2
# through pkg-config, and the installed-package test checks tfm.pc. ocl-icd-opencl-dev:
# Debian's oneDNN CMake package runs find_package(OpenCL REQUIRED) (its GPU runtime is OCL), and apt
# installs it only as a recommendation of libdnnl-dev, which --no-install-recommends skips.
PACKAGES = build-essential cmake libopenblas-dev libdnnl-dev ocl-icd-opencl-dev nlohmann-json3-dev libcli11-dev \
           googletest libgtest-dev libbenchmark-dev python3 python3-numpy python3-torch \
           clang libclang-rt-14-dev libomp-dev pkgconf libsentencepiece-dev libpcre2-dev \
           libopenmpi-dev openmpi-bin python3-nltk pybind11-dev python3-pybind11 python3-dev python3-pytest

# One sanitized build serves both test-asan and fuzz: clang (libFuzzer needs it) with ASan + UBSan
# and libFuzzer's coverage instrumentation (TFM_FUZZ), tests, examples and fuzz targets together, so
# CI compiles the sanitized library once instead of twice (gcc for the suite, clang for the fuzzers).
# -O1 keeps the suite fast enough, -g1 gives file:line in reports, and no NDEBUG so debug-only
# asserts run too. The code that only drives the library (tests, examples, the CLI) is compiled at -O0
# and without the fuzzers' coverage instrumentation (tfm_set_common's DRIVER in CMakeLists.txt). (Named build-san, not build-asan: an old gcc-configured build-asan would need its
# cache deleted to switch compiler.)
ASAN_BUILD ?= build-san
ASAN_FLAGS = -DCMAKE_CXX_COMPILER=clang++ -DTFM_FUZZ=ON -DTFM_SANITIZE=address,undefined \
             -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DTFM_BUILD_BENCH=OFF \
             -DTFM_MPI=OFF
# Tests left out of the sanitized run (a ctest -E regex), only for time; `make test` runs them. Under the
# sanitizers (-O1, every access checked) the attention twin takes minutes on long sequences: the two sweeps
# against it there took 476 s and 344 s of the run's 2,224 test-seconds (AMD Zen 3), while the long-sequence
# paths of the fast bodies stay under the sanitizers without the twin (AttentionKernel.BitwiseSameForOneAnd
# TwoThreads, Avx2GemmBodiesBitwiseAcrossThreadCounts, RowPathEqualsTilePath, ...); kernels.isa (74 s)
# disassembles the library to check which functions hold which instructions, which is the Release build's
# question. Two 50-step training curves against PyTorch (65 s and 62 s under the sanitizers, Zen 3) run code
# that shorter sanitized tests run too: the bfloat16 step (TrainerBf16.*), and notebook 4's layers
# (ImportModelDir.Notebook4TrainsLikeItsModule). example.train_reverse (78 s, Zen 3) trains 600 steps of the task
# the sanitized Trainer.*, TrainCli.* and TrainLikeCli.* tests train a few steps of, through the same public calls.
ASAN_EXCLUDE ?= ^(AttentionKernel\.FastMatchesScalarLongSequences|AttentionKernel\.Avx2GemmBodiesMatchScalar|kernels\.isa|Model\.Bf16CurveTracksFloat64|Model\.Notebook4VariantTrainsLikeTorch|example\.train_reverse)$$
export ASAN_OPTIONS ?= detect_leaks=1:strict_string_checks=1
export UBSAN_OPTIONS ?= print_stacktrace=1:halt_on_error=1

FUZZ_SECONDS ?= 60
FUZZ_TARGETS = safetensors config tsv bpe train_config

.PHONY: all deps configure build run test configure-asan test-asan fuzz bench clean

all: build

deps:
	@./tools/install_deps.sh $(PACKAGES)
	@./tools/install_npm_refs.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release > $(BUILD).configure.log 2>&1 || (cat $(BUILD).configure.log; exit 1)

build: configure
	@cmake --build $(BUILD) -j$(JOBS)

# One thread: at this model size (d_model 64) a step is mostly fixed overhead, and two OpenMP threads
# measured 3x slower in wall time on the shared 2-core machine (84 s vs 253 s); results are identical.
run: build
	@./$(BUILD)/tfm train --task reverse --arch encoder --out runs/reverse --threads 1 --force

test: build
	@cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 900

configure-asan: deps
	@cmake -S . -B $(ASAN_BUILD) $(ASAN_FLAGS) > $(ASAN_BUILD).configure.log 2>&1 || (cat $(ASAN_BUILD).configure.log; exit 1)

# Builds everything in ASAN_BUILD (the fuzz targets too), then runs the whole suite.
test-asan: configure-asan
	@cmake --build $(ASAN_BUILD) -j$(JOBS)
	@cd $(ASAN_BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 1200 -E '$(ASAN_EXCLUDE)'

# After test-asan the targets are up to date and this only runs them; alone it builds just them.
fuzz: configure-asan
	@cmake --build $(ASAN_BUILD) -j$(JOBS) --target $(addprefix fuzz_,$(FUZZ_TARGETS))
	@fuzz/run.sh $(ASAN_BUILD) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

bench: build
	@/usr/bin/python3 bench/compare_torch.py --tfm ./$(BUILD)/tfm

clean:
	rm -rf $(BUILD) $(BUILD).configure.log $(ASAN_BUILD) $(ASAN_BUILD).configure.log
