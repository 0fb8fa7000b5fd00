#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: hy3_budget
short_description: Compute the per-host GPU memory budget for serving a model with vLLM
version_added: 0.1.0
description:
  - Takes the GPU facts of one host (from M(hy3.fleet.nvml_facts)), a model profile and the quantization
    tiers on offer, and chooses the quantization, O(max_model_len), O(max_num_seqs), tensor parallel size and
    C(gpu_memory_utilization) that fit, modelled on how vLLM really sizes its KV cache.
  - vLLM requests C(gpu_memory_utilization x TOTAL) memory per GPU and refuses to start when FREE memory is
    below that, so the utilization is lowered to what is free (rounded down to 0.01) and the reason is returned.
  - "Per GPU: KV available = total x utilization - weights / tensor_parallel_size - O(runtime_overhead_gib).
    KV bytes per token = 2 x layers x max(1, kv_heads // tp) x head_dim x KV dtype bytes (MLA models: layers x
    latent dim x dtype bytes). KV needed = max_model_len x max_num_seqs x bytes per token."
  - "Weights = params (billions) x bits / 8, using total parameters (every expert is resident) plus the MTP
    layer when O(load_mtp=true); when the tier's weight directory exists the measured size (safetensors index
    C(total_size) or the files' sizes) is reported beside the estimate and the larger one is used."
  - "When the need exceeds what is left it retreats one variable at a time: (1) the next lower quantization
    tier whose weight files exist, (2) a lower O(max_model_len) (not below O(min_max_model_len)), (3) a lower
    O(max_num_seqs) (not below O(min_max_num_seqs)). Every step is returned in RV(ladder)."
  - When even the smallest setting does not fit it says that the host cannot hold the model and by how many
    GiB per GPU it falls short; it fails unless O(fail_when_cannot_hold=false).
  - All sizes are reported in GiB (2^30 bytes), the unit vLLM logs use, and in bytes.
author:
  - hy3.fleet maintainers (@hy3-fleet)
extends_documentation_fragment:
  - hy3.fleet.read_only
options:
  gpus:
    description:
      - The host's GPUs, as in C(ansible_facts.hy3_gpus.devices). Each needs C(memory_total) and
        C(memory_free) in bytes; C(memory_free_for_engine) (free plus what our own running engine holds) is
        used instead of C(memory_free) when present.
    type: list
    elements: dict
    required: true
  model:
    description: Model profile. Defaults to Hy3 (295B total, 21B active, 3.8B MTP, 80 layers, 8 KV heads,
      head_dim 128, 262144 context).
    type: dict
    suboptions:
      name:
        description: Model name, for reports.
        type: str
        default: model
      total_params_b:
        description: Total parameters in billions (all experts).
        type: float
        required: true
      active_params_b:
        description: Parameters active per token in billions (reported; weights use the total).
        type: float
        default: 0
      mtp_params_b:
        description: Multi-token-prediction layer parameters in billions.
        type: float
        default: 0
      num_layers:
        description: Attention layers.
        type: int
        required: true
      num_attention_heads:
        description: Query heads; tensor parallel size must divide it when given.
        type: int
      num_kv_heads:
        description: Key/value heads (GQA).
        type: int
        required: true
      head_dim:
        description: Head dimension.
        type: int
        required: true
      max_context:
        description: Longest context the model supports.
        type: int
        required: true
      mla_latent_dim:
        description: For MLA models (DeepSeek style) the cached latent size per token per layer
          (kv_lora_rank + qk_rope_head_dim); 0 for ordinary attention.
        type: int
        default: 0
  tiers:
    description:
      - Quantization tiers on offer; only tiers whose O(tiers[].weights_dir) holds weight files are chosen.
        They are tried from the most bits to the fewest.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: Tier (bf16 and fp16 are 16 bit, fp8 and int8 8 bit, int4 4 bit).
        type: str
        required: true
        choices: [bf16, fp16, fp8, int8, int4]
      weights_dir:
        description: Directory on the host holding this format's checkpoint (config.json and shards).
        type: path
        required: true
      quantization:
        description: vLLM C(--quantization) value for this tier; default fp8 for fp8, otherwise unset so vLLM
          reads it from the checkpoint.
        type: str
      dtype:
        description: vLLM C(--dtype) for this tier.
        type: str
        default: bfloat16
        choices: [auto, bfloat16, float16, half, float32, float]
  gpu_memory_utilization:
    description: Desired fraction of TOTAL memory vLLM may use, in (0, 1]; lowered when free memory is smaller.
    type: float
    default: 0.9
  runtime_overhead_gib:
    description: Per GPU memory outside weights and KV cache (activations peak, CUDA context, NCCL, CUDA graphs).
    type: float
    default: 4.0
  kv_cache_dtype:
    description: vLLM C(--kv-cache-dtype); C(auto) uses the model dtype.
    type: str
    default: auto
    choices: [auto, fp8, fp8_e4m3, fp8_e5m2]
  max_model_len:
    description: Desired context length; defaults to the model's context.
    type: int
  min_max_model_len:
    description: Shortest context the retreat may go to; defaults to the smaller of 4096 and O(max_model_len).
    type: int
  max_num_seqs:
    description: Desired concurrent sequences.
    type: int
    default: 16
  min_max_num_seqs:
    description: Fewest concurrent sequences the retreat may go to.
    type: int
    default: 1
  tensor_parallel_size:
    description: GPUs per engine; defaults to every GPU on the host.
    type: int
  block_size:
    description: vLLM KV cache block size in tokens (reported token counts are whole blocks).
    type: int
    default: 16
  max_model_len_multiple:
    description: A lowered O(max_model_len) is rounded down to a multiple of this.
    type: int
    default: 1024
  load_mtp:
    description: Count the MTP layer's weights (serving with MTP speculative decoding).
    type: bool
    default: false
  fail_when_cannot_hold:
    description: Fail when the host cannot hold the model; set false to only report it (dry runs).
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Budget Hy3 on this host
  hy3.fleet.hy3_budget:
    gpus: "{{ ansible_facts.hy3_gpus.devices }}"
    tiers:
      - {name: bf16, weights_dir: /models/hy3-bf16}
      - {name: fp8, weights_dir: /models/hy3-fp8}
    max_model_len: 131072
    max_num_seqs: 32
  register: budget

