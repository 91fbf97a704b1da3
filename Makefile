# bootimage-gen — every target installs what it needs first (idempotent).
CARGO ?= cargo
export CARGO_TERM_COLOR ?= never

.PHONY: all deps build fixtures demo test test-fast fresh-machine lint fmt clean bench bench-deploy bench-mkfs bench-vsphere bench-registry image install fuzz chaos

all: build

deps:
	bash scripts/install-deps.sh

# Compiled dependencies come from, and go to, a cache outside the clone
# keyed by Cargo.lock and the toolchain (scripts/target-cache.sh): every
# target that compiles restores first and saves after. A missing, empty or
# foreign cache means a cold compile, said in one line; a step that fails
# says which and why.
RESTORE = bash scripts/target-cache.sh restore
SAVE = bash scripts/target-cache.sh save

build: deps
	$(RESTORE)
	$(CARGO) build --release --workspace --bins
	$(SAVE)

fixtures: build
	bash fixtures/build.sh

# The main job on the bundled test OS release.
demo: build
	bash scripts/demo.sh

# Benchmark at real size (not part of `make test`; tens of minutes): the
# --large test OS (BENCH_EXTRA_MB MiB of payload, default 2560), `generate all`
# per stage against the standard tools on the same disk, then the deploy
# before/after, the base disk's mkfs before/after (issue 45) and the
# vSphere upload against curl. Prints tables and
# appends one JSON line to bench/results.jsonl. BENCH_PLATFORMS narrows the
# run (e.g. "metal live": about 15 GB of disk instead of about 30).
BENCH_PLATFORMS ?= all
bench: build
	fx=$$(bash fixtures/build.sh --large) && \
	$(CARGO) run --release --quiet --example bench -- "oci:$$fx/oci:release" --platforms "$(BENCH_PLATFORMS)" && \
	if grep -q release_faithful "$$fx/fixture.json"; then \
	  $(CARGO) run --release --quiet --example bench -- "oci:$$fx/oci:release-faithful" --compare-deploy; fi && \
	$(CARGO) run --release --quiet --example bench -- "oci:$$fx/oci:release" --compare-mkfs
	$(MAKE) bench-vsphere
	$(MAKE) bench-registry

# Issue 28's before/after alone: import + deploy of the large faithful OS by
# this host's ostree, then by the OS's own tools (root: the faithful OS).
bench-deploy: build
	fx=$$(bash fixtures/build.sh --large) && \
	$(CARGO) run --release --quiet --example bench -- "oci:$$fx/oci:release-faithful" --compare-deploy

# Issue 45's before/after alone: the base disk written by the kernel (no
# mkfs tools) against made by mkfs from the stage, on the large test OS.
bench-mkfs: build
	fx=$$(bash fixtures/build.sh --large) && \
	$(CARGO) run --release --quiet --example bench -- "oci:$$fx/oci:release" --compare-mkfs

# vSphere upload throughput against curl -T of the same VMDK to the same
# simulator (tests/system/vsphere.rs, VSPHERE_BENCH_MIB MiB, default 1024).
bench-vsphere: deps
	$(RESTORE)
	$(CARGO) test --release --features privileged --test system -- --ignored --exact vsphere::bench_upload_vs_curl --nocapture

# Push throughput against skopeo copy of the same image to the same
# registry (tests/system/registry.rs, docker-registry with TLS and htpasswd).
bench-registry: deps
	$(RESTORE)
	$(CARGO) test --release --features privileged --test system -- --ignored --exact registry::bench_push_vs_skopeo_copy --nocapture

# The tool's container image (containerfiles/): the binary just built and
# every tool it runs, on a Debian 12 base made by mmdebstrap (no container
# registry needed). Cached by a hash of its inputs; prints the image's name
# and size. RELEASE=1 compiles inside the image's build stage instead.
image: deps
ifeq ($(RELEASE),)
	$(CARGO) build --release --bin bootimage-gen
	bash containerfiles/build.sh
