#!/usr/bin/env bash
# The README's two commands on a fresh machine of the kind it targets
# (Debian 12, root, package registries only, package lists possibly
# stale), simulated in a container so it can be repeated:
#
# - a pristine Debian 12 rootfs: mmdebstrap minbase plus make and git
#   (cached as fresh-machine/rootfs-<hash>.tar under scripts/cache-root.sh's
#   root, keyed by its inputs);
# - its package lists made stale before anything runs: every version they
#   name gets a suffix the mirror does not have, every file name points
#   nowhere and the Release files are gone, so nothing can be installed from
#   them without `apt-get update` first;
# - the repository cloned clean (HEAD, no untracked files) into it;
# - this machine's Rust toolchain (rustup's ~/.rustup, read-only, and the
#   cargo/rustc proxies), as a fresh machine of this kind has it, with a
#   CARGO_HOME of its own;
# - the host's CA bundle, as the machine's own trust store;
# - a cache root of its own (BOOTIMAGE_CACHE), and every cache step on as
#   a user gets it: target-cache.sh restore and save, the fixtures' cache;
# - then the README's commands, as root, each line of their output
#   prefixed with the seconds since the start, and a table of phase times.
#
#   scripts/fresh-machine.sh [--seeded] [--keep] [--make GOAL...]
#
# Default (`make fresh-machine`): from nothing. The cache root starts
#   empty, no download is shared with this host (apt's archives, crates),
#   and it runs `make demo` in full, then `make test TARGETS=fixture_smoke`
#   (the install, compile and fixture phases, and the smallest target),
#   then, in a new clone at the same path (`git clean -xdf`: the cache root
#   kept), `make demo` again: the warm run restores what the first saved.
#   About 80 minutes on 2 cores.
# --seeded (the suite's tests/container.rs): a machine that has built
#   before. Its cache root starts with compiled dependencies saved, by
#   target-cache.sh itself, from this host's target/release, and the clone
#   sits at this clone's path, so the fresh machine's restore finds the
#   entry of its key; coreos-installer is this host's (install-deps finds
#   it installed), apt's and crates' downloads are shared. Everything else
#   runs as on a new machine: the stale lists, the install, restore, the
#   compile of the workspace's crates, save, the fixtures, the demo.
# --keep        keep the work dir (its path is printed) for inspection.
# --make GOAL   run `make GOAL` instead (repeatable: in order); the goal
#               fresh-clone makes the clone new (git clean -xdf) instead.
#
# Runs podman --privileged (make demo builds disks with loop devices). The
# host's quirks (docs/troubleshooting.md): runc, lower rlimits.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/step.sh
. "$top/scripts/step.sh"
step_trap fresh-machine
seeded=
keep=
goals=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seeded) seeded=1; shift ;;
    --keep) keep=1; shift ;;
    --make) goals+=("$2"); shift 2 ;;
    *) echo "usage: $0 [--seeded] [--keep] [--make GOAL]..." >&2; exit 2 ;;
  esac