- name: Report only, for a dry run
  hy3.fleet.hy3_budget:
    gpus: "{{ ansible_facts.hy3_gpus.devices }}"
    tiers: [{name: fp8, weights_dir: /models/hy3-fp8}]
    fail_when_cannot_hold: false
"""

RETURN = r"""
fits:
  description: Whether a setting was found that fits.
  returned: always
  type: bool
verdict:
  description: V(fits), V(retreated N steps) or V(cannot hold).
  returned: always
  type: str
  sample: retreated 2 steps
steps_retreated:
  description: Number of retreat steps taken.
  returned: always
  type: int
quantization:
  description: Chosen tier (the last tried when it cannot hold).
  returned: always
  type: str
  sample: fp8
vllm_quantization:
  description: Value for vLLM C(quantization), null to let vLLM read the checkpoint.
  returned: when it fits
  type: str
dtype:
  description: Value for vLLM C(dtype).
  returned: when it fits
  type: str
weights_dir:
  description: Weight directory of the chosen tier.
  returned: when it fits
  type: str
max_model_len:
  description: Chosen context length.
  returned: always
  type: int
max_num_seqs:
  description: Chosen concurrent sequences.
  returned: always
  type: int
tensor_parallel_size:
  description: GPUs per engine.
  returned: always
  type: int
gpu_memory_utilization:
  description: Utilization to configure, lowered to what free memory allows.
  returned: always
  type: float
utilization_note:
  description: Why the utilization was lowered, or null.
  returned: always
  type: str
kv_cache_tokens:
  description: KV cache size in tokens vLLM should report ("GPU KV cache size"), whole blocks.
  returned: always
  type: int
max_concurrency:
  description: Predicted "Maximum concurrency for max_model_len tokens per request".
  returned: when it fits
  type: float
budget_gib:
  description: Budget lines per GPU in GiB - free, engine_request (total x utilization), weights_nominal,
    weights_measured, weights, overhead, kv_available, kv_needed, headroom; plus kv_bytes_per_token and
    kv_cache_tokens.
  returned: always
  type: dict
budget_bytes:
  description: The same lines in bytes.
  returned: always
  type: dict
ladder:
  description: Every step tried, in order, each with action, quantization, max_model_len, max_num_seqs, fits
    and table_gib.
  returned: always
  type: list
  elements: dict
