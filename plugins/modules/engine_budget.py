#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: engine_budget
short_description: Compute the per-host GPU memory budget for serving a model with vLLM
version_added: 0.2.0
description:
  - Formerly C(hy3.fleet.hy3_budget) (0.1.0), which still redirects here and is deprecated; the module budgets any
    model vLLM serves.
  - Takes the GPU facts of one host (from M(hy3.fleet.nvml_facts)) and the quantization tiers on offer, reads
    each tier's checkpoint (the model profile and parameter counts from C(config.json), sizes and integrity from
    the safetensors headers), and chooses the quantization, O(max_model_len), O(max_num_seqs), tensor parallel
    size and C(gpu_memory_utilization) that fit, modelled on how vLLM really sizes its KV cache.
  - vLLM requests C(gpu_memory_utilization x TOTAL) memory per GPU and refuses to start when FREE memory is
    below that, so the utilization is lowered to what is free (rounded down to 0.01) and the reason is returned.
  - "Per GPU, the way the engine accounts: KV available = ceil(total x utilization) - weights - the profile run's
    transient peak (a dummy forward of O(max_num_batched_tokens) tokens, then the sampler over O(max_num_seqs)
    rows of the full vocabulary) - the V2 model runner's sampling state - the expert kernels' buffers (the kernel
    vLLM picks for the checkpoint, the GPU and the version) - non-torch memory (runtime workspaces, NCCL and
    all-reduce buffers with tp > 1) - the CUDA-graph estimate (engines that count it before the KV cache, v0.20
    on, unless O(enforce_eager=true)); each term is its own line of RV(budget_gib). With O(kv_cache_memory_bytes)
    (the CPU engine's C(VLLM_CPU_KVCACHE_SPACE)) the KV cache is exactly that."
  - "The KV cache is laid out by layer group the way vLLM's hybrid allocator does it (full attention, sliding
    window, MLA latents, linear-attention state, fp8 KV, block rounding), so RV(kv_cache_tokens) and
    RV(max_concurrency) are the engine's C(GPU KV cache size) and C(Maximum concurrency) lines."
  - "Unset engine knobs (O(gpu_memory_utilization), O(max_num_batched_tokens), the block size) take the defaults of
    O(engine_version) on these GPUs, since they changed between versions."
  - "An entry of O(calibration_entries) whose key matches a setting (GPU model, engine version, model and tier, tp,
    max_num_batched_tokens, max_num_seqs, enforce_eager, KV dtype, model dtype) replaces the modelled overhead with what an
    engine really took (M(hy3.fleet.engine_calibration))."
  - "Weights per GPU: what the shard headers say one tensor-parallel rank holds (vocabulary-parallel embedding
    and lm_head split by rows, norms, routers and MLA down-projections replicated, KV projections split by head
    but never below one head per rank, everything else split), plus the MTP layer when O(load_mtp=true); without
    headers, the floor from the parameter counts (every expert is resident)."
  - "Two verdicts: RV(starts) (one request of max_model_len fits, the check vLLM makes at start) and
    RV(meets_target) (max_num_seqs such requests fit), which drives the retreat."
  - "When the need exceeds what is left it retreats one variable at a time: (1) the next lower quantization
    tier whose weight files exist, (2) a lower O(max_model_len) (not below O(min_max_model_len)), (3) a lower
    O(max_num_seqs) (not below O(min_max_num_seqs)). Every step is returned in RV(ladder)."
  - When even the smallest setting does not fit it says that the host cannot hold the model and by how many
    GiB per GPU it falls short; it fails unless O(fail_when_cannot_hold=false). RV(status) is V(fits),
    V(retreated) or V(cannot_hold) beside the sentence in RV(verdict).
  - All sizes are reported in GiB (2^30 bytes), the unit vLLM logs use, and in bytes.
author:
  - hy3.fleet maintainers (@hy3-fleet)
extends_documentation_fragment:
  - hy3.fleet.read_only
seealso:
  - module: hy3.fleet.nvml_facts
  - module: hy3.fleet.engine_info
  - module: hy3.fleet.engine_calibration
  - module: hy3.fleet.engine_log_triage
