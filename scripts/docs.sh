#!/usr/bin/env bash
# Build the collection's documentation site (every module, role and its argument spec) with
# antsibull-docs and Sphinx, warnings as errors, into docs/build/build/html (open index.html).
# Tools live in their own virtualenv, .venv-docs. Offline: the two labels of the Ansible docs that
# the generated pages link to come from a small local inventory instead of docs.ansible.com.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/tool-venv.sh .venv-docs \
  "antsibull-docs>=2.16,<3" "ansible-core~=2.19.0" ansible-pygments sphinx "sphinx-ansible-theme>=0.9.0"
export PATH="$PWD/.venv-docs/bin:$PATH"
# The checkout as hy3.fleet (bootstrap.sh makes .collections); another path may be given.
export ANSIBLE_COLLECTIONS_PATH=${ANSIBLE_COLLECTIONS_PATH:-$PWD/.collections}
[ -e .collections/ansible_collections/hy3/fleet ] \
  || { mkdir -p .collections/ansible_collections/hy3 && ln -sfn ../../.. .collections/ansible_collections/hy3/fleet; }
SITE=docs/build
rm -rf "$SITE" && mkdir -p "$SITE"
antsibull-docs sphinx-init --use-current --fail-on-error --dest-dir "$SITE" \
  --project hy3.fleet --copyright "hy3.fleet contributors" --title "hy3.fleet documentation" \
  --html-short-title hy3.fleet hy3.fleet >/dev/null
cat >> "$SITE/conf.py" <<'PY'

# Offline build: resolve the Ansible docs labels from the local inventory written by docs.sh.
intersphinx_mapping = {
    'ansible_devel': ('https://docs.ansible.com/projects/ansible/devel/', '../ansible_devel.inv'),
}
PY
python - "$SITE/ansible_devel.inv" <<'PY'
"""A Sphinx v2 inventory of the Ansible docs labels that antsibull-docs pages reference."""
import sys
import zlib

LABELS = {
    "common_return_values": ("reference_appendices/common_return_values.html#common-return-values", "Return Values"),
    "ansible_configuration_settings": ("reference_appendices/config.html#ansible-configuration-settings",
                                       "Ansible Configuration Settings"),
    # modules with an action plugin (report_files, engine_calibration) and a seealso to the copy module
    "action_plugins": ("plugins/action.html#action-plugins", "Action plugins"),
    "ansible_collections.ansible.builtin.copy_module": ("collections/ansible/builtin/copy_module.html",
                                                        "ansible.builtin.copy module"),
}
header = b"# Sphinx inventory version 2\n# Project: Ansible\n# Version: devel\n" \
         b"# The remainder of this file is compressed using zlib.\n"
body = "".join("%s std:label -1 %s %s\n" % (name, uri, title) for name, (uri, title) in LABELS.items())
with open(sys.argv[1], "wb") as handle:
    handle.write(header + zlib.compress(body.encode("utf-8")))
PY
(cd "$SITE" && ./build.sh)
echo "docs: open $SITE/build/html/index.html"
