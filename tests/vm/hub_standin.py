"""STAND-IN for the Hugging Face Hub -- used ONLY in tests. Not a Hub, not a mirror, not for production.

specfleet's CI runs on QEMU VMs without internet access (package registries only), so the real
``https://huggingface.co`` is replaced in tests by this small stdlib HTTP server. It serves a handful of
repositories under their REAL repo ids and REAL file layouts, but with tiny, synthetic, deterministic
content (weight shards of ~1-2 MiB, everything else a few hundred bytes). Nothing here is real model data.

It implements exactly the HTTP surface that huggingface_hub 2.4.0 (``HF_HUB_DISABLE_XET=1``) uses for
``HfApi.model_info/repo_info(files_metadata=True)``, ``HfApi.auth_check``, ``HfApi.list_repo_tree``,
``hf_hub_download`` / ``snapshot_download`` (HEAD + GET ``/resolve``, Range requests) and nothing more:

    GET  /api/models/{repo}[/revision/{rev}]     ?blobs=true  ?expand=...   model info
    GET  /api/models/{repo}/tree/{rev}[/{path}]  ?recursive=true ?expand=true  tree listing
    GET  /api/models/{repo}/auth-check[/write]                               access check
    HEAD /{repo}/resolve/{rev}/{path}                                        file metadata
    GET  /{repo}/resolve/{rev}/{path}            (Range: bytes=...)          file content
    POST /api/models/{repo}/paths-info/{rev}     form paths=...              entries of the named paths (olah asks)
    GET  /encodings/{o200k_base,cl100k_base}.tiktoken                        synthetic tiktoken files
    GET  /_standin/log   POST /_standin/reset   POST /_standin/throttle?bps=N  (test control)
    POST /_standin/fail?status=S&count=N[&paths=resolve|api|all]                (test control: Hub errors)

Simulated Hub failures (429 rate limit, 5xx outage): ``POST /_standin/fail?status=429&count=N&paths=resolve``
or ``HubStandin.fail_next(status, count, paths="resolve")`` makes the next N matching requests fail with that status
(a JSON error body; 429 also carries ``Retry-After: 1``); after them, normal service resumes. ``paths`` selects
which requests count: ``resolve`` (HEAD/GET ``/{repo}/resolve/...``, the default), ``api`` (``/api/...``) or
``all`` (every non-control request, including ``/encodings``). The failed requests are logged in ``requests()``
like any response (with 0 bytes in ``bytes_served()``). A new call replaces the pending rule; count 0 clears it.
``reset_log()`` does not clear it. ``pending_failures()`` tells how many are left.

No Xet headers are ever sent (no ``X-Xet-Hash``, no ``xet-auth`` link, no ``xetHash`` in trees), so the client
always uses plain HTTP. Errors carry the ``X-Error-Code`` / ``X-Error-Message`` headers that make
huggingface_hub raise RepositoryNotFoundError / RevisionNotFoundError / EntryNotFoundError / GatedRepoError.

Usage in tests::

    with HubStandin() as hub:                      # port 0 => ephemeral port
        snapshot_download("openai/gpt-oss-120b", revision=HubStandin.commit("openai/gpt-oss-120b"),
                          endpoint=hub.url, cache_dir=tmp)
        hub.bytes_served()

As a separate process (e.g. on the controller, reached from the lab's hosts at the controller's address)::

    python tests/vm/hub_standin.py --bind 0.0.0.0 --port 8999 [--token T ...] [--throttle-bps N]

This file is stdlib-only on purpose (it may run on hosts where only the system Python is available).
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import re
import signal
import sys
import threading
import time
import traceback
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, unquote, urlsplit

__all__ = [
    "HubStandin",
    "REPOS",
    "STANDIN_TOKEN",
    "STANDIN_TIKTOKEN_SHA256",
    "TIKTOKEN_FILES",
    "LFS_SUFFIXES",
]

STANDIN_TOKEN = "hf_standin_token"
LFS_SUFFIXES = (".safetensors", ".bin")  # what the stand-in's .gitattributes tracks with git-lfs

KiB = 1024
MiB = 1024 * KiB

# ---------------------------------------------------------------------------------------------------------------
# Repositories: real ids, real layouts, synthetic content.
#
# Each repo has a list of commits; each commit lists the files it adds or modifies ("add"). The files present at
# commit i are the union of all "add" lists up to i; the content of a file depends on (repo, path, version) where
# version is the index of the last commit that touched it -- so unchanged files keep identical bytes/etags.
# "weights" gives the payload size of each weight file (the safetensors header comes on top of it).
# ---------------------------------------------------------------------------------------------------------------

_GPT_OSS_ROOT = [
    ".gitattributes",
    "LICENSE",
    "README.md",
    "USAGE_POLICY",
    "chat_template.jinja",
    "config.json",
    "generation_config.json",
    "model-00000-of-00002.safetensors",
    "model-00001-of-00002.safetensors",
    "model.safetensors.index.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
]
_GPT_OSS_ORIGINAL = [
    "original/config.json",
    "original/dtypes.json",
    "original/model--00001-of-00002.safetensors",
    "original/model--00002-of-00002.safetensors",
]

REPOS: dict[str, dict] = {
    "openai/gpt-oss-120b": {
        "gated": False,
        "commits": [
            {
                "title": "Upload gpt-oss-120b (stand-in)",
                "date": "2025-08-05T16:48:12.000Z",
                "add": _GPT_OSS_ROOT + _GPT_OSS_ORIGINAL + ["metal/model.bin"],
            }
        ],
        "weights": {
            "model-00000-of-00002.safetensors": 1536 * KiB,
            "model-00001-of-00002.safetensors": 1280 * KiB,
            # original/ and metal/ are as large as the root weights: they are what the product skips.
            "original/model--00001-of-00002.safetensors": 1536 * KiB,
            "original/model--00002-of-00002.safetensors": 1280 * KiB,
            "metal/model.bin": (1536 + 1280 + 1) * KiB,  # >= the root shards incl. their headers
        },
    },
    "nvidia/gpt-oss-120b-Eagle3-long-context": {
        "gated": False,
        "commits": [
            {
                "title": "Upload Eagle3 draft model (stand-in)",
                "date": "2025-08-20T09:12:40.000Z",
                "add": ["README.md", "config.json", "model.safetensors"],
            },
            {
                "title": "Update long-context draft weights and config (stand-in)",
                "date": "2025-09-02T14:03:51.000Z",
                "add": ["config.json", "model.safetensors"],
            },
        ],
        "weights": {"model.safetensors": [1024 * KiB, 1152 * KiB]},  # per version
    },
    # vLLM's EAGLE-3 head for gpt-oss-120b (vllm-project/recipes, GPT-OSS): the vllm_eagle3 profile's draft
    "nvidia/gpt-oss-120b-Eagle3-v3": {
        "gated": False,
        "commits": [
            {
                "title": "Upload Eagle3 v3 draft model (stand-in)",
                "date": "2026-04-28T08:41:09.000Z",
                "add": ["README.md", "config.json", "model.safetensors"],
            },
        ],
        "weights": {"model.safetensors": 1088 * KiB},
    },
    "nvidia/Llama-3.3-70B-Instruct-FP4": {
        "gated": "auto",
        "commits": [
            {
                "title": "Upload NVFP4 checkpoint (stand-in)",
                "date": "2025-02-27T18:30:05.000Z",
                "add": [
                    ".gitattributes",
                    "LICENSE.txt",
                    "README.md",
                    "config.json",
                    "generation_config.json",
                    "hf_quant_config.json",
                    "model-00001-of-00002.safetensors",
                    "model-00002-of-00002.safetensors",
                    "model.safetensors.index.json",
                    "special_tokens_map.json",
                    "tokenizer.json",
                    "tokenizer_config.json",
                ],
            }
        ],
        "weights": {
            "model-00001-of-00002.safetensors": 1536 * KiB,
            "model-00002-of-00002.safetensors": 1024 * KiB,
        },
    },
    "nvidia/Llama-3.1-8B-Instruct-FP4": {
        "gated": False,
        "commits": [
            {
                "title": "Upload NVFP4 checkpoint (stand-in)",
                "date": "2025-03-11T11:20:44.000Z",
                "add": [
                    ".gitattributes",
                    "LICENSE.txt",
                    "README.md",
                    "config.json",
                    "generation_config.json",
                    "hf_quant_config.json",
                    "model.safetensors",
                    "special_tokens_map.json",
                    "tokenizer.json",
                    "tokenizer_config.json",
                ],
            }
        ],
        "weights": {"model.safetensors": 2048 * KiB},
    },
    # the two-Spark pair's: the playbook's "Run on Two Sparks" target and its EAGLE-3 head
    "nvidia/Qwen3-235B-A22B-FP4": {
        "gated": False,
        "commits": [
            {
                "title": "Upload NVFP4 checkpoint (stand-in)",
                "date": "2025-07-24T10:02:17.000Z",
                "add": [
                    ".gitattributes",
                    "README.md",
                    "config.json",
                    "generation_config.json",
                    "hf_quant_config.json",
                    "model-00001-of-00002.safetensors",
                    "model-00002-of-00002.safetensors",
                    "model.safetensors.index.json",
                    "tokenizer.json",
                    "tokenizer_config.json",
                ],
            }
        ],
        "weights": {
            "model-00001-of-00002.safetensors": 1024 * KiB,
            "model-00002-of-00002.safetensors": 768 * KiB,
        },
    },
    "nvidia/Qwen3-235B-A22B-Eagle3": {
        "gated": False,
        "commits": [
            {
                "title": "Upload Eagle3 draft model (stand-in)",
                "date": "2025-08-12T15:40:03.000Z",
                "add": ["README.md", "config.json", "model.safetensors"],
            }
        ],
        "weights": {"model.safetensors": 512 * KiB},
    },
}
# Note: the brief lists .gitattributes only for gpt-oss-120b, but real repos always have one; Llama repos get one
# too (it is a few hundred bytes). Eagle3 follows the brief exactly (3 files).


# ---------------------------------------------------------------------------------------------------------------
# Deterministic content generation
# ---------------------------------------------------------------------------------------------------------------


def _stream(seed: str, n: int) -> bytes:
    """n deterministic pseudo-random bytes derived from seed (SHAKE-256 stream)."""
    return hashlib.shake_256(seed.encode()).digest(n)


def _commit_sha(repo_id: str, index: int) -> str:
    return hashlib.sha1(f"hub-standin:{repo_id}:commit:{index}".encode()).hexdigest()


def _git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def _is_lfs(path: str) -> bool:
    return path.endswith(LFS_SUFFIXES)


def _json(obj) -> bytes:
    return (json.dumps(obj, indent=2) + "\n").encode()


def _tensor_names(repo_id: str, path: str) -> list[str]:
    """Two tensor names per weight file, distinct across the shards of a repo."""
    m = re.search(r"(\d{5})-of-\d{5}", path)
    k = int(m.group(1)) if m else 0  # shard number as written in the file name
    if repo_id.startswith("openai/"):
        if path.startswith("original/"):
            return [f"block.{k}.mlp.mlp1_weight.blocks", f"block.{k}.mlp.mlp2_weight.blocks"]
        return [f"model.layers.{k}.mlp.experts.gate_up_proj_blocks", f"model.layers.{k}.mlp.experts.down_proj_blocks"]
    if "Eagle3" in repo_id:
        return ["midlayer.mlp.gate_proj.weight", "midlayer.self_attn.q_proj.weight"]
    return [f"model.layers.{k}.mlp.down_proj.weight", f"model.layers.{k}.mlp.down_proj.weight_scale"]


def _safetensors(repo_id: str, path: str, version: int, payload: int) -> bytes:
    """A VALID safetensors file: u64 header length, JSON header (space-padded to 8), raw tensor bytes."""
    names = _tensor_names(repo_id, path)
    half = payload // 2
    header: dict = {"__metadata__": {"format": "pt", "standin": "synthetic"}}
    header[names[0]] = {"dtype": "U8", "shape": [half], "data_offsets": [0, half]}
    header[names[1]] = {"dtype": "U8", "shape": [payload - half], "data_offsets": [half, payload]}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    body = _stream(f"{repo_id}:{path}:v{version}", payload)
    return len(raw).to_bytes(8, "little") + raw + body


def _weight_payload(repo_id: str, path: str, version: int) -> int:
    w = REPOS[repo_id]["weights"][path]
    return w[version] if isinstance(w, list) else w


_CONFIGS = {
    "openai/gpt-oss-120b": {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "hidden_size": 2880,
        "num_hidden_layers": 36,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "intermediate_size": 2880,
        "num_local_experts": 128,
        "num_experts_per_tok": 4,
        "vocab_size": 201088,
        "max_position_embeddings": 131072,
        "rope_theta": 150000,
        "sliding_window": 128,
        "torch_dtype": "bfloat16",
        "quantization_config": {
            "quant_method": "mxfp4",
            "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                       "model.embed_tokens", "lm_head"],
        },
        "eos_token_id": 200002,
        "pad_token_id": 199999,
        "transformers_version": "4.55.0.dev0",
    },
    "nvidia/gpt-oss-120b-Eagle3-long-context": {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": 2880,
        "num_hidden_layers": 1,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "intermediate_size": 17280,
        "vocab_size": 201088,
        "draft_vocab_size": 201088,
        "max_position_embeddings": 131072,
        "rope_theta": 150000,
        "torch_dtype": "bfloat16",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 17, 32], "use_aux_hidden_state": True},
        "transformers_version": "4.55.0",
    },
    "nvidia/Llama-3.3-70B-Instruct-FP4": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 8192,
        "num_hidden_layers": 80,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "intermediate_size": 28672,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "torch_dtype": "bfloat16",
        "bos_token_id": 128000,
        "eos_token_id": [128001, 128008, 128009],
        "transformers_version": "4.48.3",
    },
    "nvidia/Llama-3.1-8B-Instruct-FP4": {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "rope_theta": 500000.0,
        "torch_dtype": "bfloat16",
        "bos_token_id": 128000,
        "eos_token_id": [128001, 128008, 128009],
        "transformers_version": "4.48.3",
    },
    "nvidia/Qwen3-235B-A22B-FP4": {
        "architectures": ["Qwen3MoeForCausalLM"],
        "model_type": "qwen3_moe",
        "hidden_size": 4096,
        "num_hidden_layers": 94,
        "num_attention_heads": 64,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "moe_intermediate_size": 1536,
        "num_experts": 128,
        "num_experts_per_tok": 8,
        "vocab_size": 151936,
        "max_position_embeddings": 40960,
        "rope_theta": 1000000.0,
        "torch_dtype": "bfloat16",
        "bos_token_id": 151643,
        "eos_token_id": 151645,
        "transformers_version": "4.51.0",
    },
    "nvidia/Qwen3-235B-A22B-Eagle3": {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": 4096,
        "num_hidden_layers": 1,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 24576,
        "vocab_size": 151936,
        "draft_vocab_size": 32000,
        "max_position_embeddings": 40960,
        "rope_theta": 1000000.0,
        "torch_dtype": "bfloat16",
        "transformers_version": "4.51.0",
    },
}
# vLLM's EAGLE-3 head for gpt-oss-120b: the long-context head's shape under vLLM's architecture name
_CONFIGS["nvidia/gpt-oss-120b-Eagle3-v3"] = {**_CONFIGS["nvidia/gpt-oss-120b-Eagle3-long-context"],
                                             "architectures": ["Eagle3LlamaForCausalLM"], "transformers_version": "4.57.0"}

_LICENSE_TEXT = (
    "STAND-IN LICENSE FILE (synthetic test fixture, not the real license text).\n\n"
    "This file stands in for the license of {repo} in specfleet's offline test Hub.\n"
    "The real license is available at https://huggingface.co/{repo}.\n"
)

_GITATTRIBUTES = (
    "*.7z filter=lfs diff=lfs merge=lfs -text\n"
    "*.bin filter=lfs diff=lfs merge=lfs -text\n"
    "*.h5 filter=lfs diff=lfs merge=lfs -text\n"
    "*.msgpack filter=lfs diff=lfs merge=lfs -text\n"
    "*.onnx filter=lfs diff=lfs merge=lfs -text\n"
    "*.pt filter=lfs diff=lfs merge=lfs -text\n"
    "*.pth filter=lfs diff=lfs merge=lfs -text\n"
    "*.safetensors filter=lfs diff=lfs merge=lfs -text\n"
    "*.tar.gz filter=lfs diff=lfs merge=lfs -text\n"
    "*.zip filter=lfs diff=lfs merge=lfs -text\n"
)


def _render(repo_id: str, path: str, version: int) -> bytes:
    """Bytes of `path` in `repo_id` at file version `version` (deterministic)."""
    name = path.rsplit("/", 1)[-1]
    if path in REPOS[repo_id].get("weights", {}):
        payload = _weight_payload(repo_id, path, version)
        if name.endswith(".safetensors"):
            return _safetensors(repo_id, path, version, payload)
        return _stream(f"{repo_id}:{path}:v{version}", payload)  # metal/model.bin: opaque blob
    render = _RENDER_BY_PATH.get(path) or _RENDER_BY_NAME.get(name)
    if render is None:
        raise KeyError(f"no renderer for {repo_id}:{path}")
    return render(repo_id, version)


def _render_index(repo_id: str, version: int) -> bytes:
    files = _files_at(repo_id, version)  # a file's version is the index of the commit that last wrote it
    weight_map, total = {}, 0
    for shard in sorted(p for p in files if p.endswith(".safetensors") and "/" not in p):
        payload = _weight_payload(repo_id, shard, files[shard])
        total += payload
        for t in _tensor_names(repo_id, shard):
            weight_map[t] = shard
    return _json({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))})


def _render_original_config(repo_id: str, version: int) -> bytes:
    return _json({"num_hidden_layers": 36, "num_experts": 128, "experts_per_token": 4, "vocab_size": 201088,
                  "hidden_size": 2880, "intermediate_size": 2880, "head_dim": 64, "num_attention_heads": 64,
                  "num_key_value_heads": 8, "sliding_window": 128, "rope_theta": 150000})


def _render_original_dtypes(repo_id: str, version: int) -> bytes:
    return _json({"block.0.mlp.mlp1_weight.blocks": "FP4", "block.0.mlp.mlp2_weight.blocks": "FP4",
                  "block.1.mlp.mlp1_weight.blocks": "FP4", "block.1.mlp.mlp2_weight.blocks": "FP4",
                  "embedding.weight": "BF16", "unembedding.weight": "BF16"})


def _render_config(repo_id: str, version: int) -> bytes:
    cfg = dict(_CONFIGS[repo_id])
    if "Eagle3" in repo_id and version == 0:
        cfg["max_position_embeddings"] = 32768  # older commit: shorter context
    return _json(cfg)


def _render_generation_config(repo_id: str, version: int) -> bytes:
    if repo_id.startswith("openai/"):
        return _json({"bos_token_id": 199998, "do_sample": True, "eos_token_id": [200002, 199999, 200012],
                      "pad_token_id": 199999, "transformers_version": "4.55.0.dev0"})
    return _json({"bos_token_id": 128000, "do_sample": True, "eos_token_id": [128001, 128008, 128009],
                  "temperature": 0.6, "top_p": 0.9, "transformers_version": "4.48.3"})


def _render_hf_quant_config(repo_id: str, version: int) -> bytes:
    return _json({"producer": {"name": "modelopt", "version": "0.23.0"},
                  "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8", "group_size": 16,
                                   "exclude_modules": ["lm_head"]}})


def _render_tokenizer(repo_id: str, version: int) -> bytes:
    specials = ["<|startoftext|>", "<|endoftext|>", "<|return|>"] if repo_id.startswith("openai/") else \
        ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"]
    vocab = {chr(c): c - 32 for c in range(32, 127)}
    return _json({"version": "1.0", "truncation": None, "padding": None,
                  "added_tokens": [{"id": 1000 + i, "content": s, "special": True} for i, s in enumerate(specials)],
                  "normalizer": None, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False},
                  "decoder": {"type": "ByteLevel"},
                  "model": {"type": "BPE", "vocab": vocab, "merges": []}})


def _render_tokenizer_config(repo_id: str, version: int) -> bytes:
    if repo_id.startswith("openai/"):
        return _json({"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>",
                      "model_max_length": 1000000000000000019884624838656,
                      "tokenizer_class": "PreTrainedTokenizerFast"})
    return _json({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "model_max_length": 131072,
                  "tokenizer_class": "PreTrainedTokenizerFast",
                  "chat_template": "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}"
                                   "<|end_header_id|>\n\n{{ m['content'] }}<|eot_id|>{% endfor %}"})


def _render_special_tokens_map(repo_id: str, version: int) -> bytes:
    if repo_id.startswith("openai/"):
        return _json({"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>"})
    return _json({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"})


def _render_chat_template(repo_id: str, version: int) -> bytes:
    return (b"{#- stand-in harmony chat template (synthetic) -#}\n"
            b"{%- for message in messages -%}\n"
            b"<|start|>{{ message.role }}<|message|>{{ message.content }}<|end|>\n"
            b"{%- endfor -%}\n"
            b"{%- if add_generation_prompt -%}<|start|>assistant{%- endif -%}\n")


def _render_gitattributes(repo_id: str, version: int) -> bytes:
    return _GITATTRIBUTES.encode()


def _render_license(repo_id: str, version: int) -> bytes:
    return _LICENSE_TEXT.format(repo=repo_id).encode()


def _render_usage_policy(repo_id: str, version: int) -> bytes:
    return (f"STAND-IN USAGE POLICY (synthetic). See https://huggingface.co/{repo_id} for the real one.\n"
            "We aim for our tools to be used safely, responsibly, and democratically.\n").encode()


def _render_readme(repo_id: str, version: int) -> bytes:
    repo_name = repo_id.split("/", 1)[1]
    front = ["---", "license: other" if REPOS[repo_id]["gated"] else "license: apache-2.0",
             "library_name: transformers", "pipeline_tag: text-generation", "tags:", "- standin"]
    if REPOS[repo_id]["gated"]:
        front += ["extra_gated_prompt: You agree to the license terms (stand-in).",
                  "extra_gated_button_content: Submit"]
    front.append("---")
    text = "\n".join(front) + (
        f"\n\n# {repo_name} (test stand-in)\n\n"
        "This repository content is SYNTHETIC. It is served by specfleet's Hugging Face Hub stand-in\n"
        "for offline tests; weights are random bytes with a valid safetensors header.\n"
    )
    return text.encode()


#: The renderers of the files that are not weights: by path in the repo first, then by file name.
_RENDER_BY_PATH = {
    "original/config.json": _render_original_config,
    "original/dtypes.json": _render_original_dtypes,
}
_RENDER_BY_NAME = {
    "model.safetensors.index.json": _render_index,
    "config.json": _render_config,
    "generation_config.json": _render_generation_config,
    "hf_quant_config.json": _render_hf_quant_config,
    "tokenizer.json": _render_tokenizer,
    "tokenizer_config.json": _render_tokenizer_config,
    "special_tokens_map.json": _render_special_tokens_map,
    "chat_template.jinja": _render_chat_template,
    ".gitattributes": _render_gitattributes,
    "LICENSE": _render_license,
    "LICENSE.txt": _render_license,
    "USAGE_POLICY": _render_usage_policy,
    "README.md": _render_readme,
}


# --- commit/file bookkeeping -----------------------------------------------------------------------------------

_CACHE_LOCK = threading.Lock()
_CONTENT_CACHE: dict[tuple[str, str, int], bytes] = {}
_META_CACHE: dict[tuple[str, str, int], dict] = {}


def _files_at(repo_id: str, index: int) -> dict[str, int]:
    """{path: version} of the files present at commit `index`."""
    commits = REPOS[repo_id]["commits"]
    files: dict[str, int] = {}
    for i, c in enumerate(commits[: index + 1]):
        for p in c["add"]:
            files[p] = i
    return dict(sorted(files.items()))


def _content(repo_id: str, path: str, version: int) -> bytes:
    key = (repo_id, path, version)
    with _CACHE_LOCK:
        data = _CONTENT_CACHE.get(key)
    if data is None:
        data = _render(repo_id, path, version)
        with _CACHE_LOCK:
            _CONTENT_CACHE[key] = data
    return data


def _meta(repo_id: str, path: str, version: int) -> dict:
    """size, blob_id (git oid of what git stores: pointer for LFS), etag, lfs {sha256,size,pointer_size}."""
    key = (repo_id, path, version)
    with _CACHE_LOCK:
        m = _META_CACHE.get(key)
    if m is not None:
        return m
    data = _content(repo_id, path, version)
    if _is_lfs(path):
        sha256 = hashlib.sha256(data).hexdigest()
        pointer = _lfs_pointer(sha256, len(data))
        m = {"size": len(data), "blob_id": _git_blob_sha1(pointer), "etag": sha256,
             "lfs": {"sha256": sha256, "size": len(data), "pointer_size": len(pointer)}}
    else:
        oid = _git_blob_sha1(data)
        m = {"size": len(data), "blob_id": oid, "etag": oid, "lfs": None}
    with _CACHE_LOCK:
        _META_CACHE[key] = m
    return m


def _resolve_revision(repo_id: str, revision: str | None) -> int | None:
    """Commit index for a revision: 'main' (or None) -> last commit; a full 40-hex commit sha -> that commit."""
    commits = REPOS[repo_id]["commits"]
    if revision in (None, "", "main"):
        return len(commits) - 1
    for i in range(len(commits)):
        if _commit_sha(repo_id, i) == revision:
            return i
    return None


def _commit_index_arg(repo_id: str, commit) -> int:
    if repo_id not in REPOS:
        raise KeyError(f"unknown stand-in repo {repo_id!r}; known: {sorted(REPOS)}")
    if commit is None:
        return len(REPOS[repo_id]["commits"]) - 1
    if isinstance(commit, int):
        return range(len(REPOS[repo_id]["commits"]))[commit]
    idx = _resolve_revision(repo_id, commit)
    if idx is None:
        raise KeyError(f"unknown revision {commit!r} for {repo_id}")
    return idx


def _tree_file_entry(repo_id: str, path: str, version: int, expand: bool) -> dict:
    """A file's entry in a tree listing (with its last commit and scan status when expanded)."""
    m = _meta(repo_id, path, version)
    e = {"type": "file", "oid": m["blob_id"], "size": m["size"], "path": path}
    if m["lfs"]:
        e["lfs"] = {"oid": m["lfs"]["sha256"], "size": m["lfs"]["size"], "pointerSize": m["lfs"]["pointer_size"]}
    if expand:
        c = REPOS[repo_id]["commits"][version]
        e["lastCommit"] = {"id": _commit_sha(repo_id, version), "title": c["title"], "date": c["date"]}
        e["securityFileStatus"] = {"status": "safe", "avScan": {"virusFound": False, "virusNames": None},
                                   "pickleImportScan": None}
    return e


