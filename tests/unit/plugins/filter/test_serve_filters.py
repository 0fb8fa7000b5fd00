# -*- coding: utf-8 -*-
"""desired_files: the managed files paired with their rendered texts, each with the SHA-1 the template module reports."""
import hashlib

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.hy3.fleet.plugins.filter.serve_files import FilterModule

FILES = [{"name": "config", "src": "vllm.yaml.j2", "path": "/opt/hy3/etc/vllm.yaml"},
         {"name": "driver", "path": "/opt/hy3/state/driver_version"},
         {"name": "script", "src": "engine.sh.j2", "path": "/opt/hy3/bin/engine.sh"}]


def sha1(text):
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def test_each_file_gets_its_text_in_order_and_the_others_the_content():
    desired = FilterModule().filters()["desired_files"](FILES, ["port: 8000\n", "#!/bin/sh\n# 你好\n"], "550.54\n")
    assert desired == [{"name": "config", "path": "/opt/hy3/etc/vllm.yaml", "checksum": sha1("port: 8000\n")},
                       {"name": "driver", "path": "/opt/hy3/state/driver_version", "checksum": sha1("550.54\n")},
                       {"name": "script", "path": "/opt/hy3/bin/engine.sh", "checksum": sha1("#!/bin/sh\n# 你好\n")}]


@pytest.mark.parametrize("rendered", [[], ["a"], ["a", "b", "c"]])
def test_a_text_missing_or_left_over_is_an_error(rendered):
    with pytest.raises(AnsibleFilterError, match="2 templated files"):
        FilterModule().filters()["desired_files"](FILES, rendered, "")
