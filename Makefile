# bootimage-gen — every target installs what it needs first (idempotent).
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: all deps build fixtures demo test lint fmt clean bench

all: build

deps:
	bash scripts/install-deps.sh

build: deps
	$(CARGO) build --release --bins

fixtures: build
	bash fixtures/build.sh

# The main job on the bundled test OS release.
demo: build
	bash scripts/demo.sh

# Benchmark at real size (not part of `make test`; tens of minutes): the
# --large test OS (BENCH_EXTRA_MB MiB of payload, default 2560), `generate all`
# per stage against the standard tools on the same disk. Prints a table and
# appends one JSON line to bench/results.jsonl.
bench: build
	fx=$$(bash fixtures/build.sh --large) && \
	$(CARGO) run --release --quiet --example bench -- "oci:$$fx/oci:release"

lint: deps
	$(CARGO) fmt --check
	$(CARGO) clippy --release --all-targets -- -D warnings

# Every test: unit, CLI/registry, privileged pipeline and boot tests.
test: deps lint
	$(CARGO) test --release -- --test-threads=2

fmt:
	$(CARGO) fmt

clean:
	$(CARGO) clean
	rm -rf .cache bootimages
