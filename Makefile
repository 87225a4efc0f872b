# vmbusd: build, test and benchmark targets. `make test` is the command the
# README gives and CI (.ci/run) runs.

GO       ?= go
# Helper programs for interop tests (DPDK's ring code, DPDK's netvsc PMD).
# Found beside the repository (../shared/tools) or set TOOLS=DIR.
TOOLS    ?= $(abspath $(firstword $(wildcard ../shared/tools)))
OUT      ?= $(abspath out)
FUZZTIME ?= 10s

.PHONY: all build vet test unit fuzz interop dpdk-guest bench bench-smoke afxdp-bench clean

all: build

build:
	$(GO) build -o $(OUT)/vmbusd ./cmd/vmbusd
	$(GO) build -o $(OUT)/ringbench ./cmd/ringbench

STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

# Unit, integration and cross-process tests, with the race detector; then
# the bulk hv_sock test at full size (8 connections x 256 MiB each way,
# which the race detector would make too slow).
unit:
	$(GO) test -race -count=1 -timeout 20m ./...
	$(GO) test -count=1 -run TestManyConnectionsMoveVerifiedBytes -v ./hvsock

fuzz:
	FUZZTIME=$(FUZZTIME) ./.ci/fuzz

# Interop with DPDK's own VMBus ring code (needs ringpeer: `make $(OUT)/ringpeer`).
interop: $(OUT)/ringpeer
	RINGPEER=$(OUT)/ringpeer VMBUSD_REQUIRE_INTEROP=1 $(GO) test -count=1 -run Interop -v ./cmd/ringbench

$(OUT)/ringpeer:
	@test -n "$(TOOLS)" || { echo "ringpeer sources not found: set TOOLS=/path/to/shared/tools"; exit 1; }
	$(TOOLS)/ringpeer/build.sh $(OUT)

# DPDK's unmodified netvsc PMD (Debian's dpdk-testpmd) against `vmbusd sim`:
# every run must PASS with zero guest violations (needs root; installs dpdk),
# then the same PMD with a net_af_xdp VF against `vmbusd sim --vf`.
dpdk-guest:
	@test -n "$(TOOLS)" || { echo "dpdk-guest sources not found: set TOOLS=/path/to/shared/tools"; exit 1; }
	DPDK_GUEST=$(TOOLS)/dpdk-guest ./.ci/dpdk-guest 8
	DPDK_GUEST=$(TOOLS)/dpdk-guest ./.ci/dpdk-guest-vf

test: vet unit fuzz interop dpdk-guest bench-smoke

# Every side-by-side comparison in one run (the ring against DPDK's ring
# code, netvsc against DPDK's netvsc PMD, the TAP attachment against veth,
# hv_sock against a Unix socket pair, idle CPU, hybrid against busy
# polling, the in-process benchmarks with benchstat), written to
# docs/performance.md. Runs as root; rows whose tools are missing say
# "skipped". BENCHFLAGS: -runs N (default 5), -only ROW,... (the other
# sections are kept), -quick; `go run ./cmd/benchreport -list` lists rows.
BENCHFLAGS ?=
bench:
	$(GO) run ./cmd/benchreport -tools "$(TOOLS)" $(BENCHFLAGS)

# The harness's smoke test: one short run of every row into $(OUT), then a
# check that the report is well-formed and has every row (no figure is
# asserted; a tool whose output the harness no longer understands fails).
bench-smoke:
	$(GO) run ./cmd/benchreport -quick -tools "$(TOOLS)" -out $(OUT)/bench-smoke/performance.md
	$(GO) run ./cmd/benchreport -check $(OUT)/bench-smoke/performance.md

# vmbusd's AF_XDP data path against DPDK's net_af_xdp on one veth pair
# (needs root; installs dpdk). SECS per window, REPEAT=3 interleaved runs.
afxdp-bench:
	./cmd/xdpbench/bench.sh $(SECS)

clean:
	rm -rf $(OUT)
