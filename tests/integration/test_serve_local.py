# -*- coding: utf-8 -*-
"""deploy_hy3.yml on this machine in pid mode with the stand-in engine (tests/fakes/stub_engine): the
serve role's preflight, file modes, rollback and the report's exposure warning, in seconds.

The systemd side (restarts, hardening, the unit's wait) needs real hosts: tests/e2e/test_fleet_e2e.py.
"""
import json
import os
import re
import socket
import stat
import subprocess

import pytest
import sample_checkpoints
import yaml
from ansible_cli import ROOT, run

STUB = os.path.join(ROOT, "tests", "fakes", "stub_engine")
# the stand-in engine on PYTHONPATH; the KV cache size the budget needs for a CPU engine
ENGINE_ENV = {"PYTHONPATH": STUB, "VLLM_CPU_KVCACHE_SPACE": "1"}
BROKEN_ENV = dict(ENGINE_ENV, PYTHONHOME="/nonexistent")          # python itself cannot start


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def weights(tmp_path_factory):
    return sample_checkpoints.write(tmp_path_factory.mktemp("weights") / "hy3-fp8", "fp8")


@pytest.fixture()
def host(tmp_path, weights):
    root = tmp_path / "engine"
    gpus = tmp_path / "gpus.json"                                   # one idle H200
    gpus.write_text(json.dumps({"gpus": [{"name": "NVIDIA H200", "total_gib": 140, "used_gib": 1}]}))
    state = {"root": root, "tmp": tmp_path, "vars": {
        "ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        "hy3_serve_mode": "pid", "hy3_serve_root": str(root), "hy3_facts_dir": str(tmp_path / "facts.d"),
        "hy3_serve_user": "root", "hy3_serve_group": "root",
        "hy3_serve_python": "{{ ansible_playbook_python }}", "hy3_serve_port": free_port(),
        "hy3_serve_environment": ENGINE_ENV,
        "hy3_environment": {"PYTHONPATH": os.path.join(ROOT, "tests", "fakes"),
                            "HY3_FAKE_NVML_PROFILE": str(gpus)},
        "hy3_tiers": [{"name": "fp8", "weights_dir": weights}],
        "hy3_max_model_len": 4096, "hy3_max_num_seqs": 4, "hy3_verify_timeout": 60,
    }}
    yield state
    run("ansible", "all", "-i", inventory(state), "-m", "ansible.builtin.command",
        "-a", "%s/bin/engine.sh stop" % root)


def inventory(host, **overrides):
    path = host["tmp"] / "inventory.yml"
    path.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": {"node": dict(host["vars"], **overrides)}}}))
    return str(path)


def deploy(host, *extra, **overrides):
    return run("ansible-playbook", "playbooks/deploy_hy3.yml", "-i", inventory(host, **overrides),
               "-e", "hy3_report_dir=%s" % (host["tmp"] / "report"), *extra)


def mode(path):
    return stat.S_IMODE(os.stat(str(path)).st_mode)


def failure(output):
    return " ".join(re.findall(r'"msg": "([^"]*deploy failed[^"]*)"', output))


def test_deploy_writes_private_files_and_warns_about_an_open_port(host):
    proc = deploy(host)
    assert proc.returncode == 0, proc.stdout[-4000:]
    root = host["root"]
    assert mode(root / "etc" / "vllm.yaml") == 0o640 and mode(root / "etc" / "engine.env") == 0o640
    assert mode(root / "log" / "engine.log") == 0o640          # umask 027 in the control script
    rows = json.loads((host["tmp"] / "report" / "fleet_budget.json").read_text())
    assert rows[0]["exposure"] == "open"
    assert "node: WARNING: listens on 0.0.0.0:%d without an API key" % host["vars"]["hy3_serve_port"] in proc.stdout


def test_loopback_or_api_key_is_not_warned_about(host):
    proc = deploy(host, "--check", hy3_serve_host="127.0.0.1")
    assert proc.returncode == 0, proc.stdout[-4000:]
    rows = json.loads((host["tmp"] / "report" / "fleet_budget.json").read_text())
    assert rows[0]["exposure"] == "loopback" and "WARNING: listens" not in proc.stdout


def test_port_taken_by_another_process_fails_before_any_change(host):
    with socket.socket() as other:
        other.bind(("127.0.0.1", host["vars"]["hy3_serve_port"]))
        other.listen(1)
        proc = deploy(host)
    assert proc.returncode != 0
    assert re.search(r"node: port %d is taken by another process \(\s*\d+\s+\d+\s+python" % host["vars"]["hy3_serve_port"],
                     proc.stdout), proc.stdout[-4000:]
    assert not (host["root"] / "etc").exists()                 # nothing half-configured