options:
  gpus:
    description:
      - The host's GPUs, as in C(ansible_facts.hy3_gpus.devices). Each needs C(memory_total) and
        C(memory_free) in bytes; C(memory_free_for_engine) (free plus what our own running engine holds) is
        used instead of C(memory_free) when present. C(other_processes_memory), where present, is what other
        processes hold on the GPU, which the engines that measure memory device-wide (the V0 engine of vLLM
        0.2.5 - 0.3.0 and 0.6.4, the V1 engine of 0.8.0 - 0.9.0) count against their KV cache; NVML lists only
        the processes it can see (another container's may be missing), so on those engines the budget can be
        short by what it does not list.
    type: list
    elements: dict
    required: true
  model_config:
    description:
      - Top-level C(config.json) fields merged over the C(config.json) each tier's O(tiers[].weights_dir) holds,
        before the model profile is read from it (an explicit override, for example C(max_position_embeddings)
        set to 131072).
      - The profile (layers, heads, KV heads, head_dim, MoE and MLA shape, context, quantization) and the
        parameter counts come from the checkpoint itself; this only overrides fields of it.
    type: dict
    default: {}
  tiers:
    description:
      - Quantization tiers on offer, tried from the most bits to the fewest. Each O(tiers[].weights_dir) is
        read before anything else (C(config.json), the safetensors index and every shard's header, never tensor
        data; for a multimodal model its C(preprocessor_config.json) and C(video_preprocessor_config.json)). A
        directory that does not exist, or holds neither C(config.json) nor weight files, is not offered
        (C(status=absent) in RV(weight_dirs)).
      - A damaged checkpoint (missing shard, truncated or corrupt shard, index naming a tensor a shard lacks, index
        total_size disagreeing, unreadable C(config.json), a file instead of a directory) has
        C(status=weight_loading) in RV(weight_dirs). When the budget would choose such a tier the module fails with
        RV(status=weight_loading) before anything else runs; a damaged tier it would not choose is skipped and
        reported.
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
    description:
      - Desired fraction of TOTAL memory vLLM may use, in (0, 1]; lowered when free memory is smaller.
      - Unset, the engine version's default (0.9; 0.92 from v0.20; 1.0 from v0.34, whose extensible KV cache keeps
        its own margin of free memory).
      - Engines before v0.20 capture their CUDA graphs outside this fraction; with many sequences and a large
        vocabulary, 0.95 has run out of memory in the sampler warm-up after the KV cache was sized.
    type: float
  runtime_overhead_gib:
    description:
      - A flat per-GPU amount between the weights and the KV cache, replacing the engine accounting (an explicit
        override only; unset, every term is modelled).
    type: float
  engine_version:
    description:
      - Version of the vLLM engine on the host (M(hy3.fleet.engine_info) reads it); its defaults and accounting
        are modelled (up to 0.34). Unset, 0.33's behaviour, the newest engine that sizes its KV cache before warm-up.
    type: str
  engine_platform:
    description: V(cuda) for GPU engines; V(cpu) for the CPU engine, whose KV cache is O(kv_cache_memory_bytes).
    type: str
    default: cuda
    choices: [cuda, cpu]
  max_num_batched_tokens:
    description: vLLM C(--max-num-batched-tokens); unset, the engine version's default for this GPU.
    type: int
  enforce_eager:
    description: vLLM C(--enforce-eager); no CUDA graphs, so no graph memory.
    type: bool
    default: false
  expert_parallel:
    description: vLLM C(--enable-expert-parallel); whole experts are spread over the ranks instead of split.
    type: bool
    default: false
  engine_environment:
    description:
      - The engine's environment variables; those that change its memory are modelled, where the engine's release
        reads them. C(VLLM_USE_FLASHINFER_SAMPLER) picks the sampler the profile run uses;
        C(VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS) whether the CUDA-graph estimate is taken off the KV cache;
        C(VLLM_USE_V2_MODEL_RUNNER) which model runner runs; C(VLLM_USE_V1) which engine runs (v0.8 - v0.10).
        The calibration key names the last three.
    type: dict
    default: {}
  flashinfer_installed:
    description:
      - Whether the engine's interpreter has C(flashinfer-python) (RV(hy3.fleet.engine_info#module:flashinfer)).
        Without it engines up to v0.11.0 sort the full logits in the profile run, about 2.5 times FlashInfer's
        memory over max_num_seqs x vocabulary. Unset, such an engine is budgeted with the sort (the larger
        amount, and what a pip install without the extra does).
    type: bool
  engine_config:
    description:
      - Further vLLM config keys the engine runs with (long option names as C(vllm serve --config) takes them; the
        serve role's C(hy3_serve_extra_config)). Those that change its memory are modelled -
        C(enable-prefix-caching) (hybrid mamba / linear-attention models then keep two states a request, and before
        v0.28.0 a Mamba-1 / Mamba-2 model one a block), C(mamba-ssm-cache-dtype), C(block-size),
        C(max-cudagraph-capture-size) and C(async-scheduling), each with its C(no-) form where vLLM has one; for a
        multimodal model C(limit-mm-per-prompt), C(language-model-only) and C(skip-mm-profiling), which decide the
        vision tower's dummy batch in the profile run and whether the tower is built at all (with no image or video
        input its weights are not loaded, for most models from v0.15.0 and some classes before), and
        C(mm-encoder-tp-mode) (with V(data) every rank holds the whole tower and encodes its share of the items
        unsharded, where the engine's class runs its tower that way), and C(config-format) (with V(mistral), or
        V(auto) from v0.12.0 where a tier's checkpoint holds Mistral's own C(params.json) and
        C(consolidated*.safetensors), the engine reads that format, whose Pixtral vision tower every rank holds whole
        before v0.20.0).
      - Keys the collection sets itself - this module's options (C(max-num-batched-tokens), C(enforce-eager),
        C(enable-expert-parallel), C(kv-cache-dtype), C(max-model-len), C(max-num-seqs), C(gpu-memory-utilization),
        C(tensor-parallel-size) and the like) and the serve role's (C(served-model-name), C(host), C(port), the node
        group's), in either form of a flag - fail with V(bad_input) naming the option or variable to set, so the
        engine and its budget cannot disagree; keys that change memory in ways the budget does not model (such as
        C(kv-transfer-config), C(compilation-config), C(cpu-offload-gb)) are warnings. C(attention-backend) is
        modelled - FlashInfer's attention workspaces (394 MiB each, one per KV-cache group, or one shared where the
        decode runs TRT-LLM's kernels) join the CUDA-graph estimate that the engine counts from v0.20; left unset,
        the backend is vLLM's own choice (FlashInfer on SM100 GPUs for models without MLA).
        C(disable-custom-all-reduce) is modelled too - CUDA graphs that capture NCCL's all-reduce keep more a layer,
        as they do without the flag on more than two GPUs that reach each other over PCIe alone.
        C(enable-extensible-kv-cache) is modelled from v0.34.0 - set to false (or with C(kv-cache-memory-bytes)) the
        engine sizes its cache from the profile alone, keeps no margin of free memory, and its utilization default is
        0.92 instead of 1.0.
      - C(speculative-config) (a mapping, its JSON text, or dotted keys such as C(speculative-config.method)) is
        modelled - its method as vLLM resolves it (every MTP alias is V(mtp); a draft model's name can say eagle,
        eagle3, dflash or dspark) and C(num_speculative_tokens), which vLLM requires except for suffix decoding (24)
        and an MTP drafter named by C(model) (its layers, 1). A method vLLM does not know, a missing count or the
        option given twice fail with V(bad_input). With V(mtp) the engine loads the checkpoint's MTP layers (as O(load_mtp)) and a tier whose
        checkpoint holds none is not offered (C(status=no_mtp_layer) in RV(skipped_tiers)); a model without MTP
        layers fails with V(bad_input). The drafter's KV layers join the cache (the MTP layers, one for an EAGLE
        head), its forward and the rejection sampler enter the profile run (budget line C(speculative)), decode
        graphs carry 1 + k tokens, and a hybrid model's mamba layers keep k states more. An EAGLE head's or a draft
        model's own weights are not read (a warning says so).
      - Values are read as O(engine_version) reads them - a flag set to false is dropped by engines before v0.28.0,
        which keep their default. The settings that move the overhead (capture cap, async scheduling, speculative
        method and tokens) are part of the calibration key.
    type: dict
    default: {}
  kv_cache_memory_bytes:
    description:
      - The KV cache size the engine is told (C(--kv-cache-memory-bytes), or C(VLLM_CPU_KVCACHE_SPACE) GiB on the
        CPU engine); the engine then takes exactly this. Required with O(engine_platform=cpu).
    type: int
  model_id:
    description: Names the model in calibration keys (for example the served model name); defaults to the architecture.
    type: str
  calibration_entries:
    description:
      - The calibration store's entries (RV(hy3.fleet.engine_calibration#module:entries)); an entry is used only
        for a setting with exactly its key.
    type: dict
    default: {}
  kv_cache_dtype:
    description:
      - vLLM C(--kv-cache-dtype); C(auto) uses the model dtype, or the KV cache dtype the checkpoint was quantized
        for, as vLLM resolves it - a ModelOpt export's C(kv_cache_quant_algo) from vLLM 0.14, an llm-compressor
        checkpoint's C(kv_cache_scheme) from 0.22.
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
    description: GPUs per engine; defaults to every GPU on the host (per node, under O(pipeline_parallel_size)).
    type: int
  pipeline_parallel_size:
    description:
      - Pipeline stages of one engine across the nodes of a group (vLLM's C(pipeline_parallel_size)); O(gpus) then lists
        every GPU of the group. Layers are split as vLLM splits them (embedding on the first stage, LM head and MTP
        on the last) and the tightest stage is budgeted.
    type: int
    default: 1
    version_added: 0.3.0
  nodes_needed_up_to:
    description:
      - When the host cannot hold the model alone, try up to this many such hosts, one pipeline stage each, and say
        how many would hold it (RV(nodes_needed)); 0 or 1 skips it.
    type: int
    default: 8
    version_added: 0.3.0
  block_size:
    description:
      - vLLM KV cache block size in tokens; unset, the engine's default (16, 64 from v0.34; 64 for MLA models;
        128 on the CPU engine).
    type: int
  max_model_len_multiple:
    description: A lowered O(max_model_len) is rounded down to a multiple of this.
    type: int
    default: 1024
  load_mtp:
    description:
      - Count the MTP layers' weights and KV as if the engine loaded them. A C(speculative-config) of method V(mtp)
        in O(engine_config) implies it.
    type: bool
    default: false
  fail_when_cannot_hold:
    description: Fail when the host cannot hold the model; set false to only report it (dry runs).
    type: bool
    default: true
