# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private to the hy3.fleet collection: not a public API, it can change in any release without a
# deprecation period. Do not import it from other collections or your own plugins.
"""Node groups, pure: hosts that name the same ``hy3_node_group`` serve one engine across nodes.

vLLM's own multi-node launch (the ``mp`` executor: ``--nnodes``, ``--node-rank``, ``--master-addr``,
``--master-port``, ``--headless`` on the other nodes; vLLM PR #23691, docs/serving/parallelism_scaling.md)
runs one pipeline stage per node and tensor parallel inside it. The members are ranked in inventory
order: the first is the head (node rank 0: API server, master address); the others run headless.

A group is planned and rolled as one unit: one budget (the tightest GPU of the group), one plan (a
member that differs rolls the whole group, a member that faulted faults it), one report row.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress

# one reader of hostvars for the rollout and node groups: missing or None is the default
from ansible_collections.hy3.fleet.plugins.module_utils.rollout import _get

DEFAULT_MASTER_PORT = 29501          # vLLM's --master-port default (vllm/config/parallel.py)


class GroupError(ValueError):
    """A node group that cannot be planned as one engine; the message names the group and the member."""


def _is_ip(text):
    try:
        ipaddress.ip_address(str(text))
    except ValueError:
        return False
    return True


def members_of(name, hostvars, inventory_hosts):
    """The hosts naming group ``name``, in inventory order."""
    return [host for host in inventory_hosts if _get(_get(hostvars, host, {}), "hy3_node_group", "") == name]


def group_info(host, hostvars, inventory_hosts, play_hosts):
    """This host's node group: name, members (rank order), head, rank, size, address (VLLM_HOST_IP),
    master_addr and master_port; {} for a host in no group.

    Raises GroupError for a group that cannot form: one member only, a member left out of this run (a
    group plans and rolls as one unit), an address that is not an IP (vLLM binds its queues to it), or
    members that disagree on the master port.
    """
    own = _get(hostvars, host, {})
    name = _get(own, "hy3_node_group", "")
    if not name:
        return {}
    members = members_of(name, hostvars, inventory_hosts)
    if len(members) < 2:
        raise GroupError("node group %s has one member (%s): a group is at least two hosts; drop hy3_node_group "
                         "to serve it alone" % (name, host))
    missing = [m for m in members if m not in play_hosts]
    if missing:
        raise GroupError("node group %s: member %s is not in this run (--limit or the hosts pattern); a group is "
                         "planned and rolled as one unit, include all of %s" % (name, ", ".join(missing), ", ".join(members)))
    addresses = {}
    for member in members:
        mvars = _get(hostvars, member, {})
        address = _get(mvars, "hy3_node_address") or _get(mvars, "ansible_host") or member
        if not _is_ip(address):
            raise GroupError("node group %s: member %s has address %r, not an IP address; set hy3_node_address to its "
                             "IP on the network the group's nodes share (vLLM binds VLLM_HOST_IP)" % (name, member, address))
        addresses[member] = str(address)
    ports = {int(_get(_get(hostvars, m, {}), "hy3_node_group_port", DEFAULT_MASTER_PORT)) for m in members}
    if len(ports) > 1:
        raise GroupError("node group %s: members set different hy3_node_group_port values (%s); set it once for the "
                         "group" % (name, ", ".join(str(p) for p in sorted(ports))))
    return {
        "name": name,
        "members": members,
        "head": members[0],
        "rank": members.index(host),
        "size": len(members),
        "address": addresses[host],
        "master_addr": addresses[members[0]],
        "master_port": ports.pop(),
    }


def _gpu_summary(gpus):
    devices = _get(gpus, "devices", [])
    return "%d x %s, driver %s" % (len(devices), _get(devices[0], "name", "?") if devices else "no GPU",
                                   _get(gpus, "driver_version", "?"))


def group_gpus(info, hostvars):
    """Every GPU of the group, in rank order (the budget's tightest GPU is then the group's).

    Raises GroupError naming the member that has no GPU facts (it faulted or is unreachable) or whose GPUs
    disagree with the head's: a different count, model or driver cannot run one engine's stages alike.
    """
    head_gpus = None
    devices = []
    for member in info["members"]:
        gpus = _get(_get(_get(hostvars, member, {}), "ansible_facts", {}), "hy3_gpus")
        if not gpus or not _get(gpus, "devices"):
            raise GroupError("node group %s: member %s has no GPU facts (it faulted or is unreachable, see its error); "
                             "the group is not planned" % (info["name"], member))
        shape = (len(gpus["devices"]), _get(gpus["devices"][0], "name"), _get(gpus, "driver_version"))
        if head_gpus is None:
            head_gpus = (shape, gpus)
        elif shape != head_gpus[0]:
            raise GroupError("node group %s: member %s has %s, the head %s has %s; every member of a group needs the "
                             "same GPUs and driver" % (info["name"], member, _gpu_summary(gpus), info["head"],
                                                       _gpu_summary(head_gpus[1])))
        devices.extend(gpus["devices"])
    return devices


def gpu_problem(info, hostvars):
    """group_gpus's complaint as a sentence, or None when the members can form one engine."""
    try:
        group_gpus(info, hostvars)
    except GroupError as error:
        return str(error)
    return None


