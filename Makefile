# vmbusd: build, test and benchmark targets. `make test` is the command the
# README gives and CI (.ci/run) runs.

GO       ?= go
# Helper programs for interop tests (DPDK's ring code, DPDK's netvsc PMD).
# Found beside the repository (../shared/tools) or set TOOLS=DIR.
TOOLS    ?= $(abspath $(firstword $(wildcard ../shared/tools)))
OUT      ?= $(abspath out)
FUZZTIME ?= 10s

.PHONY: all build vet test unit fuzz interop dpdk-guest bench afxdp-bench clean

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

test: vet unit fuzz interop dpdk-guest

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# vmbusd's AF_XDP data path against DPDK's net_af_xdp on one veth pair
# (needs root; installs dpdk). SECS per window, REPEAT=3 interleaved runs.
afxdp-bench:
	./cmd/xdpbench/bench.sh $(SECS)

clean:
	rm -rf $(OUT)
