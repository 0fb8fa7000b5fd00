#!/usr/bin/env bash
# Execution environment check, no container runtime needed: build the collection tarball, let
# ansible-builder (own virtualenv .venv-ee) write the build context of an EE that installs it,
# and check (1) the context: Containerfile, the galaxy stage installing hy3.fleet, the tarball;
# (2) what ansible-builder's introspection collects from the installed collection through
# meta/execution-environment.yml: every line of requirements.txt and bindep.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/tool-venv.sh .venv-ee "ansible-builder>=3.1,<4"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "ee-check: $*" >&2; exit 1; }

.venv/bin/ansible-galaxy collection build --force --output-path "$WORK/ee/collections" . >/dev/null
TARBALL=$(basename "$WORK"/ee/collections/hy3-fleet-*.tar.gz)
cat > "$WORK/ee/requirements.yml" <<YML
---
collections:
  - name: collections/$TARBALL
    type: file
YML
cat > "$WORK/ee/execution-environment.yml" <<YML
---
version: 3
images:
  base_image:
    name: quay.io/fedora/fedora:42
dependencies:
  ansible_core:
    package_pip: ansible-core>=2.18,<2.20
  ansible_runner:
    package_pip: ansible-runner
  galaxy: requirements.yml
additional_build_files:
  - src: collections
    dest: collections
YML
.venv-ee/bin/ansible-builder create --file "$WORK/ee/execution-environment.yml" \
  --context "$WORK/context" --output-filename Containerfile -v 1 >/dev/null
CONTEXT=$WORK/context
[ -f "$CONTEXT/Containerfile" ] || fail "no Containerfile in the build context"
grep -q "ansible-galaxy collection install" "$CONTEXT/Containerfile" || fail "Containerfile installs no collection"
grep -q "introspect" "$CONTEXT/Containerfile" || fail "Containerfile runs no dependency introspection"
grep -q "collections/$TARBALL" "$CONTEXT/_build/requirements.yml" || fail "galaxy requirements do not name $TARBALL"
[ -f "$CONTEXT/_build/collections/$TARBALL" ] || fail "$TARBALL is not in the build context"

# What the EE build's introspection step will collect from hy3.fleet (the same code, run here).
.venv/bin/ansible-galaxy collection install --force -p "$WORK/installed" "$WORK/ee/collections/$TARBALL" >/dev/null
.venv-ee/bin/ansible-builder introspect \
  --write-pip "$WORK/pip.txt" --write-bindep "$WORK/bindep.txt" "$WORK/installed" >/dev/null
# ansible-builder drops what every EE base already has (PyYAML among them): expect the rest.
SKIP=$(.venv-ee/bin/python -c 'from ansible_builder._target_scripts.introspect import EXCLUDE_REQUIREMENTS as E; print(" ".join(E))')
while IFS= read -r line; do
  name=$(printf '%s' "${line%%[<>=!~ ]*}" | tr '[:upper:]' '[:lower:]')
  case " $SKIP " in *" $name "*) continue ;; esac
  grep -qixF "$line  # from collection hy3.fleet" "$WORK/pip.txt" \
    || fail "introspection lost Python requirement '$line' (got: $(cat "$WORK/pip.txt"))"
done < <(grep -v '^\s*#' requirements.txt | grep .)
while IFS= read -r line; do
  grep -qF "$line" "$WORK/bindep.txt" || fail "introspection lost system requirement '$line'"
done < <(grep -v '^\s*#' bindep.txt | grep .)
echo "ee-check: build context and introspection carry hy3.fleet's requirements.txt and bindep.txt"