def weights_signature(budget):
    """What a member's checkpoint holds, per tier: status, shard count and bytes (members must agree)."""
    return [(_get(d, "quantization"), _get(d, "status"), _get(d, "files"), _get(d, "measured_bytes"))
            for d in _get(budget, "weight_dirs", [])]


def group_plan(info, hostvars):
    """The group's plan, the same for every member: faulted when a member faulted, has no plan or disagrees
    on the weights; cannot_hold when the budget says so; roll when any member would roll; else steady.

    Each member's own plan (hy3_plan) and budget (hy3_budget) are read from hostvars.
    """
    name, head = info["name"], info["head"]
    plans = {m: _get(_get(hostvars, m, {}), "hy3_plan") for m in info["members"]}
    unplanned = [m for m, plan in plans.items() if not plan]
    if unplanned:
        return _group_fault(name, "member_unplanned", "member %s was not planned (unreachable, or failed before its "
                            "plan)" % ", ".join(unplanned))
    faulted = [m for m in info["members"] if plans[m].get("action") == "faulted"]
    if faulted:
        return _group_fault(name, "member_faulted", "; ".join(_unique(
            _fault_cause(name, m, plans[m].get("sentence") or "") for m in faulted)))
    head_weights = weights_signature(_get(_get(hostvars, head, {}), "hy3_budget", {}))
    for member in info["members"][1:]:
        if weights_signature(_get(_get(hostvars, member, {}), "hy3_budget", {})) != head_weights:
            return _group_fault(name, "weights_differ", "member %s holds other weights than the head %s (tiers, shards "
                                "or sizes differ: %s against %s); every member loads its stages from its own copy, "
                                "which must be the same checkpoint" % (
                                    member, head, _describe_weights(hostvars, member), _describe_weights(hostvars, head)))
    if plans[head].get("action") == "cannot_hold":
        return dict(plans[head], group=name)
    rolling = [m for m in info["members"] if plans[m].get("action") == "roll"]
    if not rolling:
        return {"action": "steady", "reasons": [], "group": name,
                "sentence": "node group %s (%s) runs the config it would get, and serves" % (name, ", ".join(info["members"]))}
    reasons = ["%s:%s" % (m, reason) for m in rolling for reason in plans[m].get("reasons", [])]
    return {"action": "roll", "reasons": reasons, "group": name,
            "sentence": "to roll: node group %s as one unit (%s)" % (
                name, "; ".join("%s: %s" % (m, plans[m].get("sentence", "")[len("to roll: "):]) for m in rolling))}


def _fault_cause(name, member, sentence):
    """A member's fault as the group's sentence says it: a complaint about the group (every member raises the
    same one) once and as it is, any other cause after the member's name."""
    cause = sentence[len(member) + 2:] if sentence.startswith(member + ": ") else sentence
    prefix = "node group %s: " % name
    return cause[len(prefix):] if cause.startswith(prefix) else "member %s faulted: %s" % (member, cause)


def _unique(items):
    seen = []
    for item in items:
        if item not in seen:
            seen.append(item)
    return seen


def _describe_weights(hostvars, member):
    return ", ".join("%s %s %s shards %s B" % sig for sig in weights_signature(
        _get(_get(hostvars, member, {}), "hy3_budget", {}))) or "none read"


def _group_fault(name, code, why):
    return {"action": "faulted", "reasons": [code], "group": name,
            "sentence": "node group %s: %s; no member is touched" % (name, why)}


def roll_waves(hosts, hostvars):
    """serial for the play that rolls groups: one group per wave, its size, groups in the order their first
    member appears in hosts (the roll play's hosts); [1] when there is none."""
    sizes, seen = [], set()
    for host in hosts:
        info = _get(_get(hostvars, host, {}), "hy3_node_group_info", {})
        if info and info["name"] not in seen:
            seen.add(info["name"])
            sizes.append(len(info["members"]))
    return sizes or [1]


def wave_problem(info, batch):
    """A sentence when this wave does not hold the whole group (its members are not next to each other in
    the inventory), else None."""
    outside = [m for m in info["members"] if m not in batch]
    if not outside:
        return None
    return ("node group %s: this wave (%s) does not hold member %s; list a group's members next to each other in the "
            "inventory so each wave holds one whole group. Nothing was changed" % (
                info["name"], ", ".join(batch), ", ".join(outside)))


def member_failures(info, hostvars, batch, key="__hy3_roll_member_failure"):
    """A sentence naming each member of the group that failed its part of this step (hostvars[member][key], a
    message) or dropped out of the play (unreachable: not in batch), else None; every member then fails with it."""
    problems = []
    for member in info["members"]:
        if member not in batch:
            problems.append("member %s is unreachable or failed outside the roll" % member)
            continue
        failure = _get(_get(hostvars, member, {}), key, "")
        if failure:
            problems.append("member %s failed: %s" % (member, failure))
    if not problems:
        return None
    return "node group %s: %s" % (info["name"], "; ".join(problems))
