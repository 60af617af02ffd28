# hamaster — see README.md. Targets: build test lint demo bench dist man
# kube-apiserver test-real test-metal test-gce-kubeadm.
GO       ?= go
BIN      ?= bin
DIST     ?= dist
PKGS     ?= ./...
STATICCHECK_VERSION ?= v0.8.2

# Stamped into the binaries (hamaster version / --version).
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
DATE     ?= $(shell date -u +%Y-%m-%dT%H:%M:%SZ)
LDFLAGS  := -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(DATE)
PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64

.PHONY: test-prereqs test-race build test lint demo bench verify-fmt fix-fmt clean dist man kube-apiserver test-real test-metal test-metal-lab test-metal-walk metal-walk-test test-gce-kubeadm

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/hamaster ./cmd/hamaster
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/hamaster-node ./cmd/hamaster-node
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/gcefake ./cmd/gcefake
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/metallab ./cmd/metallab
	$(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/hamaster-kubelet ./cmd/hamaster-kubelet

# The CLI for every platform operators run it on, version stamped, static
# and reproducible (-trimpath), with hamaster-node beside it (what
# --provider local runs; hamaster finds it next to itself):
# dist/hamaster-<os>-<arch>/{hamaster,hamaster-node}.
dist:
	@set -e; for p in $(PLATFORMS); do \
		os=$${p%/*}; arch=$${p#*/}; dir=$(DIST)/hamaster-$$os-$$arch; \
		mkdir -p $$dir; echo "$$dir/{hamaster,hamaster-node}"; \
		for b in hamaster hamaster-node; do \
			CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "-s -w $(LDFLAGS)" -o $$dir/$$b ./cmd/$$b; \
		done; \
	done

# hamaster(1), generated from the commands' help.
man:
	@mkdir -p $(DIST)/man/man1
	$(GO) run ./cmd/hamaster man > $(DIST)/man/man1/hamaster.1

# The test command the README names and CI runs. Its first step installs
# what the tests need on a fresh machine (scripts/test-prereqs.sh: gcc,
# openssh-server, iproute2; moto checked), or says how and stops. From a
# fresh clone it is CPU-bound on 2 cores (a cold build cache), so:
#  - every package runs without -race: the race detector's build (the
#    standard library and every dependency compiled a second time,
#    instrumented) and its slower tests cost what took make test past
#    10 minutes (669 s from a fresh clone with the logic packages under
#    -race, at b2bf77d; 531 s at 806e116 with the changes here); .ci/run
#    runs it with RACE=1: every package under -race;
#  - hamaster-node and hamaster are built once for every package that
#    starts local clusters (TEST_BINARIES);
#  - several packages at once, and several tests at once in each (the
#    slow ones mostly wait on their fakes' timers and processes);
#  - go vet runs in 'make lint' (its full set; .ci/run runs it), not in
#    go test too (-vet=off): go test's vet subset type-checked every
#    dependency a second time for its facts, 223 of a fresh clone's
#    1,585 CPU-seconds of building (go test -debug-trace at e74fdd6), and
#    .ci/run then vetted the tree again in make lint;
#  - the slowest cloud tests are -tags fidelity: .ci/run runs them.
TEST_P ?= 4
# Tests at once within a package (go test -parallel; its default is
# GOMAXPROCS, 2 here): the slow packages' tests mostly wait on processes
# they start (etcd, the nodes, moto, the fakes' timers), so 4 at once
# halves their wall time (workflows: 205 s → 100 s on 2 cores, with a
# kube build beside it) at the same CPU.
TEST_PARALLEL ?= 4
# Test binaries and the test build of hamaster-node and hamaster are
# linked without DWARF (-ldflags=-w): the linker's DWARF phase is ~40% of
# a test binary's link (workflows.test: 3.2 s → 1.8 s), and make test
# links ~70 of them from a fresh clone. Panics still print file:line
# (that is the pclntab, not DWARF); only a debugger loses its symbols:
# go test -c without it for that.
TEST_LDFLAGS ?= -w
# hamaster-node and hamaster with the tests' crash hook (-tags
# hamaster_faults), built once for every test package of make test
# (localtest.BinariesEnv) instead of linked again by each of the eight
# packages that start local clusters.
TEST_BINARIES ?= $(abspath $(BIN))/test
# The packages whose tests take longest go first: go test starts building
# and running packages in the order named, and from a fresh clone the
# workflows package (~190 s of tests) started last set make test's length.
SLOW_FIRST = github.com/hamaster/hamaster/workflows github.com/hamaster/hamaster/providers/aws github.com/hamaster/hamaster/cmd/hamaster
# RACE=1: every test of every package under the race detector (.ci/run
# runs make test so: one run of every test, instrumented, instead of make
# test and then a second run of most of it under -race). The binaries
# the tests start (TEST_BINARIES) stay uninstrumented, as before.
RACE ?=
test: test-prereqs
	$(GO) build -tags hamaster_faults -ldflags=$(TEST_LDFLAGS) -o $(TEST_BINARIES)/ ./cmd/hamaster-node ./cmd/hamaster
	@pkgs=$$($(GO) list $(PKGS)) || exit 2; \
	first=$$(printf '%s\n' $$pkgs | grep -xF $(addprefix -e ,$(SLOW_FIRST))); \
	rest=$$(printf '%s\n' $$pkgs | grep -vxF $(addprefix -e ,$(SLOW_FIRST))); \
	echo "HAMASTER_TEST_BINARIES=$(TEST_BINARIES) $(GO) test $(if $(RACE),-race )-vet=off -ldflags=$(TEST_LDFLAGS) -p $(TEST_P) -parallel $(TEST_PARALLEL) -timeout 15m $$(echo $$first) ./... (the slowest first)"; \
	HAMASTER_TEST_BINARIES=$(TEST_BINARIES) $(GO) test $(if $(RACE),-race) -vet=off -ldflags=$(TEST_LDFLAGS) -p $(TEST_P) -parallel $(TEST_PARALLEL) -timeout 15m $$first $$rest

# make test with every package under -race.
test-race:
	$(MAKE) test RACE=1

test-prereqs:
	./scripts/test-prereqs.sh

# The tiers' build tags: their test files are vetted and checked too
# (the tags only add files; none excludes one that lint would otherwise
# check, hamaster_faults aside, whose fault_off.go is the release's).
LINT_TAGS ?= metallab fidelity realapiserver gcekubeadm
lint: verify-fmt
	$(GO) vet -tags '$(LINT_TAGS)' $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) -tags '$(LINT_TAGS)' $(PKGS)

