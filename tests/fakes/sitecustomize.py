# -*- coding: utf-8 -*-
"""On PYTHONPATH in tests only: points pynvml at the fake library named by HY3_FAKE_NVML_PROFILE."""
import os

if os.environ.get("HY3_FAKE_NVML_PROFILE"):
    try:
        import fake_nvml
    except ImportError:  # no pynvml in this interpreter: the module falls back to nvidia-smi
        fake_nvml = None
    if fake_nvml is not None:
        fake_nvml.install_from_env()
