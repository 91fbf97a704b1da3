#!/bin/bash
# Seed fuzz/corpus/<target>/ from the fixture release (docs/test-os.md) and the
# test OS sources: run once after the fixture changes (the corpus is
# committed; `make fuzz` adds what libFuzzer finds to a scratch copy).
# Usage: fuzz/seed.sh FIXTURE_DIR   (the directory fixtures/build.sh prints)
set -euo pipefail
fx=${1:?usage: fuzz/seed.sh FIXTURE_DIR}
here=$(cd "$(dirname "$0")" && pwd)
top=$(dirname "$here")
c=$here/corpus
blobs=$fx/oci/blobs/sha256
put() { # put TARGET FILE: add FILE under its content hash
  mkdir -p "$c/$1"
  cp "$2" "$c/$1/$(sha256sum "$2" | cut -c1-16)"
}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT

put oci_index "$fx/oci/index.json"
# Every small JSON blob: manifests, indexes and configs.
for b in "$blobs"/*; do
  [ "$(stat -c %s "$b")" -lt 16384 ] || continue
  mt=$(python3 -c 'import json,sys
try: d=json.load(open(sys.argv[1]))
except Exception: sys.exit(0)
print("index" if "manifests" in d else "manifest" if "layers" in d else "config" if "rootfs" in d else "")' "$b") || true
  case $mt in
    index) put oci_index "$b" ;;
    manifest) put oci_manifest "$b" ;;
    config) put oci_config "$b" ;;
  esac
done
# The release-manifests layers (small tars) and the files in them.
for b in "$blobs"/*; do
  [ "$(stat -c %s "$b")" -lt 65536 ] || continue
  if tar -tzf "$b" 2>/dev/null | grep -q '^release-manifests/image-references'; then
    put layer_tar "$b"
    rm -rf "$tmp/x"; mkdir "$tmp/x"; tar -xzf "$b" -C "$tmp/x"
    m=$tmp/x/release-manifests
    [ -f "$m/image-references" ] && put image_references "$m/image-references"
    [ -f "$m/release-metadata" ] && put release_metadata "$m/release-metadata"
    if [ -f "$m/0000_50_installer_coreos-bootimages.yaml" ]; then
      put bootimages "$m/0000_50_installer_coreos-bootimages.yaml"
      python3 -c 'import yaml,sys
d=yaml.safe_load(open(sys.argv[1]))["data"]
open(sys.argv[2],"w").write(d.get("stream",""))' "$m/0000_50_installer_coreos-bootimages.yaml" "$tmp/stream.json"
      [ -s "$tmp/stream.json" ] && put stream_json "$tmp/stream.json"
    fi
  fi
done
# The OS's files, from the fixture's ostree repo.
commit=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["rhel_coreos"]["commit"])' "$fx/fixture.json")
for f in image.json platforms.json; do
  ostree --repo="$fx/repo" cat "$commit" "/usr/share/coreos-assembler/$f" > "$tmp/$f"
done
put image_json "$tmp/image.json"
put platforms_json "$tmp/platforms.json"
ostree --repo="$fx/repo" cat "$commit" /usr/lib/os-release > "$tmp/os-release"
put os_release "$tmp/os-release"
# Live menu templates: the whole set in one input (`=== <path>` lines).
(cd "$top/fixtures/os/config/live" && find . -type f | sort | while read -r f; do
  echo "=== ${f#./}"; cat "$f"; done) > "$tmp/templates"
put live_templates "$tmp/templates"
# cpio: a small newc archive, plain and compressed each way.
mkdir -p "$tmp/cp/etc" && echo hello > "$tmp/cp/etc/hello" && ln -s hello "$tmp/cp/etc/link"
(cd "$tmp/cp" && find . | cpio -o -H newc --quiet > "$tmp/i.cpio")
put cpio "$tmp/i.cpio"
gzip -9nc "$tmp/i.cpio" > "$tmp/i.gz" && put cpio "$tmp/i.gz"
xz -c "$tmp/i.cpio" > "$tmp/i.xz" && put cpio "$tmp/i.xz"
zstd -qc "$tmp/i.cpio" > "$tmp/i.zst" && put cpio "$tmp/i.zst"
# A plain tar with a whiteout, a symlink and a hard link, for extract.
mkdir -p "$tmp/t/a" && echo x > "$tmp/t/a/f" && ln -s f "$tmp/t/a/s" && ln "$tmp/t/a/f" "$tmp/t/a/h" && touch "$tmp/t/a/.wh.gone"
tar -C "$tmp/t" -cf "$tmp/t.tar" a && put layer_tar "$tmp/t.tar"
# IDMS / ICSP and image references.
printf '%s\n' 'apiVersion: config.openshift.io/v1' 'kind: ImageDigestMirrorSet' 'metadata: {name: m}' 'spec:' '  imageDigestMirrors:' '  - source: quay.io/openshift-release-dev/ocp-v4.0-art-dev' '    mirrors: [mirror.local:5000/art, other.local/art]' '    mirrorSourcePolicy: NeverContactSource' > "$tmp/idms"
put idms "$tmp/idms"
printf '%s\n' 'apiVersion: operator.openshift.io/v1alpha1' 'kind: ImageContentSourcePolicy' 'metadata: {name: p}' 'spec:' '  repositoryDigestMirrors:' '  - source: quay.io/a/b' '    mirrors: [m.local/a/b]' '---' 'kind: ImageDigestMirrorSet' 'spec: {imageDigestMirrors: [{source: registry.example.com:5000/a/b/c}]}' > "$tmp/icsp"
put idms "$tmp/icsp"
i=0
for r in 'quay.io/openshift-release-dev/ocp-release:4.18.0-x86_64' \
  'quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef' \
  'localhost:5000/a/b:tag@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef' \
  'oci:/tmp/layout:release' 'oci-archive:/tmp/r.tar:tag' 'docker-archive:/tmp/d.tar' 'dir:/tmp/d' \
  'docker://registry.example.com/ns/img' 'ubuntu' '[::1]:5000/x:y'; do
  printf '%s' "$r" > "$tmp/ref$i"; put imageref "$tmp/ref$i"; i=$((i+1))
done
du -sh "$c"; for d in "$c"/*; do echo "$(basename "$d") $(ls "$d" | wc -l)"; done
