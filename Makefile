# vmbusd: build, test and benchmark targets. `make test` is the command the
# README gives and CI (.ci/run) runs.

GO       ?= go
# Helper programs for interop tests (DPDK's ring code, DPDK's netvsc PMD).
# Found beside the repository (../shared/tools) or set TOOLS=DIR.
TOOLS    ?= $(abspath $(firstword $(wildcard ../shared/tools)))
OUT      ?= $(abspath out)
FUZZTIME ?= 5s

.PHONY: all build vet test unit fuzz interop dpdk-guest bench bench-smoke afxdp-bench clean \
	install uninstall package

all: build

# The version `vmbusd --version` reports and the package carries.
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
# Stamped explicitly: builds with -buildvcs=false (GOFLAGS on some
# machines) record no VCS revision of their own.
LDFLAGS  ?= -X github.com/vmbusd/vmbusd/internal/buildinfo.version=$(VERSION) -X github.com/vmbusd/vmbusd/internal/buildinfo.revision=$(REVISION)

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(OUT)/vmbusd ./cmd/vmbusd
	$(GO) build -o $(OUT)/ringbench ./cmd/ringbench

STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

# Unit, integration and cross-process tests, with the race detector; then
# the bulk hv_sock test at full size (8 connections x 256 MiB each way,
# which the race detector would make too slow); then every allocation
# budget test (names matching Allocat) without -race, whose
# instrumentation allocates on some hot paths itself.
unit:
	$(GO) test -race -count=1 -timeout 20m ./...
	$(GO) test -count=1 -run TestManyConnectionsMoveVerifiedBytes -v ./hvsock
	$(GO) test -count=1 -run 'Allocat' ./...

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

# --- install and package (docs/install.md) ---------------------------------
# DESTDIR is put in front of every path, so a staging tree gets the final
# layout. The configuration stays in /etc/vmbusd whatever PREFIX is, because
# that is where the unit and `vmbusd run` look; only an example is
# installed there, never vmbusd.toml itself.
PREFIX         ?= /usr/local
BINDIR         ?= $(PREFIX)/bin
LIBEXECDIR     ?= $(PREFIX)/lib/vmbusd
DATADIR        ?= $(PREFIX)/share
DOCDIR         ?= $(DATADIR)/doc/vmbusd
MANDIR         ?= $(DATADIR)/man
SYSCONFDIR     ?= /etc
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
MODULESLOADDIR ?= $(PREFIX)/lib/modules-load.d
BASHCOMPDIR    ?= $(DATADIR)/bash-completion/completions
# Debian's zsh reads vendor-completions under /usr, site-functions elsewhere.
ZSHCOMPDIR     ?= $(DATADIR)/zsh/$(if $(filter /usr,$(PREFIX)),vendor-completions,site-functions)
FISHCOMPDIR    ?= $(DATADIR)/fish/vendor_completions.d
# The binary install copies (built here first), and the subcommand that
# writes its man pages into a directory, when it has one.
BIN            ?= $(OUT)/vmbusd
MANGEN         ?= man
INSTALL        ?= install

