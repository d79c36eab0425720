"""Serving profiles: pure data, reproducing the DGX Spark speculative-decoding playbook (the seed) and, on vLLM, the
recipes upstream publishes for the same models.

A profile names its engine (`engine`: engines/catalog.py; the same model is served under the same name by either), the
target model, the optional draft model (where it is mounted in the container comes
from `speculative_config`'s draft key), the TensorRT-LLM options (extra-llm-api-config.yml, in 1.2.0rc6's
names: llm_options.Schema.for_version renders them in the image version's names),
the trtllm-serve flags and the smoke request. A vLLM profile's `vllm_options` are vLLM's engine arguments in
snake_case (engines/vllm_contract.py; the draft's mount point is `speculative_config.model`), rendered as argv.
Inventory vars override the options through the engine's options var (`extra_llm_api_options`, `vllm_options`);
nothing else in a profile is host-specific.
"""

from __future__ import annotations

from typing import Any

GPT_OSS = "openai/gpt-oss-120b"
TRAIN_PROMPT = (
    "Solve the following problem step by step. If a train travels 180 km in 3 hours, and then slows "
    "down by 20% for the next 2 hours, what is the total distance traveled? Show all intermediate "
    "calculations and provide a final numeric answer."
)

# gpt-oss-120b's repo carries three copies of the weights; trtllm-serve reads only the root safetensors.
GPT_OSS_IGNORE = ["original/*", "metal/*"]

_GPT_OSS_COMMON: dict[str, Any] = {
    "enable_attention_dp": False,
    "disable_overlap_scheduler": False,
    "enable_autotuner": False,
    "cuda_graph_config": {"max_batch_size": 1},
}