def test_a_failed_change_of_only_the_environment_restores_it_and_serves_again(host):
    assert deploy(host).returncode == 0
    env_before = (host["root"] / "etc" / "engine.env").read_text()
    proc = deploy(host, hy3_serve_environment=BROKEN_ENV)
    assert proc.returncode != 0
    msg = failure(proc.stdout)
    assert "the engine process exited" in msg and "No module named 'encodings'" in msg
    assert "Rollback (restored_serving): restored %s/etc/engine.env;" % host["root"] in msg
    assert (host["root"] / "etc" / "engine.env").read_text() == env_before
    proc = run("ansible", "all", "-i", inventory(host), "-m", "ansible.builtin.uri",
               "-a", "url=http://127.0.0.1:%d/health" % host["vars"]["hy3_serve_port"])
    assert proc.returncode == 0, proc.stdout


def test_a_failed_first_deploy_stops_the_engine(host):
    proc = deploy(host, hy3_serve_environment=BROKEN_ENV)
    assert proc.returncode != 0
    assert "Rollback (stopped): no earlier version of the changed files to restore; the engine, not running " \
           "before this deploy, was stopped" in failure(proc.stdout)
    assert not (host["root"] / "run" / "engine.pid").exists()


# --- the rollout: steady state, drain, waves (issue: plan the whole fleet at once, roll in waves) ---

STREAM_CLIENT = """import json, sys, urllib.request
port, chunks, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
request = urllib.request.Request("http://127.0.0.1:%d/v1/chat/completions" % port, method="POST",
    data=json.dumps({"model": "hy3", "stream": True, "max_tokens": chunks,
                     "messages": [{"role": "user", "content": "hi"}]}).encode(),
    headers={"Content-Type": "application/json"})
lines = [line for line in urllib.request.urlopen(request, timeout=120) if line.strip()]
open(out, "w").write(json.dumps({"chunks": len(lines) - 1, "done": lines[-1].strip() == b"data: [DONE]"}))
"""


def hooks(host, chunks):
    """A drain hook that starts a streaming request of `chunks` seconds (traffic still in flight when the
    host leaves the load balancer) and an undrain hook that leaves a marker; returns their variables."""
    client = host["tmp"] / "stream_client.py"
    client.write_text(STREAM_CLIENT)
    drain, undrain = host["tmp"] / "drain.yml", host["tmp"] / "undrain.yml"
    drain.write_text(yaml.safe_dump([{"name": "Start a long streaming request", "ansible.builtin.shell": (
        "nohup {{ ansible_playbook_python }} %s {{ hy3_serve_port }} %d %s >/dev/null 2>&1 & sleep 1"
        % (client, chunks, host["tmp"] / "stream.json")), "changed_when": False}]))
    undrain.write_text(yaml.safe_dump([{"name": "Back in service", "ansible.builtin.copy": {
        "content": "in service\n", "dest": str(host["tmp"] / "undrained"), "mode": "0644"}}]))
    return {"hy3_roll_drain_tasks": str(drain), "hy3_roll_undrain_tasks": str(undrain), "hy3_roll_drain_interval": 0.5}


def report_rows(host):
    return json.loads((host["tmp"] / "report" / "fleet_budget.json").read_text())


def engine_pid(host):
    return (host["root"] / "run" / "engine.pid").read_text().strip()


def test_a_second_run_is_steady_and_rolls_nothing(host):
    assert deploy(host).returncode == 0
    pid = engine_pid(host)
    proc = deploy(host)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert [(r["outcome"], r["plan_reasons"]) for r in report_rows(host)] == [("steady", [])]
    roll_play = proc.stdout.split("PLAY [Roll the hosts that change, in waves]")[1].split("PLAY [")[0]
    assert "skipping: no hosts matched" in roll_play
    assert re.search(r"^node\s+: ok=\d+\s+changed=0 ", proc.stdout, re.M) and engine_pid(host) == pid
    assert "1 steady" in proc.stdout


def test_the_restart_waits_for_the_request_in_flight(host):
    assert deploy(host).returncode == 0
    pid = engine_pid(host)
    proc = deploy(host, "-v", hy3_max_num_seqs=2, **hooks(host, 6))
    assert proc.returncode == 0, proc.stdout[-4000:]
    busy = [int(n) for n in re.findall(r'"busy_polls": (\d+)', proc.stdout)]
    assert busy and busy[0] >= 2, proc.stdout[-4000:]                # waited while the request ran
    assert json.loads((host["tmp"] / "stream.json").read_text()) == {"chunks": 6, "done": True}
    assert engine_pid(host) != pid and (host["tmp"] / "undrained").exists()
    assert report_rows(host)[0]["outcome"] == "rolled" and report_rows(host)[0]["plan_reasons"] == ["config_changed"]


