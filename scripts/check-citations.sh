#!/usr/bin/env bash
# check-citations.sh: the repository is self-contained. Its code, scripts
# and docs cite only what it holds: no document outside it (the developers'
# SPEC.md, ARCHITECTURE.md, TEST-OS.md, anything under ../), and every
# relative link of README.md and docs/*.md names a file that exists.
#
#   scripts/check-citations.sh     # exit 0 when clean, 1 listing each
#
# Run by check-imports.sh (the suite's `imports` job). Plain grep and awk.
set -euo pipefail
cd "$(dirname "$0")/.."
bad=0
# Documents this repository does not hold. (`SIGNATURE_SPEC.md` is
# cosign's, cited with its repository.)
outside='(^|[^A-Z_])(SPEC\.md|SPEC §|SPEC [0-9]|ARCHITECTURE\.md|TEST-OS\.md)|\.\./shared'
if hits=$(git grep -n -E "$outside" -- . ':!scripts/check-citations.sh'); then
  echo "citations of documents outside the repository (cite docs/ instead):"
  echo "$hits" | sed 's/^/  /'
  bad=1
fi
# Relative links in the docs: [text](path) and [text](path#anchor).
for f in README.md docs/*.md; do
  dir=$(dirname "$f")
  while IFS= read -r link; do
    target=${link%%#*}
    [ -n "$target" ] || continue
    if [ ! -e "$dir/$target" ]; then
      echo "$f: link to $link: no such file ($dir/$target)"
      bad=1
    fi
  done < <(grep -oE '\]\([^)[:space:]]+\)' "$f" | sed 's/^](//; s/)$//' | grep -vE '^[a-z]+:|^#|^mailto:' || true)
done
exit $bad