PROFILES: dict[str, dict[str, Any]] = {
    "eagle3": {
        "engine": "trtllm",
        "description": "EAGLE-3: gpt-oss-120b with the EAGLE-3 long-context head",
        "target": {"repo": GPT_OSS, "ignore_patterns": GPT_OSS_IGNORE},
        "draft": {"repo": "nvidia/gpt-oss-120b-Eagle3-long-context", "ignore_patterns": []},
        "tiktoken": True,
        "serve_args": ["--backend", "pytorch", "--tp_size", "1", "--max_batch_size", "1"],
        "llm_api_options": {
            **_GPT_OSS_COMMON,
            "speculative_config": {
                "decoding_type": "Eagle",
                "max_draft_len": 5,
                "speculative_model_dir": "/opt/gpt-oss-120b-Eagle3/",
            },
            "kv_cache_config": {"free_gpu_memory_fraction": 0.9, "enable_block_reuse": False},
        },
        "smoke": {"prompt": TRAIN_PROMPT, "max_tokens": 300, "temperature": 0.7},
    },
    "draft_target": {
        "engine": "trtllm",
        "description": "Draft-Target: Llama-3.3-70B FP4 verified against Llama-3.1-8B FP4 drafts",
        "target": {"repo": "nvidia/Llama-3.3-70B-Instruct-FP4", "ignore_patterns": []},
        "draft": {"repo": "nvidia/Llama-3.1-8B-Instruct-FP4", "ignore_patterns": []},
        "tiktoken": False,
        "serve_args": [
            "--backend", "pytorch", "--tp_size", "1", "--max_batch_size", "1",
            "--kv_cache_free_gpu_memory_fraction", "0.9",
        ],
        "llm_api_options": {
            "print_iter_log": False,
            "disable_overlap_scheduler": True,
            "speculative_config": {
                "decoding_type": "DraftTarget",
                "max_draft_len": 4,
                "speculative_model_dir": "/opt/Llama-3.1-8B-Instruct-FP4/",
            },
            "kv_cache_config": {"enable_block_reuse": False},
        },
        "smoke": {"prompt": "Explain the benefits of speculative decoding:", "max_tokens": 150, "temperature": 0.7},
    },
    "baseline": {
        "engine": "trtllm",
        "description": "Baseline: the EAGLE-3 target (gpt-oss-120b) with no speculation, for comparisons",
        "target": {"repo": GPT_OSS, "ignore_patterns": GPT_OSS_IGNORE},
        "draft": None,
        "tiktoken": True,
        "serve_args": ["--backend", "pytorch", "--tp_size", "1", "--max_batch_size", "1"],
        "llm_api_options": {
            **_GPT_OSS_COMMON,
            "kv_cache_config": {"free_gpu_memory_fraction": 0.9, "enable_block_reuse": False},
        },
        "smoke": {"prompt": TRAIN_PROMPT, "max_tokens": 300, "temperature": 0.7},
    },
    # Prompt lookup: NGramDecodingConfig (the same target, no draft model). max_matching_ngram_size and the is_* flags
    # are 1.3's documented defaults (llm-api/reference/NGramDecodingConfig), written out because 1.2.0rc6 defaults the
    # size to 0; max_draft_len 4 is a GUESS to tune with `specfleet bench`. The overlap scheduler does not run with
    # NGram (trtllm-serve disables it with a warning): disabled here, so the log says nothing.
    "ngram": {
        "engine": "trtllm",
        "description": "N-gram (prompt lookup): gpt-oss-120b drafting from its own context, no draft model",
        "target": {"repo": GPT_OSS, "ignore_patterns": GPT_OSS_IGNORE},
        "draft": None,
        "tiktoken": True,
        "serve_args": ["--backend", "pytorch", "--tp_size", "1", "--max_batch_size", "1"],
        "llm_api_options": {
            **_GPT_OSS_COMMON,
            "disable_overlap_scheduler": True,
            "speculative_config": {
                "decoding_type": "NGram",
                "max_draft_len": 4,
                "max_matching_ngram_size": 2,
                "is_keep_all": True,
                "is_use_oldest": True,
                "is_public_pool": True,
            },
            "kv_cache_config": {"free_gpu_memory_fraction": 0.9, "enable_block_reuse": False},
        },
        "smoke": {"prompt": TRAIN_PROMPT, "max_tokens": 300, "temperature": 0.7},
    },
    # The playbook's "Run on Two Sparks" (nvidia/speculative-decoding, 2026-04-20): ../shared/reference/multi-spark.md.
    "qwen3_eagle3_pair": {
        "engine": "trtllm",
        "description": "EAGLE-3 on two Sparks (TP=2): Qwen3-235B-A22B FP4 with its EAGLE-3 head",
        "nodes": 2,  # served by the two hosts of a pair_* group as one server (pair/rules.py); absent: 1
        "min_trtllm": "1.3.0rc12",  # the playbook's image for it; an image of an older version is refused
        "target": {"repo": "nvidia/Qwen3-235B-A22B-FP4", "ignore_patterns": []},
        "draft": {"repo": "nvidia/Qwen3-235B-A22B-Eagle3", "ignore_patterns": []},
        "tiktoken": False,
        "serve_args": ["--backend", "pytorch", "--tp_size", "2", "--max_num_tokens", "1024"],
        "llm_api_options": {
            "enable_chunked_prefill": False,
            "cuda_graph_config": {"max_batch_size": 1},
            "speculative_config": {
                "decoding_type": "Eagle",
                "max_draft_len": 3,
                "speculative_model_dir": "/opt/Qwen3-235B-A22B-Eagle3/",
            },
            "kv_cache_config": {"free_gpu_memory_fraction": 0.9, "enable_block_reuse": False},
        },
        "smoke": {"prompt": "Explain the benefits of speculative decoding:", "max_tokens": 150, "temperature": 0.7},
    },
    # vLLM (engines/vllm_contract.py: the pinned vLLM's arguments, read from upstream with provenance). The served
    # model and its name are the TensorRT-LLM profiles' (the repo id, `vllm serve`'s default served name), so a gateway
    # lists one model over backends of both engines. --gpu-memory-utilization is not a profile's: it is rendered from
    # vllm_gpu_memory_utilization (engines/command.py).
    "vllm_eagle3": {
        "engine": "vllm",
        "description": "EAGLE-3 on vLLM: gpt-oss-120b with the EAGLE-3 head vLLM's recipe uses (7 tokens)",
        "target": {"repo": GPT_OSS, "ignore_patterns": GPT_OSS_IGNORE},
        # vllm-project/recipes, OpenAI/GPT-OSS (PR 449): nvidia/gpt-oss-120b-Eagle3-v3, num_speculative_tokens 7
        "draft": {"repo": "nvidia/gpt-oss-120b-Eagle3-v3", "ignore_patterns": []},
        "tiktoken": True,
        "vllm_options": {
            "speculative_config": {"method": "eagle3", "model": "/opt/gpt-oss-120b-Eagle3-v3/",
                                   "num_speculative_tokens": 7, "draft_tensor_parallel_size": 1},
        },
        "smoke": {"prompt": TRAIN_PROMPT, "max_tokens": 300, "temperature": 0.7},
    },
    # draft_target's pair on vLLM's draft_model method (vllm/config/speculative.py:61 at v0.20.1): same vocabulary
    # size (:936-951), the draft's NVFP4 detected from its own checkpoint, draft TP = target TP = 1. 4 tokens, as
    # draft_target drafts.
    "vllm_draft_target": {
        "engine": "vllm",
        "description": "Draft-Target on vLLM: Llama-3.3-70B FP4 verified against Llama-3.1-8B FP4 drafts",
        "target": {"repo": "nvidia/Llama-3.3-70B-Instruct-FP4", "ignore_patterns": []},
        "draft": {"repo": "nvidia/Llama-3.1-8B-Instruct-FP4", "ignore_patterns": []},
        "tiktoken": False,
        "vllm_options": {
            "speculative_config": {"method": "draft_model", "model": "/opt/Llama-3.1-8B-Instruct-FP4/",
                                   "num_speculative_tokens": 4},
        },
        "smoke": {"prompt": "Explain the benefits of speculative decoding:", "max_tokens": 150, "temperature": 0.7},
    },
    "vllm_ngram": {
        "engine": "vllm",
        "description": "N-gram (prompt lookup) on vLLM: gpt-oss-120b drafting from its own context",
        "target": {"repo": GPT_OSS, "ignore_patterns": GPT_OSS_IGNORE},
        "draft": None,
        "tiktoken": True,
        # vLLM's n-gram example (docs, features/speculative_decoding/n_gram): 5 tokens, prompt_lookup_max 4
        "vllm_options": {
            "speculative_config": {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4},
        },
        "smoke": {"prompt": TRAIN_PROMPT, "max_tokens": 300, "temperature": 0.7},
    },
    "vllm_baseline": {
        "engine": "vllm",
        "description": "Baseline on vLLM: gpt-oss-120b with no speculation, for comparisons",
        "target": {"repo": GPT_OSS, "ignore_patterns": GPT_OSS_IGNORE},
        "draft": None,
        "tiktoken": True,
        "vllm_options": {},
        "smoke": {"prompt": TRAIN_PROMPT, "max_tokens": 300, "temperature": 0.7},
    },
}


def nodes(profile: str | None) -> int:
    """How many Sparks serve `profile` as one server (2: a pair_* group's hosts); None (no profile): 1."""
    return PROFILES[profile].get("nodes", 1) if profile in PROFILES else 1