def test_a_drain_that_times_out_restarts_nothing(host):
    assert deploy(host).returncode == 0
    pid, config = engine_pid(host), (host["root"] / "etc" / "vllm.yaml").read_text()
    proc = deploy(host, hy3_max_num_seqs=2, hy3_roll_drain_timeout=2, **hooks(host, 30))
    assert proc.returncode != 0
    msg = failure(proc.stdout)
    assert "node: deploy failed: the engine still has 1 running and 0 waiting requests after 2 s; nothing was " \
           "changed and the engine was not restarted" in msg, proc.stdout[-4000:]
    assert "Rollback (unchanged)" in msg
    assert engine_pid(host) == pid and (host["root"] / "etc" / "vllm.yaml").read_text() == config
    assert (host["tmp"] / "undrained").exists()                      # serves as before: back in service
    assert report_rows(host)[0]["outcome"] == "failed"


@pytest.fixture()
def three_hosts(host):
    """host plus two more local hosts of their own root, facts and port."""
    hosts = {"node": {}}
    for name in ("node1", "node2"):
        hosts[name] = {"hy3_serve_root": str(host["tmp"] / name), "hy3_facts_dir": str(host["tmp"] / (name + "-facts")),
                       "hy3_serve_port": free_port()}
    yield hosts
    for name in ("node1", "node2"):
        run("ansible", "all", "-i", inventory(host), "-m", "ansible.builtin.command",
            "-a", "%s/bin/engine.sh stop" % hosts[name]["hy3_serve_root"])


def deploy_many(host, hosts, *extra):
    path = host["tmp"] / "inventory-many.yml"
    path.write_text(yaml.safe_dump({"gpu_nodes": {"hosts": hosts, "vars": host["vars"]}}))
    return run("ansible-playbook", "playbooks/deploy_hy3.yml", "-i", str(path),
               "-e", "hy3_report_dir=%s" % (host["tmp"] / "report"), *extra)


def roll_batches(output):
    """The hosts of each roll batch, in order, from the play's first task."""
    batches = []
    for play in output.split("PLAY [Roll the hosts that change, in waves]")[1:]:
        play = play.split("PLAY [")[0]
        batches.append(sorted(set(re.findall(r"^(?:ok|skipping|changed): \[(node\d?)\]", play, re.M))))
    return batches


def test_waves_roll_a_canary_then_the_rest_together(host, three_hosts):
    proc = deploy_many(host, three_hosts, "-e", '{"hy3_roll_serial": [1, 2]}')
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert roll_batches(proc.stdout) == [["node"], ["node1", "node2"]]
    assert [r["outcome"] for r in report_rows(host)] == ["rolled"] * 3


def test_a_failing_canary_leaves_later_waves_untouched(host, three_hosts):
    three_hosts["node"] = {"hy3_serve_environment": BROKEN_ENV}
    proc = deploy_many(host, three_hosts, "-e", '{"hy3_roll_serial": [1, 2]}')
    assert proc.returncode != 0
    assert roll_batches(proc.stdout)[0] == ["node"]
    assert [(r["host"], r["outcome"]) for r in report_rows(host)] == [
        ("node", "failed"), ("node1", "not_rolled"), ("node2", "not_rolled")]
    assert report_rows(host)[1]["why"] == "not rolled: the rollout stopped at node"
    assert not (host["tmp"] / "node1").exists() and not (host["tmp"] / "node2").exists()
    assert "node: deploy failed" in failure(proc.stdout)


def test_fleet_status_reads_the_engine_and_the_drift_from_its_record(host):
    assert deploy(host).returncode == 0

    def status():
        return run("ansible-playbook", "playbooks/fleet_status.yml", "-i", inventory(host),
                   "-e", "hy3_report_dir=%s" % (host["tmp"] / "report"))
    proc = status()
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert re.search(r"^node\s+: ok=\d+\s+changed=0 ", proc.stdout, re.M)
    row = json.loads((host["tmp"] / "report" / "fleet_status.json").read_text())[0]
    assert (row["state"], row["drift"], row["engine"]) == ("ok", [], "serving")
    assert row["max_model_len_served"] == row["max_model_len_recorded"] == 4096
    assert (row["running"], row["waiting"]) == (0, 0) and row["driver_version"] == row["driver_recorded"]
    with open(str(host["root"] / "etc" / "vllm.yaml"), "a") as handle:       # edited by hand on the host
        handle.write("# tuned by hand\n")
    assert status().returncode == 0
    row = json.loads((host["tmp"] / "report" / "fleet_status.json").read_text())[0]
    assert (row["state"], row["drift"]) == ("drift", ["config_changed"])


# --- node groups (one engine across nodes): planned, rolled, rolled back and reported as one unit ---
# node1 and node2 form group "pair" (node1 the head); the stand-in's headless member (vllm.entrypoints.cli)
# holds its process like vLLM's workers and answers no HTTP.

