"""TensorRT-LLM's contract for extra-llm-api-config.yml and trtllm-serve, per supported version, as data.

Every entry is read from upstream's own source of that version: `tensorrt_llm/llmapi/llm_args.py` as rendered in
the versioned documentation (https://nvidia.github.io/TensorRT-LLM/<release>/_modules/tensorrt_llm/llmapi/llm_args.html,
the gh-pages branch of NVIDIA/TensorRT-LLM) and the trtllm-serve CLI reference of the same release
(<release>/commands/trtllm-serve/trtllm-serve.html). A version whose own pages are not published is read from the
nearest releases on either side (`read`): a key or value is accepted only if all of them accept it, and required
if any of them requires it. What the source does not establish takes the stricter reading, marked "stricter".
serving/options.py builds the pydantic schema from this; serving/render.py and serving/validate.py take the flag and the
imports from it. tests/contract/trtllm_llm_args.json holds the same facts, extracted independently, for the tests.

Field specs: (type, nullable, constraints), type one of bool, int, float, str, "list[int]", ("enum", values),
("model", name); constraints pydantic's ge/gt/le/lt/min_length, and item_gt for a list's items. The draft key
(`draft_field`, a str checked as an absolute path: it becomes the draft's mount point) is not a field spec.
"""

from __future__ import annotations

from dataclasses import dataclass, field

OPT = True  # nullable: `Optional[...]` upstream, an explicit null is accepted


@dataclass(frozen=True)
class Release:
    """One upstream release read: its docs page commit (gh-pages) and the source commit the page was built from."""

    name: str
    gh_pages_commit: str
    source_commit: str

    @property
    def page(self) -> str:
        return f"https://nvidia.github.io/TensorRT-LLM/{self.name}/_modules/tensorrt_llm/llmapi/llm_args.html"


@dataclass(frozen=True)
class Contract:
    version: str
    read: tuple[Release, ...]
    serve_flag: str  # trtllm-serve's flag for the YAML that every release read takes
    validator_module: str  # what serving/validate.py imports, in the image
    validator_names: tuple[str, ...]
    decoding_names: dict[str, str]  # specfleet's (1.2.0rc6) decoding_type name -> this version's name
    draft_field: str  # the speculative_config key of the draft checkpoint
    draft_aliases: tuple[str, ...]  # other keys upstream accepts for it
    max_draft_len: tuple  # DecodingBaseConfig.max_draft_len
    loader_translations: dict[str, str]  # decoding_type names upstream's loader rewrites (with a warning)
    top: dict[str, tuple]
    models: dict[str, dict[str, tuple]]
    decoding: dict[str, dict[str, tuple]]  # this version's decoding_type name -> its own fields
    rules: dict[str, dict[str, tuple[str, ...]]]  # name -> {"positive": fields > 0, "present": fields required}
    defaults: dict[tuple[str, str], int]  # (name, field) -> upstream's default, where a `positive` rule reads it
    notes: tuple[str, ...] = field(default=())

    @property
    def draft_keys(self) -> tuple[str, ...]:
        return (self.draft_field, *self.draft_aliases)


_NO_CONSTRAINTS: dict[str, object] = {}
_INT, _BOOL, _STR = ("int", False, _NO_CONSTRAINTS), ("bool", False, _NO_CONSTRAINTS), ("str", False, _NO_CONSTRAINTS)
_OINT, _OBOOL = ("int", OPT, _NO_CONSTRAINTS), ("bool", OPT, _NO_CONSTRAINTS)