verify-fmt:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

fix-fmt:
	gofmt -w .

# The real Kubernetes binaries of every pinned version (v1.33.13, v1.34.4):
# kube-apiserver, kube-controller-manager, kube-scheduler, kubeadm and
# kubectl, built from the separate module tools/kube-apiserver/ into
# $(KUBE_APISERVER_DIR)/<version>/ with their sha256 in SHA256SUMS (the
# target and directory keep the name kube-apiserver). Builds only what is
# missing (minutes per version on 2 cores the first time; then ~2 s).
KUBE_APISERVER_DIR ?= $(if $(XDG_CACHE_HOME),$(XDG_CACHE_HOME),$(HOME)/.cache)/hamaster/kube-apiserver
# KUBE_VERSIONS: only these pinned versions (default: every one).
KUBE_VERSIONS ?=
kube-apiserver:
	HAMASTER_KUBE_APISERVER_DIR=$(KUBE_APISERVER_DIR) ./tools/kube-apiserver/build.sh $(KUBE_VERSIONS)

# The real-apiserver tier: grow/shrink with the apiservers' endpoint
# leases, rolling-upgrade v1.33.13 → v1.34.4 under load, a refused flag,
# a killed apiserver mid-upgrade; the test bed's kubelet running etcd,
# kube-apiserver and kube-controller-manager v1.33.13 as static pods and
# bootstrapping through the real controller-manager, and kubeadm init
# v1.33.13 + upgrade apply v1.34.4 against it (these need
# kube-controller-manager, kube-scheduler and kubeadm in the cache too). A few minutes; not part of make test.
# One package at a time (-p 1), and the upgrade under load alone: its
# clients' view is what it measures, not 2 cores shared with other tests.
test-real: kube-apiserver build
	HAMASTER_REAL_APISERVER_DIR=$(KUBE_APISERVER_DIR) $(GO) test -tags realapiserver -count=1 -p 1 -timeout 30m -run '^TestRealAPIServer' -v ./workflows/ ./cmd/hamaster/ ./flavors/kubeadm/ ./testbed/cri/ ./testbed/kubelet/