"""

EXAMPLES = r"""
- name: Budget Hy3 on this host
  hy3.fleet.engine_budget:
    gpus: "{{ ansible_facts.hy3_gpus.devices }}"
    tiers:
      - {name: bf16, weights_dir: /models/hy3-bf16}
      - {name: fp8, weights_dir: /models/hy3-fp8}
    max_model_len: 131072
    max_num_seqs: 32
  register: budget

- name: Report only, for a dry run
  hy3.fleet.engine_budget:
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
kv_cache_dtype:
  description: The KV cache dtype budgeted - the one asked for, or the checkpoint's where C(auto) takes it.
  returned: always
  type: str
  sample: auto
kv_cache_dtype_source:
  description: V(request), or V(checkpoint) where C(auto) became the checkpoint's own KV cache dtype.
  returned: always
  type: str
  sample: request
vision_tower_skipped:
  description:
    - Why the engine builds no multimodal tower (C(--language-model-only), or every image and video limit of
      C(limit-mm-per-prompt) at 0), so that its weights are not budgeted; null when it builds the one the model has.
  returned: always
  type: str
  sample: --language-model-only
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
  description: GPUs per engine (per node under pipeline parallelism).
  returned: always
  type: int
pipeline_parallel_size:
  description: Pipeline stages (nodes of the group).
  returned: always
  type: int
  version_added: 0.3.0