# TorchLlmArgs (with BaseLlmArgs' fields) as 1.2.0rc5 and 1.2.0rc6.post1 declare them; 1.3 differences below.
_TOP_12: dict[str, tuple] = {
    "disable_overlap_scheduler": _BOOL, "enable_autotuner": _BOOL, "enable_attention_dp": _BOOL,
    "enable_chunked_prefill": _BOOL, "enable_iter_perf_stats": _BOOL, "print_iter_log": _BOOL,
    "max_batch_size": _OINT, "max_num_tokens": _OINT, "max_seq_len": _OINT, "max_input_len": _OINT,
    "max_beam_width": _OINT, "tensor_parallel_size": _INT, "pipeline_parallel_size": _INT,
    "moe_expert_parallel_size": _OINT, "trust_remote_code": _BOOL, "attn_backend": _STR,
    # annotation Union[str, SamplerType]: stricter, only SamplerType's values
    "sampler_type": (("enum", ("TRTLLMSampler", "TorchSampler", "auto")), False, {}),
    "stream_interval": ("int", False, {"gt": 0}),  # validate_stream_interval refuses <= 0
    "cuda_graph_config": (("model", "CudaGraphConfig"), OPT, {}),
    "kv_cache_config": (("model", "KvCacheConfig"), False, {}),
    "moe_config": (("model", "MoeConfig"), False, {}),
}
_KV_12: dict[str, tuple] = {
    "free_gpu_memory_fraction": ("float", OPT, {"ge": 0, "le": 1}),  # field_validator: not 0 <= v <= 1 refused
    "enable_block_reuse": _BOOL, "max_tokens": _OINT,
    "max_attention_window": ("list[int]", OPT, {"min_length": 1, "item_gt": 0}),  # validator: non-empty, ints > 0
    "sink_token_length": _OINT, "host_cache_size": _OINT, "onboard_blocks": _BOOL,
    "enable_partial_reuse": _BOOL, "copy_on_partial_reuse": _BOOL, "use_uvm": _BOOL, "dtype": _STR,
}
_MODELS_12: dict[str, dict[str, tuple]] = {
    "CudaGraphConfig": {"max_batch_size": ("int", False, {"ge": 0}),  # validator refuses < 0
                        "batch_sizes": ("list[int]", OPT, {}), "enable_padding": _BOOL},
    "KvCacheConfig": _KV_12,
    "MoeConfig": {"backend": (("enum", ("CUTLASS", "CUTEDSL", "WIDEEP", "TRTLLM", "DEEPGEMM", "VANILLA", "TRITON")),
                              False, {}),
                  "max_num_tokens": _OINT},
}
_EAGLE = {"eagle3_one_model": _OBOOL, "eagle3_layers_to_capture": ("list[int]", OPT, {}),
          "max_non_leaves_per_layer": _OINT, "num_eagle_layers": _OINT, "greedy_sampling": _OBOOL,
          "use_dynamic_tree": _OBOOL}
_SAVE = {"output_directory": ("str", False, {}), "write_interval": _INT, "file_prefix": _STR,
         "eagle3_layers_to_capture": ("list[int]", OPT, {})}
_DECODING_12: dict[str, dict[str, tuple]] = {
    "Eagle": _EAGLE, "DraftTarget": {},
    "NGram": {"max_matching_ngram_size": _INT, "is_keep_all": _BOOL, "is_use_oldest": _BOOL, "is_public_pool": _BOOL},
    "MTP": {"num_nextn_predict_layers": _INT, "use_relaxed_acceptance_for_thinking": _BOOL, "relaxed_topk": _INT,
            "relaxed_delta": ("float", False, {})},
    "SaveState": _SAVE, "AUTO": {},
}
# TorchLlmArgs.validate_speculative_config's asserts (1.2) / the decoding classes' validators (1.3).
_RULES_12: dict[str, dict[str, tuple[str, ...]]] = {
    "Eagle": {"positive": ("max_draft_len",), "present": ("speculative_model_dir",)},
    "DraftTarget": {"positive": ("max_draft_len",), "present": ("speculative_model_dir",)},
    "NGram": {"positive": ("max_draft_len", "max_matching_ngram_size"), "present": ()},  # size defaults to 0
    "MTP": {"positive": ("num_nextn_predict_layers",), "present": ()},
    "SaveState": {"positive": (), "present": ("output_directory",)},
    "AUTO": {"positive": (), "present": ()},
}

V1_2_0RC6 = Contract(
    version="1.2.0rc6",
    read=(Release("1.2.0rc5", "4de8e65b89e77588c6a2175c1cccba554af65554", "e4c7078"),
          Release("1.2.0rc6.post1", "442c0619a601e59362d64b6fe3d315ba506e6ef6", "e4a6c99")),
    # rc6.post1 takes --config or --extra_llm_api_options; rc5's CLI page is not published, its guide uses the latter
    serve_flag="--extra_llm_api_options",
    validator_module="tensorrt_llm.llmapi.llm_args",  # both define TorchLlmArgs and update_llm_args_with_extra_dict
    validator_names=("TorchLlmArgs", "update_llm_args_with_extra_dict"),
    decoding_names={n: n for n in _DECODING_12},  # DecodingBaseConfig.from_dict's table, exact case
    draft_field="speculative_model_dir", draft_aliases=(),  # DecodingBaseConfig.speculative_model_dir, no alias
    max_draft_len=_OINT,  # Optional[int]
    loader_translations={},
    top=_TOP_12, models=_MODELS_12, decoding=_DECODING_12, rules=_RULES_12,
    defaults={("NGram", "max_matching_ngram_size"): 0, ("MTP", "num_nextn_predict_layers"): 1},
    notes=("UserProvided is not modelled: its `drafter: object` has no default, a Python object no YAML can give",
           "Medusa and Lookahead: supports_backend refuses pytorch"),
)

