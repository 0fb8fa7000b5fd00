# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private to the hy3.fleet collection: not a public API, it can change in any release without a
# deprecation period. Do not import it from other collections or your own plugins.
"""Is the engine process still the one we are waiting for?

The wait for a starting engine must end as soon as the engine is gone, not after the timeout.
In pid mode that is the PID file's process; in systemd mode it is the unit, read with
`systemctl show`: with Restart=always a crashed engine does not stay "failed" but goes to
SubState=auto-restart (then a new MainPID), so every one of those counts as "gone".
Property meanings: https://www.freedesktop.org/software/systemd/man/latest/org.freedesktop.systemd1.html
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import re

SERVICE_PROPERTIES = ("ActiveState", "SubState", "MainPID", "NRestarts", "Result")

# ActiveState values in which the unit is (still) bringing the engine up or runs it
STARTING_OR_RUNNING = ("active", "activating", "reloading")


def process_state(pid, proc="/proc"):
    """The state letter of /proc/PID/stat (R, S, D, Z...), or None where it cannot be read.

    The letter follows the last ")": the command name in parentheses may itself hold spaces or ")"."""
    try:
        with open(os.path.join(proc, str(pid), "stat")) as handle:
            return handle.read().rpartition(")")[2].split()[0]
    except (IOError, OSError, IndexError):
        return None


def live_pid(pid_file, proc="/proc"):
    """The PID in pid_file when it names a running process, else 0.

    A zombie (exited, its exit not yet collected) is not running: the engine's parent exits at once, so
    it is init's to reap, and an init that reaps only every few seconds (containers' init processes)
    leaves kill(pid, 0) succeeding for a process that is long dead."""
    try:
        with open(pid_file) as handle:
            pid = int(handle.read().strip())
        os.kill(pid, 0)
    except (IOError, OSError, ValueError):
        return 0
    return 0 if process_state(pid, proc) == "Z" else pid


def pid_alive(pid_file):
    """True when the PID in pid_file names a running process."""
    return live_pid(pid_file) > 0


def systemctl_show_args(systemctl, unit, properties=SERVICE_PROPERTIES):
    """argv of the `systemctl show` call that parse_show() reads."""
    args = [systemctl, "show", unit]
    for prop in properties:
        args += ["--property", prop]
    return args


def parse_show(text, properties=SERVICE_PROPERTIES):
    """`systemctl show` output (KEY=VALUE lines) as a dict of properties; MainPID and NRestarts as ints."""
    state = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key in properties:
            state[key] = value.strip()
    for key in ("MainPID", "NRestarts"):
        try:
            state[key] = int(state.get(key) or 0)
        except ValueError:
            state[key] = 0
    return state


def service_gone(first, now):
    """Reason (a sentence) why the engine the wait started with is gone, or None while it lives.

    first: the state at the start of the wait; now: the state at this poll.
    """
    if now.get("ActiveState") not in STARTING_OR_RUNNING:
        return "the unit is %s (%s, result %s)" % (now.get("ActiveState"), now.get("SubState"), now.get("Result"))
    if now.get("SubState") == "auto-restart":
        return "the engine exited and systemd is about to restart it (result %s)" % now.get("Result")
    if now.get("NRestarts", 0) > first.get("NRestarts", 0):
        return "the engine exited and systemd restarted it (%d restarts)" % now["NRestarts"]
    if first.get("MainPID") and now.get("MainPID") and now["MainPID"] != first["MainPID"]:
        return "the engine's main process changed (%d -> %d)" % (first["MainPID"], now["MainPID"])
    return None


# The host's state in one read, for the rollout's plan (plugins/modules/engine_status.py).

UNIT_PROPERTIES = SERVICE_PROPERTIES + ("LoadState", "UnitFileState")
# systemctl is-system-running: a deploy can go on in these (degraded: see failed_units)
SYSTEM_USABLE = ("running", "degraded", "starting")


def failed_unit_names(text):
    """Unit names from `systemctl list-units --state=failed --no-legend --plain --full` (a leading marker is dropped)."""
    return re.findall(r"(?m)^\W*(\S+)", text or "")


def listener_pids(ss_output):
    """PIDs of the processes `ss -Htlnp` shows on a port, in order, once each."""
    seen = []
    for pid in re.findall(r"pid=(\d+)", ss_output or ""):
        if int(pid) not in seen:
            seen.append(int(pid))
    return seen


def port_owners(ps_output, mode, service, engine_pid):
    """`ps -o pid=,unit=,comm=` (systemd) or `ps -o pid=,pgid=,comm=` (pid mode) lines -> listeners.

    A listener is ours when it runs in our unit (systemd) or in the engine's process group (pid mode):
    the API server's workers are children of the PID systemd or the PID file names.
    """
    ours = "%s.service" % service if mode == "systemd" else str(engine_pid or 0)
    listeners = []
    for line in (ps_output or "").splitlines():
        fields = line.split(None, 2)
        if len(fields) < 2:
            continue
        owner = fields[1]
        listeners.append({"pid": int(fields[0]), "owner": owner, "command": fields[2].strip() if len(fields) > 2 else "",
                          "ours": owner == ours})
    return listeners


def stranger(listener):
    """How the preflight names a process on the engine port that is not ours."""
    return ("%(pid)d %(owner)s %(command)s" % listener).strip()