skipped_tiers:
  description: Tiers not considered, with the reason (weight files missing).
  returned: always
  type: list
  elements: dict
weight_dirs:
  description: What was found in each tier's weight directory.
  returned: always
  type: list
  elements: dict
shortfall_gib:
  description: GiB per GPU missing at the smallest setting; 0 when it fits.
  returned: always
  type: float
reason:
  description: Why the host cannot hold the model.
  returned: when it cannot hold
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.hy3.fleet.plugins.module_utils import budget
from ansible_collections.hy3.fleet.plugins.module_utils.weight_files import inspect_weights

MODEL_SPEC = dict(
    name=dict(type="str", default="model"),
    total_params_b=dict(type="float", required=True),
    active_params_b=dict(type="float", default=0),
    mtp_params_b=dict(type="float", default=0),
    num_layers=dict(type="int", required=True),
    num_attention_heads=dict(type="int"),
    num_kv_heads=dict(type="int", required=True),
    head_dim=dict(type="int", required=True),
    max_context=dict(type="int", required=True),
    mla_latent_dim=dict(type="int", default=0),
)

TIER_SPEC = dict(
    name=dict(type="str", required=True, choices=list(budget.TIER_BITS)),
    weights_dir=dict(type="path", required=True),
    quantization=dict(type="str"),
    dtype=dict(type="str", default="bfloat16", choices=["auto", "bfloat16", "float16", "half", "float32", "float"]),
)

ARGUMENT_SPEC = dict(
    gpus=dict(type="list", elements="dict", required=True),
    model=dict(type="dict", options=MODEL_SPEC),
    tiers=dict(type="list", elements="dict", required=True, options=TIER_SPEC),
    gpu_memory_utilization=dict(type="float", default=0.9),
    runtime_overhead_gib=dict(type="float", default=4.0),
    kv_cache_dtype=dict(type="str", default="auto", choices=["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]),
    max_model_len=dict(type="int"),
    min_max_model_len=dict(type="int"),
    max_num_seqs=dict(type="int", default=16),
    min_max_num_seqs=dict(type="int", default=1),
    tensor_parallel_size=dict(type="int"),
    block_size=dict(type="int", default=16),
    max_model_len_multiple=dict(type="int", default=1024),
    load_mtp=dict(type="bool", default=False),
    fail_when_cannot_hold=dict(type="bool", default=True),
)


def gpu_memory(device):
    """(total, free) bytes of one GPU from nvml_facts; free counts our engine's memory as reclaimable."""
    free = device.get("memory_free_for_engine")
    if free is None:
        free = device.get("memory_free")
    return {"index": device.get("index"), "total": device.get("memory_total"), "free": free}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    gpus = params["gpus"]
    mig = [str(g.get("index")) for g in gpus if (g.get("mig_mode") or {}).get("current")]
    if mig:
        module.fail_json(msg="MIG is enabled on GPU(s) %s: budget whole GPUs only; disable MIG "
                             "(nvidia-smi -mig 0) or leave those GPUs out of O(gpus)" % ", ".join(mig))
    inspected = []
    tiers = []
    for tier in params["tiers"]:
        found = inspect_weights(tier["weights_dir"])
        inspected.append(dict(found, quantization=tier["name"]))
        tiers.append(dict(tier, present=found["present"], measured_bytes=found["measured_bytes"],
                          reason=found["reason"]))
    try:
        result = budget.plan(
            params["model"] or budget.HY3_PROFILE, tiers, [gpu_memory(g) for g in gpus],
            gpu_memory_utilization=params["gpu_memory_utilization"],
            runtime_overhead_gib=params["runtime_overhead_gib"],
            kv_cache_dtype=params["kv_cache_dtype"],
            max_model_len=params["max_model_len"],
            min_max_model_len=params["min_max_model_len"],
            max_num_seqs=params["max_num_seqs"],
            min_max_num_seqs=params["min_max_num_seqs"],
            tensor_parallel_size=params["tensor_parallel_size"],
            block_size=params["block_size"],
            max_model_len_multiple=params["max_model_len_multiple"],
            load_mtp=params["load_mtp"],
        )
    except budget.BudgetInputError as err:
        module.fail_json(msg="hy3_budget: %s" % err, weight_dirs=inspected)
    result["weight_dirs"] = inspected
    if not result["fits"] and params["fail_when_cannot_hold"]:
        module.fail_json(msg=result["reason"], **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