# ---------------------------------------------------------------------------------------------------------------
# Synthetic tiktoken files (real line format "base64(token_bytes) rank")
# ---------------------------------------------------------------------------------------------------------------


def _tiktoken(name: str, n_tokens: int) -> bytes:
    tokens: list[bytes] = [bytes([b]) for b in range(256)]
    seen = set(tokens)
    i = 0
    while len(tokens) < n_tokens:
        raw = _stream(f"tiktoken:{name}:{i}", 8)
        tok = raw[1 : 2 + raw[0] % 5]  # 1..5 bytes
        i += 1
        if len(tok) >= 2 and tok not in seen:
            seen.add(tok)
            tokens.append(tok)
    return b"".join(base64.b64encode(t) + b" %d\n" % rank for rank, t in enumerate(tokens))


TIKTOKEN_FILES: dict[str, bytes] = {
    "o200k_base.tiktoken": _tiktoken("o200k_base", 640),
    "cl100k_base.tiktoken": _tiktoken("cl100k_base", 512),
}
STANDIN_TIKTOKEN_SHA256: dict[str, str] = {k: hashlib.sha256(v).hexdigest() for k, v in TIKTOKEN_FILES.items()}


# ---------------------------------------------------------------------------------------------------------------
# HTTP server
# ---------------------------------------------------------------------------------------------------------------