# The metal lab's tier (as root; not part of make test): bin/metallab's
# hosts (network namespaces on one bridge, each with its own sshd and
# /etc/kubernetes, /var/lib and /run) proven isolated over SSH; the VIP
# with Debian's real keepalived and haproxy on them (failover within the
# VRRP bound, never two holders; -v prints the failover figures);
# bin/metallab started, used over SSH with the files it writes, stopped
# and killed, leaving nothing; the real kubeadm v1.33.13 on the lab's
# hosts (the test bed's kubelet and CRI installed as the packages): init
# of host-1, preflight and all (~30 s), and a control-plane join of host-2
# then its reset (~100 s), which need the real binaries (kube-apiserver);
# the metal provider's hosts and the VIP's keepalived + HAProxy
# (providers/metal/...: failover figures against the kubeadm doc's
# configuration); the kubeadm flavor on a kubeadm-built master
# (flavors/kubeadm: conformance, join, a join whose kubelet dies, leave,
# and an upgrade stopped after its new etcd ran on the data and failed,
# rolled back onto kubeadm's copy of that data).
# One package at a time (METAL_LAB_P=2 runs two at once, each test on a
# lab of its own; tried beside the walk's three labs and two builds, at a
# load of 20–40 on 2 cores, TestConvertToHA's requests timed out and the
# VIP went unheld: .ci/run keeps one), the longest package
# (flavors/kubeadm) first. Then the real CLI's walk
# (TestMetalKubeadmEndToEnd: add-replica ×2, the VIP holder's host and
# apiserver killed, rotate-certs, remove-replica ×2), its upgrades
# (TestMetalKubeadmUpgrade: failed upgrades rolled back, the upgrade) and
# recover on metal. The inventory's and the VIP's unit tests run in make
# test too.
# test-metal-lab and test-metal-walk are its two halves.
# METAL_SKIP: a -skip pattern for the lab packages' tests (.ci/run skips
# those the walk covers through the CLI).
METAL_SKIP ?=
METAL_LAB_P ?= 1
test-metal: test-metal-lab test-metal-walk
test-metal-lab: test-prereqs kube-apiserver build
	HAMASTER_REAL_APISERVER_DIR=$(KUBE_APISERVER_DIR) $(GO) test -tags metallab -count=1 -p $(METAL_LAB_P) -timeout 40m -v $(if $(METAL_SKIP),-skip '$(METAL_SKIP)') ./flavors/kubeadm/ ./providers/metal/... ./testbed/metal/... ./cmd/metallab/
# The real CLI's walk on the lab (TestMetalKubeadmEndToEnd), its upgrades
# (TestMetalKubeadmUpgrade) and recover (TestMetalKubeadmRecover), one
# after the other, from one test binary (metal-walk-test builds it);
# METAL_WALK_RUN picks tests (.ci/run runs the three at once, each on a
# lab of its own, from the one binary).
METAL_WALK_RUN ?= ^TestMetal
metal-walk-test:
	$(GO) test -tags metallab -c -o bin/test/metal-walk.test ./cmd/hamaster/
