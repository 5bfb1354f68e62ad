# tprec / tpreplay
GO      ?= go
BIN     := bin
TOOLS   := tprec tpreplay tpinspect
GOFLAGS ?=

.PHONY: all build test demo generate check-generate bench soak fuzz clean

all: build

# The tools are linked statically (no cgo, which only the standard library's
# name lookups would use): one file each, which runs on any x86-64 Linux,
# whatever its C library (TestReplayOnOtherKernels runs them in a VM that
# has none).
build:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build $(GOFLAGS) -o $(BIN)/ $(addprefix ./tools/,$(TOOLS))

# The whole suite. Kernel-dependent tests need root; with CI=true they fail
# instead of skipping when they cannot run. One package at a time (-p 1):
# the end-to-end tests record real programs, and the unit tests' packages
# beside them on two CPUs made timing-bound ones fail (a pids slot held at
# every boundary, a target OOM-killed while a shadow's memory was freed).
test: build
	$(GO) vet ./...
	$(GO) test -count=1 -p 1 -timeout 40m ./...

# Record the bundled example until it crashes, replay it, show the verified crash.
demo: build
	bash scripts/demo.sh

generate:
	$(GO) generate ./...

# Regenerate and fail when the committed generated files differ (or when
# generation leaves new files behind).
GENERATED := syscalls/zsysnum_amd64.go bpf/syscall_table.h bpf/tprec_x86_bpfel.go bpf/tprec_x86_bpfel.o
check-generate: generate
	git diff --exit-code -- $(GENERATED)
	test -z "$$(git status --porcelain --untracked-files=all -- bpf syscalls)"

# Recording overhead (eBPF, ptrace, strace, gdb) against unrecorded runs;
# needs root. Results go to bench-results.txt; BENCHMARKS.md discusses them.
bench: build
	bash scripts/bench.sh

# Record real programs (redis, memcached, python3, gzip, bash) again and
# again, each crashed at a random moment, and check every checkpoint: a
# trial replay that succeeded, a replay that verifies. Needs root;
# ROUNDS, WORKLOADS, BACKENDS as scripts/soak.sh says.
soak: build
	bash scripts/soak.sh

fuzz:
	$(GO) test ./format -run '^$$' -fuzz FuzzDecode -fuzztime 60s
	$(GO) test ./format -run '^$$' -fuzz FuzzSectionPayload -fuzztime 60s
	$(GO) test ./recorder -run '^$$' -fuzz FuzzDecodeRecord -fuzztime 30s
	$(GO) test ./replayer/gdb -run '^$$' -fuzz FuzzPacket -fuzztime 30s
	$(GO) test ./syscalls -run '^$$' -fuzz FuzzOutputs -fuzztime 30s

clean:
	rm -rf $(BIN)