else
	bash containerfiles/build.sh --release
endif

# Binary, man pages and shell completions under $(DESTDIR)$(PREFIX).
PREFIX ?= /usr/local
install: build
	install -D -m 0755 target/release/bootimage-gen $(DESTDIR)$(PREFIX)/bin/bootimage-gen
	target/release/bootimage-gen man --dir $(DESTDIR)$(PREFIX)/share/man/man1
	install -d $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
	  $(DESTDIR)$(PREFIX)/share/zsh/site-functions $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	target/release/bootimage-gen completions bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/bootimage-gen
	target/release/bootimage-gen completions zsh > $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_bootimage-gen
	target/release/bootimage-gen completions fish > $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/bootimage-gen.fish

lint: deps
	$(RESTORE)
	$(CARGO) fmt --check
	$(CARGO) clippy --release --workspace --all-targets --features boot -- -D warnings

# Every test tier: unit and fast (`cargo test` alone runs these, no root),
# privileged pipeline and registry tests, boot tests (Cargo.toml [features]),
# and the lint: scripts/suite.py compiles every target once, then runs the
# targets side by side on the cores (SUITE_JOBS, default all) and ends with
# a table of each target's wall time. A target is a unit-test binary or a
# module of the test binaries (tests/fast, tests/system), run as its own
# process. `make test TARGETS="generate lib"` runs only those.
test:
	@start=$$(date +%s); \
	bash scripts/install-deps.sh || { echo "make test: the install step failed (its message is above)" >&2; exit 1; }; \
	$(RESTORE) || { echo "make test: restoring the compiled dependencies failed (its message is above)" >&2; exit 1; }; \
	python3 scripts/suite.py --deps-secs $$(( $$(date +%s) - start )) $(TARGETS); rc=$$?; \
	$(SAVE) || { echo "make test: saving the compiled dependencies failed (its message is above)" >&2; [ $$rc != 0 ] || rc=1; }; \
	exit $$rc

# The README's two commands on a machine with nothing on it, in a
# container (scripts/fresh-machine.sh): a pristine Debian 12 rootfs with
# stale package lists, an empty cache root, every cache step on; `make
# demo`, then `make test` through its install, compile and fixture phases,
# then `make demo` again from the cache the first run saved. Prints each
# phase's time. About 80 minutes on 2 cores: run it before a change to the
# set-up lands (the suite runs the seeded variant, tests/system/container.rs).
fresh-machine: deps
	bash scripts/fresh-machine.sh

# The fast tier only: no root, no loop device, no VM, no server (the other
# tiers' tests are listed as ignored, naming their feature).
test-fast: deps
	$(RESTORE)
	$(CARGO) test --release --workspace -- --test-threads=2
	$(SAVE)

# Coverage-guided fuzzing of every parser of untrusted bytes
# (docs/fuzzing.md; `make test` runs the short smoke run, tests/fast/fuzz_smoke.rs).
# FUZZ_SECONDS per target, FUZZ_JOBS targets side by side, at nice 19.
FUZZ_SECONDS ?= 300
FUZZ_JOBS ?= 1
fuzz: deps
	nice -n 19 bash fuzz/run.sh -j $(FUZZ_JOBS) $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The chaos tier at full size (docs/testing.md; `make test` runs
# CHAOS_RUNS=4): 50 SIGKILLs at random moments each followed by a normal
# run (one in ten booted: the boot tier), 50 SIGINT/SIGTERMs, ENOSPC on a
# small ext4, gc. Prints its figures and seed (CHAOS_SEED replays one).
# About 20 minutes on 2 cores.
CHAOS_RUNS ?= 50
chaos: deps
	$(RESTORE)
	CHAOS_RUNS=$(CHAOS_RUNS) $(CARGO) test --release --features boot --test system -- chaos:: --test-threads=2 --nocapture

fmt:
	$(CARGO) fmt

clean:
	$(CARGO) clean
	rm -rf fuzz/target fuzz/artifacts
	rm -rf .cache bootimages
