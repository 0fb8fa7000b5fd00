#!/usr/bin/env bash
# ansible-test sanity on a copy of the committed-or-staged tree laid out as ansible_collections/hy3/fleet.
# ansible-test's pip bootstrap script lives on a host that is not reachable here; a stand-in
# (scripts/ansible_test_get_pip.py) bootstraps pip from ensurepip instead.
set -euo pipefail
cd "$(dirname "$0")/.."
PIP_VERSION=$(.venv/bin/python - <<'PY'
import re, ansible_test, os
src = open(os.path.join(os.path.dirname(ansible_test.__file__), "_internal", "python_requirements.py")).read()
print(re.search(r"pip='([\d.]+)'", src).group(1))
PY
)
CACHE="$HOME/.ansible/test/cache/get_pip_${PIP_VERSION//./_}.py"
[ -f "$CACHE" ] || { mkdir -p "$(dirname "$CACHE")"; cp scripts/ansible_test_get_pip.py "$CACHE"; }
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
DEST="$WORK/ansible_collections/hy3/fleet"
mkdir -p "$DEST"
git ls-files -co --exclude-standard -z | xargs -0 -I{} cp --parents {} "$DEST"/ 2>/dev/null || true
cd "$DEST"
git init -q && git add -A && git -c user.email=ci@localhost -c user.name=ci commit -qm sanity
exec "$OLDPWD/.venv/bin/ansible-test" sanity --venv --python 3.11 "$@"
