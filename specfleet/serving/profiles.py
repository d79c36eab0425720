"""Serving profiles: pure data, reproducing the DGX Spark speculative-decoding playbook (the seed).

A profile names the target model, the optional draft model (where it is mounted in the container comes
from `speculative_config`'s draft key), the TensorRT-LLM options (extra-llm-api-config.yml, in 1.2.0rc6's
names: llm_options.Schema.for_version renders them in the image version's names),
the trtllm-serve flags and the smoke request. Inventory vars override the options through
`extra_llm_api_options`; nothing else in a profile is host-specific.
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
    # The playbook's "Run on Two Sparks" (nvidia/speculative-decoding, 2026-04-20): ../shared/reference/multi-spark.md.
    "qwen3_eagle3_pair": {
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
}


def nodes(profile: str | None) -> int:
    """How many Sparks serve `profile` as one server (2: a pair_* group's hosts); None (no profile): 1."""
    return PROFILES[profile].get("nodes", 1) if profile in PROFILES else 1
