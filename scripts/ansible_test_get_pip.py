# -*- coding: utf-8 -*-
"""Stand-in for ansible-test's get-pip bootstrap script, whose download host is not reachable here.

ansible-test runs it in a fresh virtual environment with pip options and requirements as arguments;
this installs pip from the interpreter's own ensurepip, then the requested packages from the index.
"""
import subprocess
import sys

subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade", "--default-pip"])
args = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "pip", "install"] + args)
