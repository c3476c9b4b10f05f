# pagoda — thin front door over CMake. `make test` is what CI runs (.ci/run).
#   make bootstrap  what building and serving need, only what is missing (scripts/bootstrap
#                   --serve: compiler, CMake, libraries, python3-pip for fetch-model)
#   make bootstrap-test  that and the test tools (scripts/bootstrap --test: promtool,
#                   Chromium, clang-format, the Python venv .venv)
#   make build      bootstrap + configure + build into build/
#   make serve      build, fetch the default model, serve it on http://127.0.0.1:8000
#                   (HOST, PORT and SERVE_ARGS override: make serve PORT=9000)
#   make test       bootstrap-test, build, then C unit tests (ctest -L unit), model tests
#                   (ctest -L model) and the pytest suites (reference checks and end-to-end)
#   make test-asan  unit tests under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)
#   make test-e2e-asan  model tests and the end-to-end pytest suite against the ASan + UBSan
#                   build (build-asan/pagoda); leaks at exit fail (E2E_ASAN_TESTS picks pytest
#                   modules, E2E_ASAN_MODEL a regex of model tests)
#   make test-tsan  the tests that start threads under ThreadSanitizer (build-tsan/; TSAN_TESTS)
#   make test-valgrind  unit tests under valgrind memcheck, errors and leaks fatal (build-valgrind/;
#                   VALGRIND_TESTS picks them, default: every unit test)
#   make fuzz       libFuzzer targets (clang, ASan + UBSan) into build-fuzz/, each run for
#                   FUZZ_SECONDS (60); FUZZ_TARGETS picks them, FUZZ_JOBS runs several at once
#   make test-cuda-emu  the CUDA tests (tests/gpu) and the fault-injection test on a CPU emulation
#                   of the CUDA runtime and cuBLASLt (tests/cuda_emu/run; needs the CUDA toolkit:
#                   build/ with PGD_CUDA on; CUDA_EMU_TESTS picks tests; the GGUF weight-type
#                   models of tests/gpu/make_gguf.py are written into build/gguf-types). No
#                   substitute for a GPU
#   make format     clang-format every C and CUDA source (and .inc body) in place
#   make format-check  fail if any source differs from .clang-format (CI runs it)
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
ifeq ($(CI),true)
CMAKE_FLAGS += -DPGD_WERROR=ON
endif
PYTEST := .venv/bin/python -m pytest

HOST ?= 127.0.0.1
PORT ?= 8000
SERVE_ARGS ?=

.PHONY: all bootstrap bootstrap-test build serve test test-unit test-model test-py test-asan \
	model format format-check clean test-e2e-asan test-tsan test-valgrind fuzz test-cuda-emu

all: build

bootstrap:
	@scripts/bootstrap --serve

bootstrap-test:
	@scripts/bootstrap --test

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: bootstrap $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS)

model: bootstrap
	@scripts/fetch-model >/dev/null

serve: build model
	$(BUILD)/pagoda serve --model "$$(scripts/fetch-model)" --host $(HOST) --port $(PORT) $(SERVE_ARGS)

test-unit: bootstrap-test build
	cd $(BUILD) && ctest -L unit --output-on-failure -j$(JOBS)

test-model: bootstrap-test build model
	cd $(BUILD) && PAGODA_MODEL=$$($(CURDIR)/scripts/fetch-model) ctest -L model --output-on-failure

test-py: bootstrap-test build model
	cd tests && PAGODA_BIN=$(CURDIR)/$(BUILD)/pagoda PAGODA_MODEL=$$($(CURDIR)/scripts/fetch-model) \
	  ../$(PYTEST) -q

test: test-unit test-model test-py

