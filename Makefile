# hamaster — see README.md. Targets: build test lint demo bench.
GO       ?= go
BIN      ?= bin
PKGS     ?= ./...
STATICCHECK_VERSION ?= v0.8.2

.PHONY: build test lint demo bench verify-fmt fix-fmt clean

build:
	$(GO) build -o $(BIN)/hamaster ./cmd/hamaster
	$(GO) build -o $(BIN)/hamaster-node ./cmd/hamaster-node

# The test command the README names and CI runs.
test:
	$(GO) vet $(PKGS)
	$(GO) test -race -timeout 15m $(PKGS)

lint: verify-fmt
	$(GO) vet $(PKGS)
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION) $(PKGS)

verify-fmt:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

fix-fmt:
	gofmt -w .

# The main job on the embedded local provider: up → add ×2 → status →
# write/read through the LB → remove → status → down.
demo: build
	./scripts/demo.sh

# Availability benchmark: rolling-upgrade vs a naive in-place restart on
# identical 3-replica local clusters under load; prints a table with the
# ratios and writes bench-results/availability.{json,png}.
bench: build
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 20m ./bench/

clean:
	rm -rf $(BIN)
