# -*- coding: utf-8 -*-
"""Every module's DOCUMENTATION, EXAMPLES and RETURN are YAML ansible-doc can read: a plain scalar holding ": "
breaks a whole page, which sanity and the docs build would only find minutes into CI."""
import ast
import glob
import os

import pytest
import yaml

MODULES = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "plugins", "modules", "*.py")))


def doc_blocks(path):
    with open(path) as handle:
        tree = ast.parse(handle.read())
    return {node.targets[0].id: node.value.value for node in tree.body
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id in ("DOCUMENTATION", "EXAMPLES", "RETURN")}


@pytest.mark.parametrize("path", MODULES, ids=[os.path.basename(p) for p in MODULES])
def test_module_documentation_is_yaml(path):
    blocks = doc_blocks(path)
    assert set(blocks) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}
    for text in blocks.values():
        yaml.safe_load(text)        # raises with the line and column of the fault
    assert yaml.safe_load(blocks["DOCUMENTATION"])["module"] == os.path.basename(path)[:-3]


ROOT = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..")
FRAGMENTS = sorted(glob.glob(os.path.join(ROOT, "changelogs", "fragments", "*.yml")))


@pytest.mark.parametrize("path", FRAGMENTS, ids=[os.path.basename(p) for p in FRAGMENTS])
def test_changelog_fragments_are_yaml_lists_of_entries(path):
    """ansible-lint (and the changelog build) fail on a fragment YAML cannot read - a ": " in a plain scalar."""
    with open(os.path.join(ROOT, "changelogs", "config.yaml")) as handle:
        config = yaml.safe_load(handle)
    sections = {section for section, _title in config["sections"]} | {config.get("trivial_section_name", "trivial")}
    with open(path) as handle:
        fragment = yaml.safe_load(handle)
    assert isinstance(fragment, dict) and set(fragment) <= sections, path
    assert all(isinstance(entry, str) for entries in fragment.values() for entry in entries)
    with open(path) as handle:
        long_lines = [n for n, line in enumerate(handle, 1) if len(line.rstrip("\n")) > 160]
    assert not long_lines, "%s: lines %s are over ansible-lint's 160 characters" % (path, long_lines)