# What the repository's unit names; install rewrites both for BINDIR and DOCDIR.
UNIT_BIN := /usr/local/bin/vmbusd
UNIT_DOC := /usr/local/share/doc/vmbusd
SCRIPTS  := $(filter-out scripts/vmbus-lib.sh,$(wildcard scripts/vmbus-*))
# Installed under DOCDIR with these paths, so the links between them work.
DOCFILES := README.md LICENSE $(wildcard docs/*.md docs/protocol/*.md) \
	contrib/README.md contrib/systemd/README.md scripts/README.md
ASSETS   := $(wildcard contrib/grafana/*.json contrib/prometheus/*.yml)

# NOBUILD=1: install the BIN that is there (built before, or elsewhere).
install:
ifeq ($(NOBUILD),)
	$(GO) build -ldflags '$(LDFLAGS) $(EXTRA_LDFLAGS)' -o $(BIN) ./cmd/vmbusd
else
	@test -x $(BIN) || { echo "NOBUILD=1 but $(BIN) is not an executable"; exit 1; }
endif
	$(INSTALL) -d -m 0755 $(DESTDIR)$(BINDIR) $(DESTDIR)$(LIBEXECDIR) \
		$(DESTDIR)$(SYSTEMDUNITDIR) $(DESTDIR)$(MODULESLOADDIR) \
		$(DESTDIR)$(SYSCONFDIR)/vmbusd
	$(INSTALL) -m 0755 $(BIN) $(DESTDIR)$(BINDIR)/vmbusd
	@# The scripts find vmbus-lib.sh beside themselves through the link.
	$(INSTALL) -m 0755 $(SCRIPTS) $(DESTDIR)$(LIBEXECDIR)/
	$(INSTALL) -m 0644 scripts/vmbus-lib.sh $(DESTDIR)$(LIBEXECDIR)/
	for s in $(notdir $(SCRIPTS)); do \
		ln -sfr $(DESTDIR)$(LIBEXECDIR)/$$s $(DESTDIR)$(BINDIR)/$$s || exit 1; \
	done
	sed -e 's|$(UNIT_BIN)|$(BINDIR)/vmbusd|g' -e 's|$(UNIT_DOC)|$(DOCDIR)|g' \
		contrib/systemd/vmbusd.service > $(DESTDIR)$(SYSTEMDUNITDIR)/vmbusd.service
	chmod 0644 $(DESTDIR)$(SYSTEMDUNITDIR)/vmbusd.service
	$(INSTALL) -m 0644 contrib/systemd/vmbusd-modules.conf $(DESTDIR)$(MODULESLOADDIR)/vmbusd.conf
	$(INSTALL) -m 0644 contrib/vmbusd.toml $(DESTDIR)$(SYSCONFDIR)/vmbusd/vmbusd.toml.example
	@# Directories 0755 whatever the umask: the docs are for everyone.
	for f in $(DOCFILES); do \
		$(INSTALL) -d -m 0755 $(DESTDIR)$(DOCDIR)/$$(dirname $$f) && \
		$(INSTALL) -m 0644 $$f $(DESTDIR)$(DOCDIR)/$$f || exit 1; \
	done
	for f in $(ASSETS); do \
		g=$${f#contrib/}; \
		$(INSTALL) -d -m 0755 $(DESTDIR)$(DATADIR)/vmbusd/$$(dirname $$g) && \
		$(INSTALL) -m 0644 $$f $(DESTDIR)$(DATADIR)/vmbusd/$$g || exit 1; \
	done
	@if $(BIN) completion bash >/dev/null 2>&1; then \
		set -e; \
		$(INSTALL) -d -m 0755 $(DESTDIR)$(BASHCOMPDIR) $(DESTDIR)$(ZSHCOMPDIR) $(DESTDIR)$(FISHCOMPDIR); \
		$(BIN) completion bash > $(DESTDIR)$(BASHCOMPDIR)/vmbusd; \
		$(BIN) completion zsh > $(DESTDIR)$(ZSHCOMPDIR)/_vmbusd; \
		$(BIN) completion fish > $(DESTDIR)$(FISHCOMPDIR)/vmbusd.fish; \
		chmod 0644 $(DESTDIR)$(BASHCOMPDIR)/vmbusd $(DESTDIR)$(ZSHCOMPDIR)/_vmbusd $(DESTDIR)$(FISHCOMPDIR)/vmbusd.fish; \
		echo "installed bash, zsh and fish completion"; \
	else \
		echo "no shell completion installed: $(BIN) has no 'completion' command"; \
	fi
	@tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	if $(BIN) $(MANGEN) "$$tmp" >/dev/null 2>&1 && ls "$$tmp"/*.[1-8] >/dev/null 2>&1; then \
		set -e; n=0; \
		for page in "$$tmp"/*.[1-8]; do \
			sec=$${page##*.}; \
			$(INSTALL) -d -m 0755 $(DESTDIR)$(MANDIR)/man$$sec; \
			$(INSTALL) -m 0644 "$$page" $(DESTDIR)$(MANDIR)/man$$sec/; \
			n=$$((n+1)); \
		done; \
		echo "installed $$n man pages"; \
	else \
		echo "no man pages installed: '$(BIN) $(MANGEN) DIR' wrote none"; \
	fi

# Removes exactly what install wrote (then the directories it made, when
# empty), so a DOCDIR or LIBEXECDIR shared with others is safe.
uninstall:
	rm -f $(DESTDIR)$(BINDIR)/vmbusd $(addprefix $(DESTDIR)$(BINDIR)/,$(notdir $(SCRIPTS)))
	rm -f $(addprefix $(DESTDIR)$(LIBEXECDIR)/,$(notdir $(SCRIPTS)) vmbus-lib.sh)
	rm -f $(addprefix $(DESTDIR)$(DOCDIR)/,$(DOCFILES))
	rm -f $(addprefix $(DESTDIR)$(DATADIR)/vmbusd/,$(patsubst contrib/%,%,$(ASSETS)))
	rm -f $(DESTDIR)$(SYSTEMDUNITDIR)/vmbusd.service $(DESTDIR)$(MODULESLOADDIR)/vmbusd.conf
	rm -f $(DESTDIR)$(SYSCONFDIR)/vmbusd/vmbusd.toml.example
	rm -f $(DESTDIR)$(BASHCOMPDIR)/vmbusd $(DESTDIR)$(ZSHCOMPDIR)/_vmbusd $(DESTDIR)$(FISHCOMPDIR)/vmbusd.fish
	rm -f $(DESTDIR)$(MANDIR)/man[1-8]/vmbusd.[1-8] $(DESTDIR)$(MANDIR)/man[1-8]/vmbusd-*.[1-8]
	-rmdir $(DESTDIR)$(LIBEXECDIR) $(addprefix $(DESTDIR)$(DOCDIR)/,docs/protocol docs contrib/systemd contrib scripts) \
		$(DESTDIR)$(DOCDIR) $(addprefix $(DESTDIR)$(DATADIR)/vmbusd/,grafana prometheus) $(DESTDIR)$(DATADIR)/vmbusd 2>/dev/null
	@echo "kept $(SYSCONFDIR)/vmbusd (your configuration)"

# A Debian package from `make install DESTDIR=... PREFIX=/usr`, written to
# $(OUT) (packaging/build-deb).
package:
	MAKE='$(MAKE)' GO='$(GO)' VERSION='$(VERSION)' packaging/build-deb $(OUT)
