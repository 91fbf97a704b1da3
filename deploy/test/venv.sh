#!/bin/bash
# venv.sh — make (or reuse) the Python venv of the deploy checks and print
# its bin directory: kubernetes-validate (the built-in kinds, against the
# Kubernetes schemas it bundles) and jsonschema + PyYAML (validate.py, the
# Tekton kinds against Tekton's CRD schemas). From PyPI, pinned; cached
# under scripts/cache-root.sh's root as deploy-venv-<hash of this file>.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/cache-root.sh
. "$here/../../scripts/cache-root.sh"
root=$(bootimage_cache_root)
reqs=(kubernetes-validate==1.37.0 jsonschema==4.26.0 PyYAML==6.0.4)
key=$( { printf '%s\n' "${reqs[@]}"; python3 --version; } | sha256sum | cut -c1-16)
venv=$root/deploy-venv-$key
if [ -x "$venv/bin/kubernetes-validate" ] && [ -f "$venv/.complete" ]; then
  echo "$venv/bin"; exit 0
fi
rm -rf "$venv"
mkdir -p "$root"
python3 -m venv "$venv" >&2
"$venv/bin/pip" install -q --disable-pip-version-check "${reqs[@]}" >&2
touch "$venv/.complete"
for old in "$root"/deploy-venv-*; do
  [ "$old" = "$venv" ] || rm -rf "$old"
done
echo "$venv/bin"