@pytest.fixture()
def pair(host, three_hosts):
    for name in ("node1", "node2"):
        three_hosts[name].update(hy3_node_group="pair", ansible_host="127.0.0.1")
    return three_hosts


def test_a_node_group_rolls_as_one_unit_and_is_one_row(host, pair):
    proc = deploy_many(host, pair, "-e", '{"hy3_roll_serial": [1]}')
    assert proc.returncode == 0, proc.stdout[-6000:]
    groups_play = proc.stdout.split("PLAY [Roll the node groups that change, one group per wave]")[1].split("PLAY [")[0]
    assert sorted(set(re.findall(r"^(?:ok|changed): \[(node\d)\]", groups_play, re.M))) == ["node1", "node2"]
    head = yaml.safe_load((host["tmp"] / "node1" / "etc" / "vllm.yaml").read_text())
    member = yaml.safe_load((host["tmp"] / "node2" / "etc" / "vllm.yaml").read_text())
    assert {k: head[k] for k in ("pipeline-parallel-size", "nnodes", "node-rank", "master-addr", "master-port")} == {
        "pipeline-parallel-size": 2, "nnodes": 2, "node-rank": 0, "master-addr": "127.0.0.1", "master-port": 29501}
    assert member["node-rank"] == 1 and member["headless"] is True and "headless" not in head
    assert {k: v for k, v in member.items() if k not in ("node-rank", "headless", "port")} == {
        k: v for k, v in head.items() if k not in ("node-rank", "port")}   # the same model settings (local hosts: own ports)
    assert "VLLM_HOST_IP=127.0.0.1" in (host["tmp"] / "node2" / "etc" / "engine.env").read_text()
    assert "headless multiproc executor" in (host["tmp"] / "node2" / "log" / "engine.log").read_text()
    rows = report_rows(host)
    assert [(r["host"], r.get("members"), r["outcome"]) for r in rows] == [
        ("node", None, "rolled"), ("pair", ["node1", "node2"], "rolled")]
    assert (rows[1]["pipeline_parallel_size"], rows[1]["gpus"]) == (2, 2)
    assert "| pair (node group: node1, node2) |" in proc.stdout
    proc = deploy_many(host, pair)
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert [(r["host"], r["outcome"]) for r in report_rows(host)] == [("node", "steady"), ("pair", "steady")]
    assert re.search(r"^node2\s+: ok=\d+\s+changed=0 ", proc.stdout, re.M)


def test_a_member_that_fails_puts_the_whole_group_back(host, pair):
    assert deploy_many(host, pair).returncode == 0
    head_pid = (host["tmp"] / "node1" / "run" / "engine.pid").read_text()
    configs = [(host["tmp"] / n / "etc" / "vllm.yaml").read_text() for n in ("node1", "node2")]
    pair["node2"]["hy3_serve_environment"] = BROKEN_ENV                 # the member's workers cannot start
    pair["node1"]["hy3_max_num_seqs"] = pair["node2"]["hy3_max_num_seqs"] = 2
    proc = deploy_many(host, pair)
    assert proc.returncode != 0
    msg = failure(proc.stdout)
    assert "node group pair: member node2 failed: node2: the engine's workers of node group pair are not running" in msg, \
        proc.stdout[-6000:]
    assert "Rollback of the group (restored_serving)" in msg
    assert [(host["tmp"] / n / "etc" / "vllm.yaml").read_text() for n in ("node1", "node2")] == configs
    assert (host["tmp"] / "node1" / "run" / "engine.pid").read_text() != head_pid     # restarted as one unit
    for name in ("node1", "node2"):                                     # every member runs the previous files
        assert subprocess.run([str(host["tmp"] / name / "bin" / "engine.sh"), "status"], check=False).returncode == 0, name
    row = [r for r in report_rows(host) if r["host"] == "pair"][0]
    assert row["outcome"] == "failed" and row["members"] == ["node1", "node2"]


def test_members_that_disagree_fault_the_group_and_touch_nothing(host, pair):
    gpus = host["tmp"] / "two-gpus.json"
    gpus.write_text(json.dumps({"gpus": [{"name": "NVIDIA H200", "total_gib": 140, "used_gib": 1}] * 2}))
    pair["node2"]["hy3_environment"] = dict(host["vars"]["hy3_environment"], HY3_FAKE_NVML_PROFILE=str(gpus))
    proc = deploy_many(host, pair)
    assert proc.returncode != 0
    row = [r for r in report_rows(host) if r["host"] == "pair"][0]
    assert row["outcome"] == "faulted", row
    assert "member node2 has 2 x NVIDIA H200" in row["why"] and "the head node1 has 1 x NVIDIA H200" in row["why"]
    assert not (host["tmp"] / "node1").exists() and not (host["tmp"] / "node2").exists()
