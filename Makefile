# ggml-remote: `make demo` and `make test` are all a new user needs.
# Everything runs inside a Debian sid root (scripts/make-sysroot) unless this
# machine already has ggml >= 0.27.
BUILD ?= build
RUN := scripts/in-sysroot
CTEST_ARGS ?=
# WERROR=ON: warnings fail the build (CI); the default leaves the cache's setting.
WERROR ?=
CMAKE_FLAGS := $(if $(WERROR),-DGGML_REMOTE_WERROR=$(WERROR))

.PHONY: all build test unit demo conformance bench bench-vm sysroot clean fuzz sanitize format tidy

all: build

sysroot:
	scripts/make-sysroot

build:
	$(RUN) sh -c 'cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo $(CMAKE_FLAGS) $$(command -v ninja >/dev/null && echo -G Ninja) >/dev/null && cmake --build $(BUILD) -j2'

test: build
	$(RUN) ctest --test-dir $(BUILD) --output-on-failure $(CTEST_ARGS)

unit: build
	$(RUN) ctest --test-dir $(BUILD) --output-on-failure -L unit

bench: build
	$(RUN) scripts/bench.sh $(BUILD)

# make bench-vm: llama.cpp inside the test VM (scripts/vm/run) beside the host:
# its own CPU, through our server over its network, vsock and ivshmem, through
# ggml-rpc (scripts/bench_vm.sh).
bench-vm: build
	$(RUN) scripts/bench_vm.sh $(BUILD)

demo: build
	$(RUN) scripts/demo.sh $(BUILD)

conformance: build
	$(RUN) scripts/conformance.sh $(BUILD)

# make fuzz: the libFuzzer targets (clang, ASan + UBSan) in build-fuzz/, FUZZ_SECONDS
# each over the committed corpus; findings in build-fuzz/crashes/ (see tests/fuzz/README.md).
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
fuzz:
	$(RUN) env FUZZ_SECONDS=$(FUZZ_SECONDS) $(if $(FUZZ_TARGETS),FUZZ_TARGETS="$(FUZZ_TARGETS)") scripts/fuzz.sh $(FUZZ_BUILD)

# make sanitize: the unit tests, every fuzz corpus's replay and the race tests, built
# with ASan + UBSan (clang) in $(SANITIZE_BUILD)/; CI runs it after make test.
SANITIZE_BUILD ?= build-sanitize
sanitize:
	$(RUN) env CTEST_ARGS="$(CTEST_ARGS)" scripts/sanitize.sh $(SANITIZE_BUILD)

# make format: fails naming each C++ file clang-format would change (FIX=1 rewrites them).
format:
	$(RUN) env FIX=$(FIX) scripts/check-format.sh

# make tidy: clang-tidy (.clang-tidy) over the protocol, transports and host/common.
tidy: build
	$(RUN) scripts/check-tidy.sh $(BUILD)

clean:
	rm -rf $(BUILD)

# make deb: $(BUILD)/ggml-remote-{plugin,server}_<version>-1_<arch>.deb (CPack; see
# packaging/). dpkg-shlibdeps writes their Depends:, so dpkg-dev (and file, which
# CPack runs on each file first) is installed in the build root when missing.
# make deb-test: installs them into a fresh Debian sid root and runs the installed
# server and plugin there, in a chroot and booted by systemd-nspawn (a few minutes,
# needs root, mmdebstrap and systemd-container; not in `make test`).
.PHONY: deb deb-test

deb: build
	$(RUN) sh -c 'command -v dpkg-shlibdeps >/dev/null && command -v file >/dev/null || { apt-get update -qq && apt-get install -y -qq --no-install-recommends dpkg-dev file >/dev/null; }'
	$(RUN) sh -c 'cd $(BUILD) && cpack -G DEB'

deb-test: deb
	scripts/deb-test.sh $(BUILD)