test-asan: bootstrap
	cmake -S . -B build-asan -DPGD_ASAN=ON -DPGD_UBSAN=ON -DPGD_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build build-asan -j$(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest -L unit --output-on-failure -j$(JOBS)

# --- sanitizers and fuzzing beyond test-asan (CI: .ci/run) -----------------------------------
# ASan: leaks are errors (LeakSanitizer exits 23), so a server that leaks fails the e2e
# conftest's "exit status 0 after SIGTERM"; UBSan stops at the first report.
SAN_ENV = ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0 \
	UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
E2E_ASAN_TESTS ?= e2e
E2E_ASAN_MODEL ?= .

test-e2e-asan: bootstrap-test model
	cmake -S . -B build-asan -DPGD_ASAN=ON -DPGD_UBSAN=ON -DPGD_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build build-asan -j$(JOBS)
	cd build-asan && $(SAN_ENV) PAGODA_MODEL=$$($(CURDIR)/scripts/fetch-model) \
	  ctest -L model -R '$(E2E_ASAN_MODEL)' --output-on-failure
	cd tests && $(SAN_ENV) PAGODA_BIN=$(CURDIR)/build-asan/pagoda \
	  PAGODA_MODEL=$$($(CURDIR)/scripts/fetch-model) ../$(PYTEST) -q -p no:cacheprovider \
	  $(E2E_ASAN_TESTS)

# The tests that start threads (scheduler worker, compute threadpool, HTTP server loop, metrics
# from several threads, the CPU backend over its pool).
TSAN_TESTS ?= test_worker test_threadpool test_http test_http_edges test_metrics test_backend \
	test_tokenizer
empty :=
space := $(empty) $(empty)
TSAN_ENV = TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$(CURDIR)/tests/tsan.supp

test-tsan: bootstrap-test
	cmake -S . -B build-tsan -DPGD_TSAN=ON -DPGD_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build build-tsan -j$(JOBS) --target $(TSAN_TESTS)
	cd build-tsan && $(TSAN_ENV) ctest -R '^($(subst $(space),|,$(strip $(TSAN_TESTS))))$$' \
	  --output-on-failure

# valgrind memcheck over the unit tests of build-valgrind/ (plain -O2 -g, no CUDA: the CUDA
# runtime's dlopen and allocations are not the project's and are not clean under memcheck): any
# error or leak fails.
VALGRIND_BUILD ?= build-valgrind
VALGRIND_TESTS ?= $(notdir $(basename $(wildcard tests/unit/test_*.c)))
VALGRIND = valgrind --error-exitcode=1 --leak-check=full --show-leak-kinds=definite,indirect \
	--errors-for-leak-kinds=definite,indirect --track-origins=yes --quiet

test-valgrind: bootstrap-test
	cmake -S . -B $(VALGRIND_BUILD) -DPGD_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build $(VALGRIND_BUILD) -j$(JOBS)
	@set -e; for t in $(VALGRIND_TESTS); do \
	  [ -x $(VALGRIND_BUILD)/$$t ] || { echo "test-valgrind: $$t not built"; exit 1; }; \
	  s=$$(date +%s); echo "valgrind: $$t"; \
	  (cd $(VALGRIND_BUILD) && $(VALGRIND) ./$$t >valgrind-$$t.log 2>&1) || \
	    { cat $(VALGRIND_BUILD)/valgrind-$$t.log; echo "test-valgrind: $$t FAILED"; exit 1; }; \
	  echo "valgrind: $$t ok ($$(( $$(date +%s) - s ))s)"; done

FUZZ_SECONDS ?= 60
FUZZ_JOBS ?= 1
FUZZ_TARGETS ?=

fuzz: bootstrap-test
	cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DPGD_FUZZ=ON -DPGD_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build build-fuzz -j$(JOBS) --target fuzz
	FUZZ_JOBS=$(FUZZ_JOBS) tests/fuzz/run build-fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

CUDA_EMU_TARGETS = test_cuda_attention test_cuda_dequant test_cuda_forward test_cuda_gemm \
	test_cuda_gemm_deq test_cuda_gemm_grouped test_cuda_gemv_q4 test_cuda_gemv_q8 test_cuda_moe \
	test_cuda_ops test_cuda_q4 test_cuda_q8 test_cuda_sample test_cuda_warmup \
	bench_cuda_decode_kernels
CUDA_EMU_TESTS ?=

test-cuda-emu: bootstrap-test $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS) --target $(CUDA_EMU_TARGETS)
	.venv/bin/python tests/gpu/make_gguf.py $(BUILD)/gguf-types
	PGD_TEST_GGUF_DIR=$(abspath $(BUILD))/gguf-types tests/cuda_emu/run $(BUILD) $(CUDA_EMU_TESTS)

FORMAT_SOURCES = git ls-files '*.c' '*.h' '*.cu' '*.cuh' '*.inc'

format:
	$(FORMAT_SOURCES) | xargs clang-format -i

format-check: bootstrap-test
	$(FORMAT_SOURCES) | xargs clang-format --dry-run -Werror

clean:
	rm -rf $(BUILD) build-asan build-tsan build-valgrind build-fuzz
