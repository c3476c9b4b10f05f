# pagoda — thin front door over CMake. `make test` is what CI runs (.ci/run).
#   make build      bootstrap (only what is missing) + configure + build into build/
#   make serve      build, fetch the default model, serve it on http://127.0.0.1:8000
#                   (HOST, PORT and SERVE_ARGS override: make serve PORT=9000)
#   make test       build, then C unit tests (ctest -L unit), model tests (ctest -L model) and
#                   the pytest suites (reference checks and end-to-end CLI tests)
#   make test-asan  unit tests under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)
#   make fuzz       libFuzzer targets (clang, ASan + UBSan) into build-fuzz/, each run for
#                   FUZZ_SECONDS (60); FUZZ_TARGETS picks them, FUZZ_JOBS runs several at once
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

.PHONY: all bootstrap build serve test test-unit test-model test-py test-asan model format \
	format-check clean fuzz

all: build

bootstrap:
	@scripts/bootstrap

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

build: bootstrap $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j$(JOBS)

model: bootstrap
	@scripts/fetch-model >/dev/null

serve: build model
	$(BUILD)/pagoda serve --model "$$(scripts/fetch-model)" --host $(HOST) --port $(PORT) $(SERVE_ARGS)

test-unit: build
	cd $(BUILD) && ctest -L unit --output-on-failure -j$(JOBS)

test-model: build model
	cd $(BUILD) && PAGODA_MODEL=$$($(CURDIR)/scripts/fetch-model) ctest -L model --output-on-failure

test-py: build model
	cd tests && PAGODA_BIN=$(CURDIR)/$(BUILD)/pagoda PAGODA_MODEL=$$($(CURDIR)/scripts/fetch-model) \
	  ../$(PYTEST) -q

test: test-unit test-model test-py

test-asan: bootstrap
	cmake -S . -B build-asan -DPGD_ASAN=ON -DPGD_UBSAN=ON -DPGD_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build build-asan -j$(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest -L unit --output-on-failure -j$(JOBS)

# --- fuzzing (CI: .ci/run) ----------------------------------------------------------------
FUZZ_SECONDS ?= 60
FUZZ_JOBS ?= 1
FUZZ_TARGETS ?=

fuzz: bootstrap
	cmake -S . -B build-fuzz -DCMAKE_C_COMPILER=clang -DPGD_FUZZ=ON -DPGD_CUDA=OFF $(CMAKE_FLAGS)
	cmake --build build-fuzz -j$(JOBS) --target fuzz
	FUZZ_JOBS=$(FUZZ_JOBS) tests/fuzz/run build-fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

FORMAT_SOURCES = git ls-files '*.c' '*.h' '*.cu' '*.inc'

format:
	$(FORMAT_SOURCES) | xargs clang-format -i

format-check: bootstrap
	$(FORMAT_SOURCES) | xargs clang-format --dry-run -Werror

clean:
	rm -rf $(BUILD) build-asan build-fuzz