class _HubError(Exception):
    def __init__(self, status: int, code: str | None, message: str, extra_headers: dict | None = None):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.extra_headers = extra_headers or {}


def _content_type(path: str) -> str:
    if path.endswith(".json"):
        return "application/json; charset=utf-8"
    if path.endswith((".safetensors", ".bin", ".tiktoken")):
        return "application/octet-stream"
    return "text/plain; charset=utf-8"


def _parse_range(header: str | None, total: int) -> tuple[int, int] | None | str:
    """(start, end_inclusive), None (no/ignored range), or 'unsatisfiable'."""
    if not header or not header.strip().lower().startswith("bytes="):
        return None
    spec = header.strip()[6:]
    if "," in spec:
        return None  # multi-range: not supported, serve the whole file (allowed by RFC 9110)
    first, _, last = spec.strip().partition("-")
    try:
        if first == "":
            n = int(last)
            if n <= 0:
                return "unsatisfiable"
            start, end = max(total - n, 0), total - 1
        else:
            start = int(first)
            end = int(last) if last else total - 1
            end = min(end, total - 1)
            if start > end:
                return "unsatisfiable" if start >= total else None
    except ValueError:
        return None
    if start >= total:
        return "unsatisfiable"
    return start, end


_FAIL_MESSAGES = {
    429: "You have been rate-limited; you can retry this action in about 1 second (simulated by the Hub stand-in).",
    500: "Internal Error - We're working hard to fix this as soon as possible! (simulated by the Hub stand-in)",
    502: "Bad Gateway (simulated by the Hub stand-in)",
    503: "Service Unavailable (simulated by the Hub stand-in)",
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "HubStandin/1.0"
    sys_version = ""
    timeout = 120  # idle keep-alive connections are dropped after this

    # quiet the default logger (it would print the request line); HubStandin logs itself
    def log_message(self, format, *args):  # noqa: A002
        pass

    def do_GET(self):
        self._dispatch("GET")

    def do_HEAD(self):
        self._dispatch("HEAD")

    def do_POST(self):
        self._dispatch("POST")

    # -- plumbing ------------------------------------------------------------------------------------------------

    @property
    def hub(self) -> HubStandin:
        return self.server.standin  # type: ignore[attr-defined]

    def _endpoint(self) -> str:
        host = self.headers.get("Host") or f"{self.hub.bind}:{self.hub.port}"
        return f"http://{host}"

    def _token(self) -> str | None:
        auth = self.headers.get("Authorization") or ""
        if auth.lower().startswith("bearer "):
            return auth[7:].strip() or None
        return None

    def _dispatch(self, method: str) -> None:
        self._started = False
        split = urlsplit(self.path)
        self._log_path = unquote(split.path)
        self._method = method
        length = int(self.headers.get("Content-Length") or 0)
        self._body = self.rfile.read(length) if length else b""  # read it all: keeps the keep-alive stream in sync
        query = parse_qs(split.query, keep_blank_values=True)
        try:
            if split.path.startswith("/_standin/"):
                return self._control(method, split.path, query)
            failure = self.hub._take_failure(self._log_path)
            if failure is not None:
                raise _HubError(failure, None, _FAIL_MESSAGES.get(failure, f"Simulated Hub error {failure} (stand-in)"),
                                {"Retry-After": str(self.hub._retry_after)} if failure == 429 else None)
            if method == "POST" and self._paths_info_post(split.path):
                return
            if method == "POST":
                raise _HubError(405, None, "Method not allowed on the Hub stand-in")
            segs = split.path.lstrip("/").split("/")
            if segs[:2] == ["api", "models"]:
                return self._api(method, segs[2:], query)
            if segs[0] == "api":
                raise _HubError(404, None, f"Not implemented by the Hub stand-in: {self._log_path}")
            if segs[0] == "encodings" and len(segs) == 2:
                return self._tiktoken(method, unquote(segs[1]))
            if "resolve" in segs[1:]:
                return self._resolve(method, segs)
            raise _HubError(404, None, f"Not found on the Hub stand-in: {self._log_path}")
        except _HubError as e:
            self._send_error(e)
        except Exception as e:  # a bug in the stand-in: answer 500 (not a dropped connection) and say why
            traceback.print_exc(file=sys.stderr)
            if not self._started:
                self._send_error(_HubError(500, None, f"Hub stand-in internal error: {e!r}"))
            else:
                self.close_connection = True

    def _send_error(self, e: _HubError) -> None:
        headers = {"Content-Type": "application/json; charset=utf-8", **e.extra_headers}
        if e.code:
            headers["X-Error-Code"] = e.code
        headers["X-Error-Message"] = e.message
        self._send(e.status, _json({"error": e.message}), headers)

    def _send(self, status: int, body: bytes, headers: dict) -> None:
        """Send headers, then the body (unless HEAD), throttled, counting bytes actually written.

        The request is logged *before* anything is sent, and bytes are counted before each chunk is written (and
        un-counted if the write fails), so a client that has received data always finds it in the log."""
        self.hub._begin(self._method, self._log_path, status)
        written = 0
        try:
            self._send_inner(status, body, headers)
            written = self._partial
        except (BrokenPipeError, ConnectionResetError, ConnectionAbortedError, TimeoutError, OSError):
            self.close_connection = True
            written = self._partial
        finally:
            self.hub._end(self._method, self._log_path, status, written)

    def _send_inner(self, status: int, body: bytes, headers: dict) -> None:
        self._partial = 0
        self._started = True
        self.send_response_only(status)
        self.send_header("Date", self.date_time_string())
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if self._method != "HEAD":
            self._write_body(body, count=200 <= status < 300)

    def _write_body(self, body: bytes, count: bool) -> None:
        view = memoryview(body)
        total = len(body)
        while self._partial < total:
            if self.hub._stopping.is_set():
                self.close_connection = True
                raise ConnectionAbortedError("stand-in stopping")
            bps = self.hub._throttle_bps
            chunk = 256 * KiB if not bps else max(1 * KiB, min(64 * KiB, bps // 20))
            part = view[self._partial : self._partial + chunk]
            if count:  # bytes_served() = content delivered: bodies of 2xx responses only (not error JSON)
                self.hub._count(self._log_path, len(part))
            try:
                self.wfile.write(part)
            except BaseException:
                if count:
                    self.hub._count(self._log_path, -len(part))
                raise
            self._partial += len(part)
            if bps:
                time.sleep(len(part) / bps)

    _partial = 0

    # -- /_standin control ---------------------------------------------------------------------------------------

    def _control(self, method: str, path: str, query: dict) -> None:
        def ok(obj) -> None:
            self._send(200, _json(obj), {"Content-Type": "application/json"})

        if path == "/_standin/log" and method in ("GET", "HEAD"):
            return ok(self.hub._log_snapshot())
        if path == "/_standin/reset" and method == "POST":
            self.hub.reset_log()
            return ok({"ok": True})
        if path == "/_standin/fail" and method == "POST":
            try:
                status = int((query.get("status") or [""])[0])
                count = int((query.get("count") or ["1"])[0])
                self.hub.fail_next(status, count, (query.get("paths") or ["resolve"])[0])
            except ValueError as e:
                raise _HubError(400, None, f"fail: {e} (status=400..599, count>=0, paths=resolve|api|all)") from None
            return ok({"ok": True, "pending": self.hub.pending_failures()})
        if path == "/_standin/throttle" and method == "POST":
            try:
                bps = int((query.get("bps") or ["0"])[0])
            except ValueError:
                raise _HubError(400, None, "bps must be an integer (0 = off)") from None
            self.hub.set_throttle(bps or None)
            return ok({"ok": True, "throttle_bps": self.hub._throttle_bps})
        raise _HubError(404, None, f"unknown stand-in control endpoint {method} {path}")

    # -- auth ----------------------------------------------------------------------------------------------------

    def _check_access(self, repo_id: str) -> None:
        """Raise the Hub's GatedRepo error shape if repo is gated and no accepted token was sent."""
        if not REPOS[repo_id]["gated"]:
            return
        token = self._token()
        if token is not None and token in self.hub.tokens:
            return
        page = f"{self._endpoint()}/{repo_id}"
        if token is None:
            raise _HubError(401, "GatedRepo",
                            f"Access to model {repo_id} is restricted. You must have access to it and be "
                            f"authenticated to access it. Please log in. Visit {page} to ask for access.")
        raise _HubError(403, "GatedRepo",
                        f"Access to model {repo_id} is restricted and you are not in the authorized list. "
                        f"Visit {page} to ask for access.")

    # -- /api/models ---------------------------------------------------------------------------------------------

    _ACTIONS = ("revision", "tree", "auth-check", "paths-info", "refs", "commits")

    def _split_repo(self, segs: list[str]) -> tuple[str, list[str]]:
        if not segs or not segs[0]:
            raise _HubError(404, None, "Not implemented by the Hub stand-in: model listing")
        if len(segs) >= 2 and segs[1] not in self._ACTIONS:
            repo_id, rest = f"{unquote(segs[0])}/{unquote(segs[1])}", segs[2:]
        else:
            repo_id, rest = unquote(segs[0]), segs[1:]
        if repo_id not in REPOS:
            raise _HubError(404, "RepoNotFound", "Repository not found")
        return repo_id, rest

    def _revision_or_404(self, repo_id: str, revision: str) -> int:
        idx = _resolve_revision(repo_id, revision)
        if idx is None:
            raise _HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return idx

    def _api(self, method: str, segs: list[str], query: dict) -> None:
        repo_id, rest = self._split_repo(segs)
        if not rest or rest[0] == "revision":
            revision = unquote(rest[1]) if len(rest) >= 2 else "main"
            if len(rest) > 2:
                raise _HubError(404, None, f"Not implemented by the Hub stand-in: {self._log_path}")
            idx = self._revision_or_404(repo_id, revision)
            return self._send_json(self._model_info(repo_id, idx, query))
        if rest[0] == "tree":
            if len(rest) < 2:
                raise _HubError(404, None, "missing revision")
            idx = self._revision_or_404(repo_id, unquote(rest[1]))
            sub = unquote("/".join(rest[2:])).strip("/")
            return self._send_json(self._tree(repo_id, idx, sub, query))
        if rest[0] == "auth-check":
            if rest[1:] == ["write"]:
                self._check_access(repo_id)
                raise _HubError(403, None, "You don't have write access to this repository (Hub stand-in).")
            if rest[1:]:
                raise _HubError(404, None, f"Not implemented by the Hub stand-in: {self._log_path}")
            self._check_access(repo_id)
            return self._send_json({"ok": True, "repoId": repo_id})
        raise _HubError(404, None, f"Not implemented by the Hub stand-in: {self._log_path}")

    def _send_json(self, obj) -> None:
        self._send(200, _json(obj), {"Content-Type": "application/json; charset=utf-8"})

    @staticmethod
    def _truthy(query: dict, key: str) -> bool:
        return (query.get(key) or ["false"])[-1].lower() in ("1", "true", "yes")

    def _model_info(self, repo_id: str, idx: int, query: dict) -> dict:
        repo = REPOS[repo_id]
        commit = repo["commits"][idx]
        files = _files_at(repo_id, idx)
        blobs = self._truthy(query, "blobs")
        siblings = []
        for path, version in files.items():
            s: dict = {"rfilename": path}
            if blobs:
                m = _meta(repo_id, path, version)
                s.update(blobId=m["blob_id"], size=m["size"])
                if m["lfs"]:
                    s["lfs"] = {"sha256": m["lfs"]["sha256"], "size": m["lfs"]["size"],
                                "pointerSize": m["lfs"]["pointer_size"]}
            siblings.append(s)
        cfg = _CONFIGS[repo_id]
        used = sum(_meta(repo_id, p, v)["size"] for p, v in _all_blobs(repo_id))
        info = {
            "_id": hashlib.sha1(f"hub-standin:{repo_id}:id".encode()).hexdigest()[:24],
            "id": repo_id,
            "modelId": repo_id,
            "author": repo_id.split("/")[0],
            "sha": _commit_sha(repo_id, idx),
            "lastModified": commit["date"],
            "createdAt": repo["commits"][0]["date"],
            "private": False,
            "disabled": False,
            "gated": repo["gated"],
            "downloads": 0,
            "likes": 0,
            "library_name": "transformers",
            "pipeline_tag": "text-generation",
            "tags": ["transformers", "safetensors", cfg["model_type"], "text-generation", "standin"],
            "config": {"architectures": cfg["architectures"], "model_type": cfg["model_type"]},
            "cardData": {"license": "other" if repo["gated"] else "apache-2.0", "library_name": "transformers",
                         "pipeline_tag": "text-generation"},
            "siblings": siblings,
            "spaces": [],
            "usedStorage": used,
        }
        expand = query.get("expand") or query.get("expand[]")
        if expand:
            keep = {"_id", "id", *expand}
            info = {k: v for k, v in info.items() if k in keep}
        return info

    def _tree(self, repo_id: str, idx: int, sub: str, query: dict) -> list:
        recursive = self._truthy(query, "recursive")
        expand = self._truthy(query, "expand")
        files = _files_at(repo_id, idx)
        commit = REPOS[repo_id]["commits"][idx]
        dirs = sorted({p.rsplit("/", 1)[0] for p in files if "/" in p})
        # also intermediate dirs (a/b/c -> a, a/b)
        all_dirs = sorted({"/".join(d.split("/")[: i + 1]) for d in dirs for i in range(d.count("/") + 1)})
        prefix = f"{sub}/" if sub else ""
        if sub and sub not in all_dirs:
            if sub in files:
                prefix = None  # tree of a file: the Hub returns the file entry itself
            else:
                raise _HubError(404, "EntryNotFound", f"{sub} does not exist on \"{_commit_sha(repo_id, idx)}\"",
                                {"X-Repo-Commit": _commit_sha(repo_id, idx)})

        def wanted(path: str) -> bool:
            if prefix is None:
                return path == sub
            if not path.startswith(prefix):
                return False
            return recursive or "/" not in path[len(prefix):]

        last_commit = {"id": _commit_sha(repo_id, idx), "title": commit["title"], "date": commit["date"]}
        out = []
        for d in all_dirs:
            if wanted(d):
                e = {"type": "directory", "oid": hashlib.sha1(f"tree:{repo_id}:{idx}:{d}".encode()).hexdigest(),
                     "size": 0, "path": d}
                if expand:
                    e["lastCommit"] = last_commit
                out.append(e)
        out += [_tree_file_entry(repo_id, path, version, expand) for path, version in files.items() if wanted(path)]
        # directories first then files, each sorted by path (what the Hub does)
        return out

    # -- POST /api/models/{repo}/paths-info/{rev} (form: paths=a&paths=b[&expand=true]) -------------------------
    # What Hub mirrors (olah) ask before proxying a file: the entries of the named paths, as the tree lists them.

    def _paths_info_post(self, path: str) -> bool:
        segs = path.lstrip("/").split("/")
        if segs[:2] != ["api", "models"] or "paths-info" not in segs[3:5]:
            return False
        repo_id, rest = self._split_repo(segs[2:])
        if rest[:1] != ["paths-info"] or len(rest) != 2:
            return False
        idx = self._revision_or_404(repo_id, unquote(rest[1]))
        self._check_access(repo_id)
        form = parse_qs(self._body.decode("utf-8", "replace"), keep_blank_values=True)
        wanted = {p.strip("/") for p in form.get("paths", []) + form.get("paths[]", [])}
        entries = [e for e in self._tree(repo_id, idx, "", {"recursive": ["true"], "expand": form.get("expand", ["false"])})
                   if e["path"] in wanted]
        self._send_json(entries)
        return True

    # -- /{repo}/resolve/{rev}/{path} ----------------------------------------------------------------------------

    def _resolve(self, method: str, segs: list[str]) -> None:
        i = segs.index("resolve", 1)
        repo_id = "/".join(unquote(s) for s in segs[:i])
        if repo_id.split("/")[0] in ("datasets", "spaces", "kernels") or repo_id not in REPOS:
            raise _HubError(404, "RepoNotFound", "Repository not found")
        if len(segs) < i + 3 or not segs[i + 2]:
            raise _HubError(404, "EntryNotFound", "Entry not found")
        revision = unquote(segs[i + 1])
        path = unquote("/".join(segs[i + 2 :]))
        idx = self._revision_or_404(repo_id, revision)
        sha = _commit_sha(repo_id, idx)
        self._check_access(repo_id)
        files = _files_at(repo_id, idx)
        if path not in files:
            raise _HubError(404, "EntryNotFound", "Entry not found", {"X-Repo-Commit": sha})
        version = files[path]
        data = _content(repo_id, path, version)
        m = _meta(repo_id, path, version)
        name = path.rsplit("/", 1)[-1]
        headers = {
            "Content-Type": _content_type(path),
            "Accept-Ranges": "bytes",
            "ETag": f'"{m["etag"]}"',
            "X-Repo-Commit": sha,
            "Content-Disposition": f"inline; filename*=UTF-8''{quote(name)}; filename=\"{name}\";",
            "Cache-Control": "public, max-age=31536000, immutable" if revision == sha else "no-cache",
        }
        if m["lfs"]:
            headers["X-Linked-Etag"] = f'"{m["lfs"]["sha256"]}"'
            headers["X-Linked-Size"] = str(m["lfs"]["size"])
        self.hub._wait_if_held(method, self._log_path)
        self._send_ranged(data, headers)

    def _send_ranged(self, data: bytes, headers: dict) -> None:
        total = len(data)
        rng = _parse_range(self.headers.get("Range"), total)
        if rng == "unsatisfiable":
            raise _HubError(416, None, "Requested Range Not Satisfiable",
                            {"Content-Range": f"bytes */{total}", **{k: headers[k] for k in ("ETag",) if k in headers}})
        if rng is None:
            return self._send(200, data, headers)
        start, end = rng
        headers = {**headers, "Content-Range": f"bytes {start}-{end}/{total}"}
        return self._send(206, data[start : end + 1], headers)

    # -- /encodings ----------------------------------------------------------------------------------------------

    def _tiktoken(self, method: str, name: str) -> None:
        data = TIKTOKEN_FILES.get(name)
        if data is None:
            raise _HubError(404, None, f"BlobNotFound: {name}")
        headers = {"Content-Type": "application/octet-stream", "Accept-Ranges": "bytes",
                   "ETag": f'"{STANDIN_TIKTOKEN_SHA256[name][:32]}"'}
        self._send_ranged(data, headers)


def _all_blobs(repo_id: str) -> set[tuple[str, int]]:
    out: set[tuple[str, int]] = set()
    for i in range(len(REPOS[repo_id]["commits"])):
        out.update(_files_at(repo_id, i).items())
    return out


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # don't join keep-alive handler threads on close
    allow_reuse_address = True
    request_queue_size = 64


class HubStandin:
    """STAND-IN for the Hugging Face Hub, used ONLY in tests (never point production at it).

    Serves the synthetic repos in ``REPOS`` over plain HTTP with the subset of the Hub API that
    huggingface_hub 2.4.0 uses for model_info / auth_check / list_repo_tree / hf_hub_download /
    snapshot_download (Xet disabled). See the module docstring for the endpoints.

    ``HubStandin(bind="127.0.0.1", port=0, tokens=("hf_standin_token",), throttle_bps=None, verbose=False)``

    - ``tokens``: bearer tokens accepted for gated repos (others get the Hub's GatedRepo 401/403).
      Tokens are not checked on non-gated repos (any or none is fine).
    - ``throttle_bps``: limit every response body to this many bytes/second (None = unlimited).
    - ``.start()`` serves in a background thread and returns self; ``.port`` / ``.url`` are then set.
    - ``.stop()``; also usable as a context manager.
    - ``.bytes_served()`` {unquoted request path: body bytes actually written to the socket, 2xx responses only
      (error bodies are not content); every requested path has an entry, 0 for HEAD/errors}, ``.total_bytes()``,
      ``.requests()`` [(method, path, status)], ``.reset_log()``, ``.set_throttle(bps or None)``,
      ``.wait_idle(timeout)`` (no response in flight). Control endpoints under ``/_standin/`` are not logged.
    - ``.fail_next(status, count, paths="resolve")``: the next `count` requests matching `paths` ("resolve", "api"
      or "all") are answered with HTTP `status` (429 with ``Retry-After: 1``), then normal service resumes;
      ``.pending_failures()`` = how many are still to come. Same as ``POST /_standin/fail?status=S&count=N&paths=P``.
    - ``.hold(path_part)`` / ``.release()`` / ``.held()``: GETs of files whose path contains `path_part` wait before
      their answer until released (a deterministic "mid-fill" point for fault tests).
    - Static helpers (no server needed): ``commit(repo_id, index=-1)``, ``repo_size(repo_id, commit=None)``,
      ``commits(repo_id)``, ``files(repo_id, commit=None)`` {path: size}, ``file_bytes(repo_id, path, commit=None)``,
      ``file_meta(...)``, ``is_gated(repo_id)``.
    """

    def __init__(self, bind: str = "127.0.0.1", port: int = 0, tokens=(STANDIN_TOKEN,),
                 throttle_bps: int | None = None, verbose: bool = False):
        self.bind = bind
        self.port = port
        self.tokens = frozenset([tokens] if isinstance(tokens, str) else (tokens or ()))
        self.verbose = verbose
        self._throttle_bps: int | None = int(throttle_bps) if throttle_bps else None
        self._lock = threading.Lock()
        self._bytes: dict[str, int] = {}
        self._requests: list[tuple[str, str, int]] = []
        self._stopping = threading.Event()
        self._idle = threading.Condition(self._lock)
        self._inflight = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._fail: tuple[int, int, str] | None = None  # (status, remaining, paths) set by fail_next()
        self._retry_after = 1  # seconds in the Retry-After of a simulated 429 (fail_next)
        self._hold: tuple[str, threading.Event] | None = None  # (path part, released) set by hold()
        self._held = 0  # GET requests waiting in hold() now

    # -- lifecycle -----------------------------------------------------------------------------------------------

    def _bind(self) -> None:
        self._server = _Server((self.bind, self.port), _Handler)
        self._server.standin = self  # type: ignore[attr-defined]
        self.port = self._server.server_address[1]
        self._stopping.clear()

    def start(self) -> HubStandin:
        if self._server is not None:
            return self
        self._bind()
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name=f"hub-standin:{self.port}", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread (script mode)."""
        if self._server is None:
            self._bind()
        try:
            self._server.serve_forever(poll_interval=0.2)
        finally:
            self.wait_idle(2)  # let responses being written finish (and their log lines be printed)
            self._stopping.set()
            self._server.server_close()

    def stop(self) -> None:
        self._stopping.set()  # throttled responses in flight abort at their next chunk
        self.release()  # held requests end
        if self._server is not None:
            self._server.shutdown()
            self.wait_idle(5)
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> HubStandin:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def url(self) -> str:
        host = self.bind if self.bind not in ("0.0.0.0", "", "::") else "127.0.0.1"
        return f"http://{host}:{self.port}"

    # -- control & observation -----------------------------------------------------------------------------------

    def set_throttle(self, bps: int | None) -> None:
        """Limit each response body to `bps` bytes/second (None or 0 = unlimited). Applies to in-flight responses."""
        self._throttle_bps = int(bps) if bps else None

    @property
    def throttle_bps(self) -> int | None:
        return self._throttle_bps

    FAIL_PATHS = ("resolve", "api", "all")

    def fail_next(self, status: int, count: int, paths: str = "resolve", retry_after: int = 1) -> None:
        """Answer the next `count` requests matching `paths` ("resolve": /{repo}/resolve/..., "api": /api/...,
        "all": every non-control request) with HTTP `status` (429 with ``Retry-After: <retry_after>``), then serve normally.
        Replaces any pending rule; count 0 clears it. The failed requests are logged like any response."""
        status, count = int(status), int(count)
        if not 400 <= status <= 599:
            raise ValueError(f"status must be an HTTP error status (400-599), not {status}")
        if count < 0:
            raise ValueError(f"count must be >= 0, not {count}")
        if paths not in self.FAIL_PATHS:
            raise ValueError(f"paths must be one of {self.FAIL_PATHS}, not {paths!r}")
        with self._lock:
            self._fail = (status, count, paths) if count else None
            self._retry_after = int(retry_after)

    def pending_failures(self) -> int:
        """How many requests are still to be failed by the last fail_next() (0 = normal service)."""
        with self._lock:
            return self._fail[1] if self._fail else 0

    def _take_failure(self, path: str) -> int | None:
        """If the pending fail_next() rule matches this (unquoted) request path, use one failure: its status."""
        if path.startswith("/_standin/"):
            return None
        with self._lock:
            if not self._fail:
                return None
            status, remaining, paths = self._fail
            segs = path.lstrip("/").split("/")
            kind = "api" if segs[0] == "api" else "resolve" if "resolve" in segs[1:] else "other"
            if paths != "all" and kind != paths:
                return None
            self._fail = (status, remaining - 1, paths) if remaining > 1 else None
            return status

    def hold(self, path_part: str) -> None:
        """Hold every GET of a file (``/resolve/``) whose path contains `path_part` before anything of its answer is
        sent, until release(): a fault test's deterministic "in flight" point (whatever fetches it is mid-fill, and
        everything fetched before it is complete). ``held()`` = how many requests are waiting now."""
        with self._lock:
            if self._hold:
                self._hold[1].set()
            self._hold = (path_part, threading.Event())

    def release(self) -> None:
        """Let held requests go on (and stop holding)."""
        with self._lock:
            if self._hold:
                self._hold[1].set()
            self._hold = None

    def held(self) -> int:
        with self._lock:
            return self._held

    def _wait_if_held(self, method: str, path: str) -> None:
        with self._lock:
            hold = self._hold
            if hold is None or method != "GET" or hold[0] not in path:
                return
            self._held += 1
        try:
            hold[1].wait(timeout=900)
        finally:
            with self._lock:
                self._held -= 1

    def bytes_served(self) -> dict[str, int]:
        with self._lock:
            return dict(self._bytes)

    def total_bytes(self) -> int:
        with self._lock:
            return sum(self._bytes.values())

    def requests(self) -> list[tuple[str, str, int]]:
        with self._lock:
            return list(self._requests)

    def reset_log(self) -> None:
        with self._lock:
            self._bytes.clear()
            self._requests.clear()

    def _log_snapshot(self) -> dict:
        with self._lock:
            return {"bytes": dict(self._bytes), "requests": [list(r) for r in self._requests],
                    "throttle_bps": self._throttle_bps}

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until no response is being written (e.g. after killing a client mid-download, the server side
        notices on its next write). Returns False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._inflight == 0, timeout=timeout)

    def _begin(self, method: str, path: str, status: int) -> None:
        with self._lock:
            self._inflight += 1
            if not path.startswith("/_standin/"):
                self._bytes.setdefault(path, 0)
                self._requests.append((method, path, status))

    def _end(self, method: str, path: str, status: int, written: int) -> None:
        try:
            if self.verbose and not path.startswith("/_standin/"):
                # Never log headers (Authorization!) -- method, path, status, body bytes written only.
                print(f"{method} {path} {status} {written}", file=sys.stderr, flush=True)
        finally:
            with self._idle:
                self._inflight -= 1
                self._idle.notify_all()

    def _count(self, path: str, n: int) -> None:
        if path.startswith("/_standin/"):
            return
        with self._lock:
            self._bytes[path] = self._bytes.get(path, 0) + n

    # -- repo metadata helpers (no server needed) ----------------------------------------------------------------

    @staticmethod
    def commit(repo_id: str, index: int = -1) -> str:
        """40-hex commit sha of commit `index` (default: the last one, which `main` points to)."""
        return _commit_sha(repo_id, _commit_index_arg(repo_id, index))

    @staticmethod
    def commits(repo_id: str) -> list[str]:
        """All commit shas of a repo, oldest first (the last one is `main`)."""
        _commit_index_arg(repo_id, None)  # validates repo_id
        return [_commit_sha(repo_id, i) for i in range(len(REPOS[repo_id]["commits"]))]

    @staticmethod
    def files(repo_id: str, commit: str | int | None = None) -> dict[str, int]:
        """{path: size in bytes} of all files at `commit` (sha, index, or None for main)."""
        idx = _commit_index_arg(repo_id, commit)
        return {p: _meta(repo_id, p, v)["size"] for p, v in _files_at(repo_id, idx).items()}

    @staticmethod
    def repo_size(repo_id: str, commit: str | int | None = None) -> int:
        """Total bytes of all files at `commit` (sha, index, or None for main)."""
        return sum(HubStandin.files(repo_id, commit).values())

    @staticmethod
    def file_bytes(repo_id: str, path: str, commit: str | int | None = None) -> bytes:
        idx = _commit_index_arg(repo_id, commit)
        return _content(repo_id, path, _files_at(repo_id, idx)[path])

    @staticmethod
    def file_meta(repo_id: str, path: str, commit: str | int | None = None) -> dict:
        """{size, blob_id, etag, lfs: {sha256, size, pointer_size} | None}."""
        idx = _commit_index_arg(repo_id, commit)
        return dict(_meta(repo_id, path, _files_at(repo_id, idx)[path]))

    @staticmethod
    def is_gated(repo_id: str) -> bool:
        return bool(REPOS[repo_id]["gated"])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="STAND-IN for the Hugging Face Hub (tests only).")
    p.add_argument("--bind", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--token", action="append", default=None,
                   help=f"token accepted for gated repos (repeatable; default {STANDIN_TOKEN})")
    p.add_argument("--throttle-bps", type=int, default=0, help="bytes/second per response (0 = unlimited)")
    p.add_argument("--quiet", action="store_true", help="do not log one line per request to stderr")
    args = p.parse_args(argv)

    hub = HubStandin(bind=args.bind, port=args.port, tokens=tuple(args.token or (STANDIN_TOKEN,)),
                     throttle_bps=args.throttle_bps or None, verbose=not args.quiet)

    def _stop(signum, frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    hub._bind()
    print(f"listening on http://{args.bind}:{hub.port}", flush=True)
    with contextlib.suppress(SystemExit, KeyboardInterrupt):
        hub.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