done
if [ ${#goals[@]} = 0 ]; then
  if [ -n "$seeded" ]; then goals=(demo); else goals=(demo "test TARGETS=fixture_smoke" fresh-clone demo); fi
fi
say() { echo "fresh-machine: $*" >&2; }
for tool in podman mmdebstrap git; do
  command -v "$tool" >/dev/null || { say "$tool is not installed (run scripts/install-deps.sh)"; exit 1; }
done
RUSTUP_HOME=${RUSTUP_HOME:-$HOME/.rustup}
HOST_CARGO=${CARGO_HOME:-$HOME/.cargo}
[ -d "$RUSTUP_HOME/toolchains" ] || { say "no rustup toolchain in $RUSTUP_HOME: this check mounts the machine's own"; exit 1; }

# shellcheck source=scripts/cache-root.sh
. "$top/scripts/cache-root.sh"
CACHE=$(bootimage_cache_root)/fresh-machine
mkdir -p "$CACHE"
# Its package lists are kept (mmdebstrap removes them by default), to be made stale.
# shellcheck source=scripts/debian-rootfs.sh
. "$top/scripts/debian-rootfs.sh"
image=$(debian_rootfs_image localhost/bootimage-gen-fresh "$CACHE" \
  --variant=minbase --include=ca-certificates,make,git --skip=cleanup/apt/lists)

work=$(mktemp -d /var/tmp/bootimage-gen-fresh.XXXXXX)
name=bootimage-gen-fresh-$$
cleanup() {
  podman rm -f "$name" >/dev/null 2>&1 || true
  if [ -n "$keep" ]; then say "kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The clone: at this clone's path inside the machine when seeded (the
# target cache's key holds the clone's path), else at /src.
inside=/src
[ -z "$seeded" ] || inside=$top
git clone -q "$top" "$work/src"
say "clean clone of $(git -C "$work/src" rev-parse --short HEAD) at $inside"
# The machine's own cache root, empty.
mkdir -p "$work/cache" "$work/cargo/bin" "$work/cargo/registry" "$work/apt-archives/partial"
# A CARGO_HOME of the fresh machine's own: rustup's proxies only.
for p in cargo rustc rustup rustdoc; do
  [ -e "$HOST_CARGO/bin/$p" ] && cp -L "$HOST_CARGO/bin/$p" "$work/cargo/bin/"
done
mounts=(-v "$work/cargo/registry:/root/.cargo/registry" -v "$work/apt-archives:/var/cache/apt/archives")
if [ -n "$seeded" ]; then
  [ -d "$top/target/release/.fingerprint" ] || { say "--seeded needs this clone's target/release (compile first)"; exit 1; }
  # The cache a machine has after an earlier build, made by the script
  # the machine runs: its save, from this clone's compiled dependencies.
  BOOTIMAGE_TARGET_CACHE=$work/cache/target bash "$top/scripts/target-cache.sh" save
  if [ -x "$HOST_CARGO/bin/coreos-installer" ]; then
    cp "$HOST_CARGO/bin/coreos-installer" "$work/cargo/bin/"
    say "coreos-installer: the one this host's install-deps built"
  fi
  mkdir -p "$CACHE/apt-archives/partial"
  mounts=(-v "$HOST_CARGO/registry:/root/.cargo/registry" -v "$CACHE/apt-archives:/var/cache/apt/archives")
fi

# Inside: make the lists stale, show it, then exactly the README's
# commands, every line stamped with the seconds since the start.
cat > "$work/run.sh" <<'EOF'
set -euo pipefail
shopt -s nullglob
lists=(/var/lib/apt/lists/*_Packages)
[ ${#lists[@]} -gt 0 ] || { echo "fresh-machine: the rootfs has no package lists" >&2; exit 1; }
# The machine trusts what this host trusts (a site proxy's CA for crates.io
# and PyPI, if any), as a machine of this kind does out of the box.
[ ! -s /run/host-ca.crt ] || cat /run/host-ca.crt > /etc/ssl/certs/ca-certificates.crt
# Likewise its apt: whether it checks Release files' Valid-Until, as this
# host's does (a snapshot mirror, whose testing suite has expired, is
# reached with the check off; scripts/mkfs-root.sh reads forky from it).
[ "${HOST_APT_CHECK_VALID_UNTIL:-true}" = true ] ||
  echo 'Acquire::Check-Valid-Until "false";' > /etc/apt/apt.conf.d/99host-valid-until
sed -i -e 's/^Version: .*/&~stale1/' -e 's|^Filename: .*|&.gone|' "${lists[@]}"
rm -f /var/lib/apt/lists/*Release /var/lib/apt/lists/*Release.gpg /var/lib/apt/lists/*InRelease
echo "fresh-machine: stale lists: qemu-utils $(apt-cache policy qemu-utils | awk '/Candidate:/ {print $2}')"
echo "fresh-machine: cache root $BOOTIMAGE_CACHE: $(find "$BOOTIMAGE_CACHE" -mindepth 1 -maxdepth 2 | wc -l) entries"
cd "$1"
shift
for goal in "$@"; do
  if [ "$goal" = fresh-clone ]; then
    # A new clone at the same path on the same machine (CI's next
    # checkout): nothing untracked left, the cache root kept.
    git config --global --add safe.directory "$PWD"
    git clean -xdfq
    echo "fresh-machine: fresh-clone: $PWD as a new clone at $SECONDS s (the cache root kept)"
    continue
  fi
  echo "fresh-machine: make $goal"
  set +o pipefail
  # shellcheck disable=SC2086  # "test TARGETS=x" is two words
  make $goal 2>&1 | while IFS= read -r l; do printf '[%5d s] %s\n' "$SECONDS" "$l"; done
  rc=${PIPESTATUS[0]}
  set -o pipefail
  echo "fresh-machine: make $goal exited $rc at $SECONDS s"
  [ "$rc" = 0 ] || exit "$rc"
done
EOF
valid_until=true
# (grep reads it all: with -q it would stop at the first match, apt-config
# would die of SIGPIPE, and pipefail would make the match a miss.)
if apt-config dump 2>/dev/null | grep -i '^Acquire::Check-Valid-Until "false"' >/dev/null; then
  valid_until=false
fi
say "podman run $image: make ${goals[*]}"
set +e
podman run --name "$name" --rm --privileged --runtime runc \
  --ulimit nofile=4096:4096 --ulimit nproc=4096:4096 --network host \
  -v "$work/src:$inside" -v "$work/run.sh:/run.sh:ro" \
  -v "$RUSTUP_HOME:/root/.rustup:ro" -v "$work/cargo/bin:/root/.cargo/bin" \
  -v "$work/cache:/var/cache/bootimage-gen" "${mounts[@]}" \
  -v /etc/ssl/certs/ca-certificates.crt:/run/host-ca.crt:ro \
  -e PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  -e RUSTUP_HOME=/root/.rustup -e CARGO_HOME=/root/.cargo -e HOME=/root \
  -e BOOTIMAGE_CACHE=/var/cache/bootimage-gen -e HOST_APT_CHECK_VALID_UNTIL="$valid_until" \
  "$image" bash /run.sh "$inside" "${goals[@]}" | tee "$work/log"
rc=${PIPESTATUS[0]}
set -e
# The phases: each step make echoes, to the next one.
echo
echo "fresh-machine: phase times (s)"
awk '
  function flush(t) { if (name != "") printf "  %-64s %6d\n", name, t - from; name = "" }
  /^fresh-machine: make .* exited / { flush($(NF - 1)); next }
  /^fresh-machine: fresh-clone/ { print "  -- a new clone at the same path --"; next }
  /^fresh-machine: make / { goal = substr($0, 21); next }
  /^\[ *[0-9]+ s\] / {
    t = $0; sub(/^\[ */, "", t); t += 0; sub(/^\[ *[0-9]+ s\] /, "")
    if ($0 ~ /^(bash |cargo |python3 )/) { flush(t); name = "make " goal ": " substr($0, 1, 40); from = t }
    # make test runs silently; its phases are the rows of the suite'"'"'s own
    # table (| install-deps | | 0:01 |, | compile tests |, | fixtures |, the
    # targets): printed as they stand, in seconds.
    else if ($0 ~ /^\| [a-z_ -]+\|[^|]*\| +[0-9]+:[0-9][0-9] \|/ && $0 !~ /^\| (target|whole run) /) {
      split($0, c, "|"); what = c[2]; gsub(/^ +| +$/, "", what)
      split(c[4], ms, ":"); printf "  %-64s %6d\n", "make " goal ": " what " (the suite'"'"'s table)", ms[1] * 60 + ms[2]
    }
  }
' "$work/log"
say "the machine's make ${goals[*]}: exit $rc"
exit "$rc"