test-metal-walk: test-prereqs kube-apiserver build metal-walk-test
	cd cmd/hamaster && HAMASTER_REAL_APISERVER_DIR=$(KUBE_APISERVER_DIR) $(CURDIR)/bin/test/metal-walk.test -test.count=1 -test.timeout 75m -test.v -test.run '$(METAL_WALK_RUN)'

# The GCE fake's kubeadm tier (as root; not part of make test): VMs made
# from the fake's kubeadm image (kubeadm, kubectl and the test bed's
# kubelet installed, each VM its own mount namespace with its own
# /etc/kubernetes, /var/lib and /run: testbed/kubeadmhost, shared with the
# metal lab), master 0 initialised by the real kubeadm v1.33.13 over SSH
# with the static IP as its controlPlaneEndpoint, the kubeadm flavor's
# conformance suite on it, a replica the GCE provider clones from it
# joined with kubeadm join --control-plane, the static IP moved to the
# provider's load balancer, a join whose kubelet stops half-way undone
# (no member, no Node) and retried, the replicas removed again. Needs the
# real binaries (kube-apiserver). About 2.5 minutes.
test-gce-kubeadm: test-prereqs kube-apiserver
	HAMASTER_REAL_APISERVER_DIR=$(KUBE_APISERVER_DIR) $(GO) test -tags gcekubeadm -count=1 -p 1 -timeout 15m -v -run 'GCE' ./flavors/kubeadm/ ./cmd/gcefake/

# The main job on the embedded local provider with a real kube-apiserver
# (built on first use): up → add ×2 → status → kubectl through the LB →
# remove → status → down.
demo: build
	./scripts/demo.sh

# Availability benchmark: rolling-upgrade (recreate, surge) vs a naive
# in-place restart on identical 3-replica local clusters under load, with a
# cloud timing profile (PROFILE=instant|gce|aws) whose durations SCALE
# shrinks (e.g. SCALE=0.05), on the apiserver stand-in (CONTROL_PLANE=standin,
# the default: quick) or the real kube-apiserver (CONTROL_PLANE=real: the
# binaries make kube-apiserver builds, v1.33.13 → v1.34.4); prints the
# clients' table with the ratios and the overhead table, and writes
# bench-results/availability.{json,png}.
# VIP=1 adds the VIP arm (BenchmarkVIPFailover, build tag metallab): on
# the metal lab's three hosts, as root with its prerequisites
# (scripts/test-prereqs.sh: keepalived, haproxy, sshd), failover time and
# failed requests through the VIP for the holder's host killed, its
# apiserver killed and a planned handoff (failed requests and the longest
# wait for new and for kept-alive connections apart), hamaster's
# keepalived + HAProxy against kubeadm's docs/ha-considerations.md;
# ~6 minutes more, and bench-results/vip.json. BENCH selects benchmarks by name
# (make bench VIP=1 BENCH=VIP: the VIP arm alone).
PROFILE ?= instant
SCALE   ?= 1
CONTROL_PLANE ?= standin
VIP     ?=
BENCH   ?= .
BENCH_DEPS = build $(if $(filter real,$(CONTROL_PLANE)),kube-apiserver)
bench: $(BENCH_DEPS)
	HAMASTER_BENCH_PROFILE=$(PROFILE) HAMASTER_BENCH_SCALE=$(SCALE) HAMASTER_BENCH_CONTROL_PLANE=$(CONTROL_PLANE) HAMASTER_REAL_APISERVER_DIR=$(KUBE_APISERVER_DIR) $(GO) test $(if $(filter 1,$(VIP)),-tags metallab) -run '^$$' -bench '$(BENCH)' -benchtime 1x -timeout 60m ./bench/

clean:
	rm -rf $(BIN) $(DIST)