nodes_needed:
  description:
    - When this host cannot hold the model, the fewest such hosts that would, one pipeline stage each (null when not even
      O(nodes_needed_up_to) would); RV(reason) says it too.
  returned: when the host cannot hold the model
  type: int
  version_added: 0.3.0
gpu_memory_utilization:
  description: Utilization to configure, lowered to what free memory allows.
  returned: always
  type: float
utilization_note:
  description: Why the utilization was lowered (free memory below the request; or, on an engine that captures its
    CUDA graphs after the KV cache, too little room outside the request for them and the sampler's warm-up), or
    null.
  returned: always
  type: str
kv_cache_tokens:
  description: KV cache size in tokens vLLM should report ("GPU KV cache size N tokens").
  returned: always
  type: int
max_concurrency:
  description: Predicted "Maximum concurrency for max_model_len tokens per request" (expected concurrency).
  returned: always
  type: float
starts:
  description:
    - Whether one request of max_model_len fits in the KV cache (the check vLLM makes at start) and, on an engine
      that captures its CUDA graphs without counting them (before v0.21), whether the graphs and the sampler's
      warm-up then fit in the memory left outside the requested budget (budget_gib after_kv, room_after_kv).
  returned: always
  type: bool
meets_target:
  description: Whether max_num_seqs requests of max_model_len fit (the target that drives the retreat).
  returned: always
  type: bool
starts_certainty:
  description:
    - V(tight) where the KV cache is nearer to one max_model_len request than the budget's error (budget_gib
      start_margin within start_error), so vLLM's own check may go either way; V(clear) otherwise.
    - The error is 5% of the KV cache or 0.5 GiB, the larger, for a modelled or overridden overhead (90% of
      bench/kv_accuracy.py's public starts fall within it), 1% for a calibrated one, none for an explicit
      O(kv_cache_memory_bytes).
  returned: always
  type: str
  choices: [clear, tight]
starts_note:
  description: The start verdict as a sentence (ending in how tight it is, where it is tight).
  returned: always
  type: str
target_note:
  description: The target verdict as a sentence.
  returned: always
  type: str
engine:
  description: The engine settings modelled - version, platform, gpu_name, nvlink (whether the tensor-parallel
    group's GPUs have active NVLink links, from the facts, or null), fully_connected (whether every pair of them is
    NVLink-connected, or null), p2p (whether they have peer-to-peer access to each other, or null), nnodes (the
    nodes of a group's launch), max_num_batched_tokens (and whether it is the engine's default), enforce_eager,
    flashinfer_sampler (whether the profile run samples with FlashInfer; null for engines before v0.11.1 whose
    FlashInfer install is not known, budgeted with the sort),
    cudagraph_counted, v0_engine (whether vLLM's V0 engine runs, as before v0.8), model_runner_v2 (the model
    runner O(engine_environment) picks; null, the engine's own choice), environment (the modelled variables
    O(engine_environment) set, as NAME=value; null when none), kv_cache_memory_bytes,
    runtime_overhead_gib, model_id, and what O(engine_config) set of enable_prefix_caching, mamba_ssm_cache_dtype,
    max_cudagraph_capture_size, async_scheduling, attention_backend, num_speculative_tokens and
    speculative_method (null where unset).
  returned: always
  type: dict
calibration_fields:
  description: The calibration key of the chosen setting, for M(hy3.fleet.engine_calibration).
  returned: always
  type: dict
budget_gib:
  description:
    - Budget lines per GPU in GiB - free, engine_request (ceil(total x utilization)), weights_nominal,
      weights_measured, weights_padding (what loading adds to the checkpoint's bytes - MXFP4 experts padded by
      their kernel, the prefill workspace Hopper's sparse-MLA backend reserves, the rope tables built while
      loading, the scales Marlin widens block-fp8 weights to below SM 8.9), weights, activation_peak,
      sampler_state, moe_workspace, attention_workspace (what the attention adds to the engine's shared workspace
      beyond the experts' request - DeepSeek-V4's prefill gather, a sparse indexer's prefill buffer), cold_compile
      (from v0.29 what a
      cold torch.compile's benchmark copies of the embedding table add to the profile's peak), speculative (what a speculative
      drafter adds - its phase of the profile run, the rejection sampler's, and its input buffers where the engine
      counts them), encoder_profile (what a multimodal model's vision tower adds to the profile run's peak), non_torch, cudagraph,
      other_processes (other processes' memory on the GPU, where the engine measures device-wide and counts it), overhead (their sum, or
      the calibrated or overridden amount), warmup_margin (what vLLM 0.34's extensible KV cache keeps free beyond
      them, 0 where the requested budget binds first), kv_available, kv_one_request, kv_needed, headroom,
      after_kv (what an engine that does not count its CUDA graphs needs outside the requested memory once the KV
      cache is allocated - its graphs, then its sampler's warm-up, less the profile's transient peak it gave back)
      and room_after_kv (the free memory outside the request less the CUDA context).
    - Also overhead_source (V(model), V(calibrated), V(override), V(explicit_kv)), calibrated_by (host and time
      of the measurement used, or null), kv_bytes_per_token, kv_block_size (the attention block a hybrid
      mamba / linear-attention model grows to hold one state), kv_cache_tokens, kv_cache_blocks,
      max_concurrency, kv_starts (vLLM's own check - one max_model_len request fits the KV cache), starts (that
      check, and after_kv within room_after_kv), start_margin (the KV cache less one max_model_len request and
      vLLM's null block - negative where the check fails) and start_error (the budget's error there, see
      RV(starts_certainty)).
    - Under pipeline parallelism (O(pipeline_parallel_size) > 1) the lines are the tightest stage's, and
      C(stages) lists every stage with stage, layers, weights, overhead (the last stage's profile run adds the
      sampler), kv_available and kv_cache_blocks.
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
  description: Tiers not considered, with quantization, status (V(absent); V(weight_loading) for a damaged tier the
    budget would not choose; V(no_mtp_layer) when the engine drafts with MTP layers the checkpoint lacks) and reason.
  returned: always
  type: list
  elements: dict
weight_dirs:
  description:
    - What was read in each tier's weight directory, also when the tier is not usable. Each has C(quantization)
      (the tier), C(path), C(status) (V(ok), V(absent), V(weight_loading)), C(problem) (machine-readable, one of
      V(not_a_directory), V(no_config), V(bad_config), V(no_weights), V(missing_shard), V(truncated),
      V(corrupt_header), V(corrupt_index), V(index_mismatch), V(bad_override), V(unreadable)), C(reason) (naming
      the file), C(present), C(profile) (read from config.json), C(params_config) (total, active, mtp, embedding
      from config.json),
      C(params_header) (total and mtp from the shard headers), C(bytes_by_dtype), C(data_bytes), C(mtp_bytes),
      C(measured_bytes), C(files) (shard count), C(bits), C(weight_dtype), C(weight_bytes_per_rank) (as loaded,
      an unquantized checkpoint's floating tensors at the tier's C(dtype)), C(mtp_bytes_per_rank),
      C(tower_bytes_per_rank) (a multimodal tower's part of it), C(tower_bytes) (the whole tower, what a rank holds
      with C(mm-encoder-tp-mode) C(data) or in Mistral's format), C(mistral_format_files) (C(params.json) and
      C(consolidated*.safetensors) are there too; the shard headers read are config.json's), C(tensor_parallel_size),
      C(guessed) (config fields defaulted) and C(warnings).
  returned: always
  type: list
  elements: dict
model_profile:
  description: The model profile the budget used (from the first tier with a readable config.json, with
    O(model_config) merged over it); keys follow config.json (num_hidden_layers, num_key_value_heads, head_dim,
    max_position_embeddings, moe, mla, layer_types, quantization, params ...).
  returned: when a profile could be read
  type: dict
status:
  description: Machine-readable outcome beside C(msg) on failure - V(weight_loading) (a chosen tier's checkpoint is
    damaged), V(no_checkpoint) (no tier holds a readable checkpoint), V(bad_input) (input that cannot describe a
    deployment), else the budget's own status (V(fits), V(retreated), V(cannot_hold)).
  returned: always
  type: str
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
from ansible_collections.hy3.fleet.plugins.module_utils import budget, checkpoint, engine_memory
from ansible_collections.hy3.fleet.plugins.module_utils.weight_files import inspect_weights

TIER_SPEC = dict(
    name=dict(type="str", required=True, choices=list(budget.TIER_BITS)),
    weights_dir=dict(type="path", required=True),
    quantization=dict(type="str"),
    dtype=dict(type="str", default="bfloat16", choices=["auto", "bfloat16", "float16", "half", "float32", "float"]),
)

ARGUMENT_SPEC = dict(
    gpus=dict(type="list", elements="dict", required=True),
    model_config=dict(type="dict", default={}),
    tiers=dict(type="list", elements="dict", required=True, options=TIER_SPEC),
    gpu_memory_utilization=dict(type="float"),
    runtime_overhead_gib=dict(type="float"),
    engine_version=dict(type="str"),
    engine_platform=dict(type="str", default="cuda", choices=["cuda", "cpu"]),
    max_num_batched_tokens=dict(type="int", no_log=False),
    enforce_eager=dict(type="bool", default=False),
    expert_parallel=dict(type="bool", default=False),
    engine_environment=dict(type="dict", default={}),
    flashinfer_installed=dict(type="bool"),
    engine_config=dict(type="dict", default={}),
    kv_cache_memory_bytes=dict(type="int"),
    model_id=dict(type="str"),
    calibration_entries=dict(type="dict", default={}),
    kv_cache_dtype=dict(type="str", default="auto", choices=["auto", "fp8", "fp8_e4m3", "fp8_e5m2"]),
    max_model_len=dict(type="int"),
    min_max_model_len=dict(type="int"),
    max_num_seqs=dict(type="int", default=16),
    min_max_num_seqs=dict(type="int", default=1),
    tensor_parallel_size=dict(type="int"),
    pipeline_parallel_size=dict(type="int", default=1),
    nodes_needed_up_to=dict(type="int", default=8),
    block_size=dict(type="int"),
    max_model_len_multiple=dict(type="int", default=1024),
    load_mtp=dict(type="bool", default=False),
    fail_when_cannot_hold=dict(type="bool", default=True),
)

NO_CHECKPOINT = "no_checkpoint"
BAD_INPUT = "bad_input"
NO_MTP_LAYER = "no_mtp_layer"     # a whole checkpoint the engine's MTP drafter cannot use: the tier is not offered


def engine_settings(params, from_config, tiers=()):
    """What budget.plan models of the engine; the GPU model names the calibration key. from_config: the settings
    engine_memory.config_settings read in the engine's further config; tiers: inspect_tiers' (whether their
    checkpoints hold Mistral's own format, which the engine may read instead of config.json)."""
    present = [tier for tier in tiers if tier.get("present")]
    gpus = params["gpus"]
    group = (gpus or [])[:tensor_parallel_size(params)]      # one tensor-parallel group's GPUs
    from_environment = engine_memory.engine_environment(params["engine_version"], params["engine_environment"])
    return dict({k: v for k, v in from_config.items() if k != "block_size"}, **from_environment, **{
        "version": params["engine_version"], "platform": params["engine_platform"],
        "gpu_name": gpus[0].get("name") if gpus else None, "nvlink": nvlink_connected(group),
        "fully_connected": every_pair(group, "nvlink_peers"), "p2p": every_pair(group, "p2p_peers"),
        # a node group's launch: vLLM turns its custom all-reduce off for nnodes > 1
        "nnodes": params["pipeline_parallel_size"] if (params["pipeline_parallel_size"] or 1) > 1 else None,
        "max_num_batched_tokens": params["max_num_batched_tokens"], "enforce_eager": params["enforce_eager"],
        "expert_parallel": params["expert_parallel"], "kv_cache_memory_bytes": params["kv_cache_memory_bytes"],
        "flashinfer_sampler": engine_memory.flashinfer_sampler(params["engine_version"], params["engine_environment"],
                                                               params["flashinfer_installed"]),
        "runtime_overhead_gib": params["runtime_overhead_gib"], "model_id": params["model_id"],
        "calibration_entries": params["calibration_entries"],
        # one flag for the engine: where tiers differ, the format that holds more on a rank (the whole tower)
        "mistral_format_files": any(tier.get("mistral_format_files") for tier in present),
    })


def tensor_parallel_size(params):
    """The tensor-parallel size: the option, else one pipeline stage's share of the GPUs (at least 1)."""
    return params["tensor_parallel_size"] or max(len(params["gpus"] or []) // max(params["pipeline_parallel_size"] or 1, 1), 1)


def every_pair(gpus, fact):
    """Whether every pair of the GPUs is in each other's nvml_facts list ``fact`` (nvlink_peers: NVLink, vLLM's
    is_fully_connected; p2p_peers: peer-to-peer access), by their indices (else their places); None for one GPU or
    where a GPU's facts have no such list."""
    peers = [gpu.get(fact) for gpu in gpus]
    if len(gpus) < 2 or any(reach is None for reach in peers):
        return None
    indices = [gpu.get("index", place) for place, gpu in enumerate(gpus)]
    return all(set(indices) - {index} <= set(reach) for index, reach in zip(indices, peers))


def nvlink_connected(gpus):
    """Whether every GPU has an active NVLink link (nvml_facts' nvlink_active_links), which decides the
    communicators' buffers; None when a GPU's facts cannot tell, so the budget tells by the GPU's name."""
    links = [gpu.get("nvlink_active_links") for gpu in gpus]
    if not links or any(count is None for count in links):
        return None
    return all(count > 0 for count in links)


def gpu_memory(device):
    """(total, free) bytes of one GPU from nvml_facts, free counting our engine's memory as reclaimable, and what other
    processes hold on it (engines that measure device-wide count it)."""
    free = device.get("memory_free_for_engine")
    if free is None:
        free = device.get("memory_free")
    return {"index": device.get("index"), "total": device.get("memory_total"), "free": free,
            "other_processes": device.get("other_processes_memory")}


def inspect_tiers(tiers, tp, overrides, load_mtp, mtp_drafts=False):
    """What each tier's directory holds; tiers[] as budget.plan takes them, and the reports. mtp_drafts: the engine
    drafts with the MTP layers (speculative-config), so a checkpoint without them cannot serve (not offered)."""
    inspected, planned = [], []
    for tier in tiers:
        served = budget.DTYPE_BYTES[tier.get("dtype") or "bfloat16"]
        found = dict(inspect_weights(tier["weights_dir"], tp, overrides, served), quantization=tier["name"])
        stored_bits = checkpoint.WEIGHT_DTYPE_BITS.get(found["weight_dtype"]) or found["bits"]   # not the served dtype's
        if stored_bits and stored_bits != budget.TIER_BITS[tier["name"]]:
            found["warnings"].append("tier %s (%s bit) holds a %s-bit checkpoint (%s); its measured size is used"
                                     % (tier["name"], budget.TIER_BITS[tier["name"]], stored_bits,
                                        found["weight_dtype"]))
        per_rank = found["weight_bytes_per_rank"]
        if per_rank is not None and load_mtp:
            per_rank += found["mtp_bytes_per_rank"]
        inspected.append(found)
        usable = dict(present=found["status"] != checkpoint.ABSENT, status=found["status"], reason=found["reason"])
        if mtp_drafts and found["status"] == checkpoint.OK and not found["mtp_bytes"]:
            usable = dict(present=False, status=NO_MTP_LAYER,
                          reason="%s holds no MTP layer, which speculative-config method mtp drafts with"
                                 % found["path"])
        planned.append(dict(tier, profile=found["profile"], bits=found["bits"], measured_bytes=found["measured_bytes"],
                            weight_bytes_per_rank=per_rank, tower_bytes_per_rank=found["tower_bytes_per_rank"],
                            tower_bytes=found["tower_bytes"], mistral_format_files=found["mistral_format_files"],
                            **usable))
    return inspected, planned


def first_profile(inspected):
    """The profile of the first tier with a readable config.json (the tiers hold one model)."""
    return next((found["profile"] for found in inspected if found["profile"]), None)


def run_plan(module, profile, tiers, from_config):
    params = module.params
    return budget.plan(
        profile, tiers, [gpu_memory(g) for g in params["gpus"]],
        gpu_memory_utilization=params["gpu_memory_utilization"],
        kv_cache_dtype=params["kv_cache_dtype"],
        max_model_len=params["max_model_len"],
        min_max_model_len=params["min_max_model_len"],
        max_num_seqs=params["max_num_seqs"],
        min_max_num_seqs=params["min_max_num_seqs"],
        tensor_parallel_size=params["tensor_parallel_size"],
        pipeline_parallel_size=params["pipeline_parallel_size"],
        nodes_needed_up_to=params["nodes_needed_up_to"],
        block_size=params["block_size"] or from_config.get("block_size"),
        max_model_len_multiple=params["max_model_len_multiple"],
        load_mtp=params["load_mtp"],
        engine=engine_settings(params, from_config, tiers),
    )


def plan_around_damage(module, profile, tiers, inspected, from_config):
    """Plan with damaged tiers as candidates; fail pre-flight when one of them is chosen, else plan without them."""
    result = run_plan(module, profile, tiers, from_config)
    damaged = {t["name"]: t for t in tiers if t["status"] == checkpoint.WEIGHT_LOADING}
    chosen = damaged.get(result.get("quantization"))
    if chosen is not None:
        module.fail_json(msg="engine_budget: weight loading would fail for tier %s: %s; check the weight directory and "
                             "file list" % (chosen["name"], chosen["reason"]),
                         status=checkpoint.WEIGHT_LOADING, weight_dirs=inspected, model_profile=profile)
    if damaged:
        result = run_plan(module, profile, [dict(t, present=t["name"] not in damaged) for t in tiers], from_config)
    return result


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    params = module.params
    gpus = params["gpus"]
    mig = [str(g.get("index")) for g in gpus if (g.get("mig_mode") or {}).get("current")]
    if mig:
        module.fail_json(msg="MIG is enabled on GPU(s) %s: budget whole GPUs only; disable MIG "
                             "(nvidia-smi -mig 0) or leave those GPUs out of O(gpus)" % ", ".join(mig),
                         status=BAD_INPUT)
    from_config, problems, warnings = engine_memory.config_settings(params["engine_config"], params["engine_version"])
    if params["block_size"] and from_config.get("block_size") not in (None, params["block_size"]):
        problems.append("block-size %s in engine_config and block_size %s disagree"
                        % (from_config["block_size"], params["block_size"]))
    if problems:
        module.fail_json(msg="engine_budget: engine_config: %s" % "; ".join(problems), status=BAD_INPUT)
    for warning in warnings:
        module.warn("engine_budget: engine_config: %s" % warning)
    tp = tensor_parallel_size(params)
    mtp_drafts = engine_memory.speculative_method(from_config) == engine_memory.MTP_METHOD
    inspected, tiers = inspect_tiers(params["tiers"], tp, params["model_config"],
                                     engine_memory.loads_mtp(from_config, params["load_mtp"]), mtp_drafts)
    overridden = [f for f in inspected if f["problem"] == "bad_override"]
    if overridden:
        module.fail_json(msg="engine_budget: model_config: %s" % overridden[0]["reason"], status=BAD_INPUT,
                         weight_dirs=inspected)
    profile = first_profile(inspected)
    damaged = [f for f in inspected if f["status"] == checkpoint.WEIGHT_LOADING]
    if profile is None and damaged:
        module.fail_json(msg="engine_budget: weight loading would fail: %s" % "; ".join(f["reason"] for f in damaged),
                         status=checkpoint.WEIGHT_LOADING, weight_dirs=inspected)
    if profile is None:
        module.fail_json(msg="engine_budget: no tier's weights_dir holds a readable checkpoint: %s"
                             % "; ".join("%s: %s" % (f["quantization"], f["reason"]) for f in inspected),
                         status=NO_CHECKPOINT, weight_dirs=inspected)
    if mtp_drafts and not profile.get("num_nextn_predict_layers"):
        module.fail_json(msg="engine_budget: engine_config: speculative-config method mtp, but the model has no MTP "
                             "layer (config.json num_nextn_predict_layers is 0): vLLM refuses it; draft another way "
                             "or leave speculative-config out", status=BAD_INPUT, weight_dirs=inspected,
                         model_profile=profile)
    try:
        result = plan_around_damage(module, profile, tiers, inspected, from_config)
    except budget.BudgetInputError as err:
        module.fail_json(msg="engine_budget: %s" % err, status=BAD_INPUT, weight_dirs=inspected, model_profile=profile)
    result.update(weight_dirs=inspected, model_profile=profile)
    unprofiled = engine_memory.encoder_unprofiled(profile, budget.state_settings(result["engine"], result))
    if unprofiled:
        module.warn("engine_budget: %s" % unprofiled)
    if not result["fits"] and params["fail_when_cannot_hold"]:
        module.fail_json(**dict(result, msg=result["reason"]))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