# 1.3.0rc11 and 1.3.0rc13 (both read): only the differences from 1.2.0rc6 are written out.
_DECODING_13 = {
    "Eagle": _EAGLE, "Eagle3": _EAGLE,  # Eagle3DecodingConfig(EagleDecodingConfig)
    "Draft_Target": {},  # DraftTargetDecodingConfig.decoding_type: Literal["Draft_Target"]
    "NGram": {**_DECODING_12["NGram"], "max_matching_ngram_size": ("int", False, {"gt": 0})},  # PositiveInt = 2
    "MTP": {**_DECODING_12["MTP"], "num_nextn_predict_layers": ("int", False, {"gt": 0})},  # PositiveInt = 1
    "SaveState": _SAVE, "AUTO": {},
}
V1_3_0RC12 = Contract(
    version="1.3.0rc12",
    read=(Release("1.3.0rc11", "828c41115338b7a201bfaa595688a2f53aa5bacb", "4e69c14"),
          Release("1.3.0rc13", "0fa0042256267fa773432bc41e9e6ebc05d433ae", "b9ce4b6")),
    serve_flag="--config",  # serve: '--config, --extra_llm_api_options' in both; the docs prefer --config
    validator_module="tensorrt_llm.llmapi.llm_args",
    validator_names=("TorchLlmArgs", "update_llm_args_with_extra_dict"),
    decoding_names={**{n: n for n in _DECODING_12}, "DraftTarget": "Draft_Target", "Eagle": "Eagle3"},
    # DecodingBaseConfig.speculative_model: validation_alias=AliasChoices("speculative_model", "speculative_model_dir")
    draft_field="speculative_model", draft_aliases=("speculative_model_dir",),
    max_draft_len=("int", OPT, {"ge": 0}),  # Optional[NonNegativeInt]
    loader_translations={"Eagle": "Eagle3"},  # TorchLlmArgs rebuilds Eagle as Eagle3DecodingConfig, with a warning
    top={**_TOP_12},  # stream_interval: PositiveInt (same rule)
    models={
        "CudaGraphConfig": _MODELS_12["CudaGraphConfig"],  # max_batch_size: NonNegativeInt
        "KvCacheConfig": {k: v for k, v in _KV_12.items() if k != "onboard_blocks"},  # rc13 has no onboard_blocks
        "MoeConfig": {**_MODELS_12["MoeConfig"],
                      "backend": (("enum", ("AUTO", "CUTLASS", "CUTEDSL", "WIDEEP", "TRTLLM", "DEEPGEMM", "DENSEGEMM",
                                            "VANILLA", "TRITON")), False, {})},
    },
    decoding=_DECODING_13,
    rules={"Eagle": {"positive": ("max_draft_len",), "present": ("speculative_model",)},
           "Eagle3": {"positive": ("max_draft_len",), "present": ("speculative_model",)},
           "Draft_Target": {"positive": ("max_draft_len",), "present": ("speculative_model",)},
           "NGram": {"positive": ("max_draft_len",), "present": ()},
           "MTP": {"positive": (), "present": ()},
           "SaveState": {"positive": (), "present": ("output_directory",)},
           "AUTO": {"positive": (), "present": ()}},
    defaults={("NGram", "max_matching_ngram_size"): 2, ("MTP", "num_nextn_predict_layers"): 1},
    notes=("nested configs inherit StrictBaseModel from tensorrt_llm/llmapi/utils.py, which the docs do not render: "
           "that they forbid unknown keys is the stricter reading",
           "SA, PARD and User_Provided are not modelled"),
)

CONTRACTS: dict[str, Contract] = {c.version: c for c in (V1_2_0RC6, V1_3_0RC12)}
DEFAULT_VERSION = "1.2.0rc6"  # the playbook's original image; unknown versions are checked with its names

