"""`specfleet check` refuses bad input with one line per problem naming the host and the key."""

import pytest
from click.testing import CliRunner

from specfleet.cli import main
from tests.unit import fakefleet

BAD = [
    # (what, host vars (YAML flow mapping), expected key in the error)
    ("misspelled var", "{serve_prot: 9000}", "serve_prot"),
    ("port out of range", "{serve_port: 70000}", "serve_port"),
    ("port as string", "{serve_port: '8000'}", "serve_port"),
    ("bind to a hostname", "{serve_host: localhost}", "serve_host"),
    ("gpus not a bool", "{gpus: 'yes'}", "gpus"),
    ("unknown top-level TRT-LLM option", "{extra_llm_api_options: {enable_magic: true}}", "extra_llm_api_options.enable_magic"),
    ("unknown nested TRT-LLM option", "{extra_llm_api_options: {kv_cache_config: {enable_blok_reuse: false}}}",
     "extra_llm_api_options.kv_cache_config.enable_blok_reuse"),
    ("unknown speculative option", "{extra_llm_api_options: {speculative_config: {draft_len: 3}}}",
     "extra_llm_api_options.speculative_config.draft_len"),
    ("Eagle3 not accepted by 1.2.0rc6", "{extra_llm_api_options: {speculative_config: {decoding_type: Eagle3}}}",
     "extra_llm_api_options.speculative_config"),
    ("max_draft_len zero", "{extra_llm_api_options: {speculative_config: {max_draft_len: 0}}}",
     "extra_llm_api_options.speculative_config"),
    ("draft dir removed", "{extra_llm_api_options: {speculative_config: {speculative_model_dir: null}}}",
     "extra_llm_api_options.speculative_config"),
    ("fraction above 1", "{extra_llm_api_options: {kv_cache_config: {free_gpu_memory_fraction: 1.5}}}",
     "extra_llm_api_options.kv_cache_config.free_gpu_memory_fraction"),
    ("fraction negative (upstream: 0 <= v <= 1)", "{extra_llm_api_options: {kv_cache_config: {free_gpu_memory_fraction: -0.1}}}",
     "extra_llm_api_options.kv_cache_config.free_gpu_memory_fraction"),
    ("bool as int in TRT-LLM options", "{extra_llm_api_options: {enable_autotuner: 1}}", "extra_llm_api_options.enable_autotuner"),
    ("int as bool in TRT-LLM options", "{extra_llm_api_options: {max_num_tokens: true}}", "extra_llm_api_options.max_num_tokens"),
    ("TRT-LLM options not a mapping", "{extra_llm_api_options: [1, 2]}", "extra_llm_api_options"),
    ("decoding_type a list (no traceback)", "{extra_llm_api_options: {speculative_config: {decoding_type: [Eagle]}}}",
     "extra_llm_api_options.speculative_config"),
    ("config block null", "{extra_llm_api_options: {kv_cache_config: null}}", "extra_llm_api_options.kv_cache_config"),
    ("NGram without ngram size", "{extra_llm_api_options: {speculative_config: {decoding_type: NGram, max_draft_len: 3}}}",
     "extra_llm_api_options.speculative_config"),
    ("relative data_dir", "{data_dir: var/lib/specfleet}", "data_dir"),
    ("hub endpoint not a URL", "{hub_endpoint: huggingface.co}", "hub_endpoint"),
    ("bad tiktoken hash", "{tiktoken_sha256: {o200k_base.tiktoken: abc, cl100k_base.tiktoken: abc}}", "tiktoken_sha256"),
    ("root as operator", "{operator_users: [root]}", "operator_users"),
    ("bad user name", "{operator_users: ['Bad User']}", "operator_users.0"),
    ("token in container env", "{container_env: {HF_TOKEN: x}}", "container_env"),
    ("zero health timeout", "{health_timeout_sec: 0}", "health_timeout_sec"),
    ("keep fewer than 2 releases", "{keep_releases: 1}", "keep_releases"),
    ("image with spaces", "{image: 'nvcr.io/x y'}", "image"),
    ("token file missing", "{hf_token_file: /nonexistent/token}", "hf_token_file"),
    ("bad rollback id", "{rollback_to: latest}", "rollback_to"),
    # hostile input: every string that reaches a shell, a unit file, a path or a URL (issue "hostile input")
    ("data_dir with a command separator", "{data_dir: '/opt/x;reboot'}", "data_dir"),
    ("data_dir with a pipe", "{data_dir: '/opt/x|sh'}", "data_dir"),
    ("data_dir with a dot-dot segment", "{data_dir: /var/lib/../../etc}", "data_dir"),
    ("data_dir with a double slash", "{data_dir: /var//lib}", "data_dir"),
    ("data_dir with a colon (docker -v separator)", "{data_dir: '/var/lib:/etc'}", "data_dir"),
    ("data_dir too long", "{data_dir: /%s}" % ("a" * 300), "data_dir"),
    ("secrets_dir with a command chain", "{secrets_dir: '/etc/x&&reboot'}", "secrets_dir"),
    ("secrets_dir with a dot segment", "{secrets_dir: /etc/./specfleet}", "secrets_dir"),
    ("image that is a docker flag", "{image: --privileged}", "image"),
    ("image with a command separator", "{image: 'nvcr.io/x;reboot'}", "image"),
    ("service_name with the .service suffix", "{service_name: specfleet.service}", "service_name"),
    ("service_name with a command separator", "{service_name: 'svc;reboot'}", "service_name"),
    ("hub_endpoint with a command separator", "{hub_endpoint: 'https://hf.example;reboot'}", "hub_endpoint"),
    ("hub_endpoint with credentials", "{hub_endpoint: 'https://user:secret@hf.example'}", "hub_endpoint"),
    ("hub_endpoint with a bad hostname", "{hub_endpoint: 'https://-hf.example'}", "hub_endpoint"),
    ("hub_endpoint with a backtick", "{hub_endpoint: 'https://hf.example/`reboot`'}", "hub_endpoint"),
    ("controller_hub_endpoint with a query", "{controller_hub_endpoint: 'https://hf.example/?x=1'}", "controller_hub_endpoint"),
    ("controller_hub_endpoint with a file scheme", "{controller_hub_endpoint: 'file:///etc/passwd'}", "controller_hub_endpoint"),
    ("pip_index_url with a command separator", "{pip_index_url: 'https://m.example/simple;id'}", "pip_index_url"),
    ("pip_index_url with an extra pip option", "{pip_index_url: 'https://m.example/simple --trusted-host evil'}", "pip_index_url"),
    ("tiktoken_base_url with a single quote", "{tiktoken_base_url: \"https://m.example/enc'$(reboot)'\"}", "tiktoken_base_url"),
    ("tiktoken_base_url with a fragment", "{tiktoken_base_url: 'https://m.example/enc#x'}", "tiktoken_base_url"),
    ("tiktoken_base_url with a port out of range", "{tiktoken_base_url: 'https://m.example:99999/enc'}", "tiktoken_base_url"),
    ("tiktoken_base_url with a bad percent escape", "{tiktoken_base_url: 'https://m.example/a%zz'}", "tiktoken_base_url"),
    ("target_revision that is an option", "{target_revision: --upload-pack}", "target_revision"),
    ("draft_revision with a dot-dot", "{draft_revision: ../../x}", "draft_revision"),
    ("draft_revision with a command separator", "{draft_revision: 'main;reboot'}", "draft_revision"),
    ("hub_client_requirement with a newline", "{hub_client_requirement: \"huggingface_hub==\\n2.4.0\"}", "hub_client_requirement"),
    ("hub_client_requirement with a second package", "{hub_client_requirement: 'huggingface_hub==2.4.0 evil'}", "hub_client_requirement"),
    ("operator user with a command separator", "{operator_users: ['alice;reboot']}", "operator_users.0"),
    ("operator user that is an option", "{operator_users: [-oroot]}", "operator_users.0"),
    ("container_env value with a newline (unit line injection)",
     "{container_env: {A: \"x\\nExecStartPre=/bin/touch /tmp/pwned\"}}", "container_env"),
    ("container_env value with a carriage return", "{container_env: {A: \"x\\ry\"}}", "container_env"),
    ("container_env value with a NUL", "{container_env: {A: \"x\\0y\"}}", "container_env"),
    ("container_env value with a tab", "{container_env: {A: \"x\\ty\"}}", "container_env"),
    ("container_env name with a command separator", "{container_env: {'A;reboot': x}}", "container_env"),
    ("serve_host with a zone injection", "{serve_host: 'fe80::1%eth0;reboot'}", "serve_host"),
    ("rollback_to with a command separator", "{rollback_to: 'r-0123456789ab;reboot'}", "rollback_to"),
    ("hf_token_file with a NUL", "{hf_token_file: \"/tmp/tok\\0en\"}", "hf_token_file"),
    ("hf_token_file with a newline", "{hf_token_file: \"/tmp/tok\\nspark-99: hf_token: forged\"}", "hf_token_file"),
    ("tiktoken_sha256 key with a command separator",
     "{tiktoken_sha256: {'o200k_base.tiktoken;reboot': 446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d, cl100k_base.tiktoken: 223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7}}", "tiktoken_sha256"),
    ("speculative_model_dir with a colon (extra docker mount)",
     "{extra_llm_api_options: {speculative_config: {speculative_model_dir: '/opt/x:/host:rw'}}}",
     "extra_llm_api_options.speculative_config.speculative_model_dir"),
    ("speculative_model_dir with a newline (unit line injection)",
     "{extra_llm_api_options: {speculative_config: {speculative_model_dir: \"/opt/x\\nExecStartPre=/bin/sh\"}}}",
     "extra_llm_api_options.speculative_config.speculative_model_dir"),
    # the gateway's tunables: ports, addresses, paths and the TLS pair, before anything changes
    ("gateway port out of range", "{gateway_port: 70000}", "gateway_port"),
    ("gateway bind that is a host name", "{gateway_bind: gateway.example}", "gateway_bind"),
    ("gateway bind with a command separator", "{gateway_bind: '0.0.0.0;reboot'}", "gateway_bind"),
    ("gateway health path without a slash", "{gateway_health_path: healthz}", "gateway_health_path"),
    ("gateway health path with a space (config injection)", "{gateway_health_path: '/h acl x'}", "gateway_health_path"),
    ("gateway keys file with a newline", "{gateway_api_keys_file: \"/tmp/k\\nx\"}", "gateway_api_keys_file"),
    ("gateway check interval of 0", "{gateway_check_inter_ms: 0}", "gateway_check_inter_ms"),
    ("drain timeout of 0", "{drain_timeout_sec: 0}", "drain_timeout_sec"),
    ("serves an unknown profile", "{serves: eagle4}", "serves"),
    ("fleet address with a space", "{fleet_address: '10.0.0.1 x'}", "fleet_address"),
    ("speculative_model_dir with a dot-dot", "{extra_llm_api_options: {speculative_config: {speculative_model_dir: /opt/../etc}}}",
     "extra_llm_api_options.speculative_config.speculative_model_dir"),
]


@pytest.mark.parametrize("what,host_vars,key", BAD, ids=[b[0] for b in BAD])
def test_check_refuses(fleet_file, what, host_vars, key):
    fleet_file(f"all:\n  hosts:\n    good-1:\n    bad-host: {host_vars}\n")
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/eagle3.py"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line]
    assert any(line.startswith(f"bad-host: {key}: ") for line in lines), lines
    assert not any(line.startswith("good-1") for line in lines), "only the bad host is reported"
    assert all(line.startswith("bad-host: ") for line in lines), "one line per problem"
    assert "Traceback" not in result.output


# Rules between the hosts of a fleet WITH a gateway group: `bad-host` is a gateway or a Spark of
#   gateway: gw-1 (10.0.0.1), bad-host when its role is "gateway"; Sparks: good-1 (10.0.0.2), bad-host otherwise
GATEWAY_BAD = [
    # (what, role of bad-host, its vars, expected key)
    ("gateway metrics on the API port", "gateway", "gateway_metrics_port: 8000", "gateway_metrics_port"),
    ("gateway TLS certificate without its key", "gateway", "gateway_tls_cert_file: /tmp/cert.pem", "gateway_tls_key_file"),
    ("gateway TLS key without its certificate", "gateway", "gateway_tls_key_file: /tmp/key.pem", "gateway_tls_cert_file"),
    ("two gateways with different ports", "gateway", "gateway_port: 9000", "gateway_port"),
    ("a gateway that is also the hub mirror", "gateway+mirror", "mirror_port: 8090", "gateway"),
    ("a gateway reached by name", "gateway", "ssh_hostname: gw.example", "fleet_address"),
    ("a Spark that names no profile", "spark", "{}", "serves"),
    ("a Spark reached by name", "spark", "serves: eagle3, ssh_hostname: spark.example", "fleet_address"),
    ("backend port = serve_port", "spark", "serves: eagle3, gateway_backend_port: 8000", "gateway_backend_port"),
    ("agent port = backend port", "spark", "serves: eagle3, gateway_agent_port: 8001", "gateway_agent_port"),
    ("a Spark whose trtllm-serve binds all interfaces", "spark", "serves: eagle3, serve_host: 0.0.0.0", "serve_host"),
    ("a Spark reached by IPv6", "spark", "serves: eagle3, fleet_address: 'fd00::3'", "fleet_address"),
]


def _gateway_fleet(role: str, bad_vars: str) -> str:
    bad = bad_vars if bad_vars.startswith("{") else f"{{ssh_hostname: 10.0.0.3, {bad_vars}}}"
    gateways = "gw-1: {ssh_hostname: 10.0.0.1}" + (f", bad-host: {bad}" if role.startswith("gateway") else "")
    sparks = "good-1: {ssh_hostname: 10.0.0.2, serves: eagle3}" + ("" if role.startswith("gateway") else f", bad-host: {bad}")
    mirror = "\n    hub_mirror: {hosts: {bad-host: }}" if role.endswith("mirror") else ""
    return f"all:\n  hosts: {{{sparks}}}\n  children:\n    gateway: {{hosts: {{{gateways}}}}}{mirror}\n"


@pytest.mark.parametrize("what,role,bad_vars,key", GATEWAY_BAD, ids=[b[0] for b in GATEWAY_BAD])
def test_check_refuses_in_a_fleet_with_gateways(fleet_file, what, role, bad_vars, key):
    fleet_file(_gateway_fleet(role, bad_vars))
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/eagle3.py"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line]
    assert any(line.startswith(f"bad-host: {key}: ") for line in lines), lines
    assert all(line.startswith("bad-host: ") for line in lines), "only the bad host, one line per problem"
    assert "Traceback" not in result.output


@pytest.mark.parametrize("what,role,bad_vars,key", [b for b in GATEWAY_BAD if b[1] == "spark" and "serves" in b[2]],
                         ids=[b[0] for b in GATEWAY_BAD if b[1] == "spark" and "serves" in b[2]])
def test_the_same_vars_without_a_gateway_group_get_no_rule_between_hosts(fleet_file, what, role, bad_vars, key):
    """A fleet without a gateway group gets none of the rules between hosts (it is checked as a fleet of Sparks alone)."""
    fleet_file(f"all:\n  hosts:\n    good-1:\n    bad-host: {{{bad_vars.replace('serves: eagle3', 'serves: eagle3')}}}\n")
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/eagle3.py"])
    assert result.exit_code == 0, result.output


def test_a_valid_fleet_with_gateways_passes(fleet_file):
    fleet_file(_gateway_fleet("spark", "serves: eagle3"))
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/eagle3.py"])
    assert result.exit_code == 0, result.output


def test_table_has_at_least_53_distinct_cases():
    assert len({b[0] for b in BAD}) >= 53 and len({b[1] for b in BAD}) == len(BAD)


def test_missing_token_is_refused(fleet_file, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    fleet_file("all:\n  hosts:\n    spark-01:\n")
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/eagle3.py"])
    assert result.exit_code == 2
    assert result.output.strip() == ("spark-01: hf_token: no Hugging Face token: export HF_TOKEN or set hf_token_file "
                                     "(or hf_token_required: false for public models)")


def test_all_problems_reported_at_once(fleet_file):
    fleet_file("all:\n  vars: {serve_port: 0}\n  hosts:\n    a:\n    b: {gpus: 3}\n")
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/eagle3.py"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert "all (a, b): serve_port: input should be greater than or equal to 1" in lines, lines
    assert any(line.startswith("b: gpus: ") for line in lines) and len(lines) == 2, lines


def test_a_problem_of_a_group_is_one_line_naming_the_group_and_its_hosts(fleet_file):
    """A bad value set once for a group is said once, with the group's hosts; the same problem on hosts that make no
    group lists them; a host's own problem stays its own line."""
    fleet_file("all:\n  children:\n"
               "    sparks:\n      vars: {keep_releases: 1}\n      hosts: {s1: , s2: , s3: }\n"
               "    others:\n      hosts: {o1: {serve_port: 0}, o2: {serve_port: 0}, o3: {gpus: 3}}\n")
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/eagle3.py"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == "sparks (s1, s2, s3): keep_releases: input should be greater than or equal to 2", lines
    assert lines[1] == "o1, o2: serve_port: input should be greater than or equal to 1", lines
    assert lines[2].startswith("o3: gpus: ") and len(lines) == 3, lines


def test_check_lists_the_hosts_a_deploy_skips_and_why(fleet_file, monkeypatch):
    """The count of valid hosts is of the hosts the deploy acts on; a gateway and a Spark that serves another profile
    are listed apart, each with its reason, and so are the hosts a gateway deploy leaves alone."""
    fleet_file("all:\n  hosts:\n    spark-1: {ssh_hostname: 10.0.0.11, serves: eagle3}\n"
               "    spark-2: {ssh_hostname: 10.0.0.12, serves: eagle3}\n"
               "    spark-3: {ssh_hostname: 10.0.0.13, serves: vllm_eagle3}\n"
               "  children:\n    gateway: {hosts: {gw-1: {ssh_hostname: 10.0.0.1}}}\n")
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/eagle3.py"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "2 host(s) valid for deploys/eagle3.py [eagle3]: spark-1, spark-2", lines
    assert lines[1:4] == ["2 host(s) valid and skipped by deploys/eagle3.py:",
                          "  spark-3: serves vllm_eagle3: deploys/vllm_eagle3.py converges it",
                          "  gw-1: a gateway host: deploys/gateway.py converges it"], lines
    monkeypatch.setenv("SPECFLEET_API_KEYS", fakefleet.API_KEYS)
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/gateway.py"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "1 host(s) valid for deploys/gateway.py [(no profile)]: gw-1", lines
    assert lines[1] == "3 host(s) valid and skipped by deploys/gateway.py:", lines
    assert lines[2] == "  spark-1: not a gateway host: deploys/gateway.py converges the gateways only", lines


def test_valid_fleet_passes(fleet_file):
    fleet_file("all:\n  hosts:\n    spark-01:\n    spark-02: {extra_llm_api_options: {speculative_config: {max_draft_len: 3}}}\n")
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/eagle3.py"])
    assert result.exit_code == 0, result.output
    assert "2 host(s) valid" in result.output


def test_check_accepts_every_shipped_deploy(fleet_file):
    fleet_file("all:\n  hosts:\n    spark-01:\n")
    for deploy in ("eagle3", "draft_target", "baseline", "cleanup"):
        result = CliRunner().invoke(main, ["check", "inventory.py", f"deploys/{deploy}.py"])
        assert result.exit_code == 0, (deploy, result.output)


def test_a_token_file_that_is_not_text_is_one_line(fleet_file, tmp_path):
    token = tmp_path / "token.bin"
    token.write_bytes(b"\xff\xfe\x00binary")
    fleet_file(f"all:\n  hosts:\n    spark-01: {{hf_token_file: {token}}}\n")
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/eagle3.py"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert result.output.strip() == f"spark-01: hf_token_file: {token} is not UTF-8 text", result.output


def test_a_gateway_group_with_no_spark_is_refused(fleet_file):
    fleet_file("all:\n  children:\n    gateway: {hosts: {gw-1: {ssh_hostname: 10.0.0.1}}}\n")
    result = CliRunner().invoke(main, ["check", "inventory.py", "deploys/gateway.py"])
    assert result.exit_code == 2, result.output
    assert result.output.splitlines() == ["gw-1: gateway: has no Spark to send requests to (allowed: a gateway group "
                                          "with at least one host outside it serving a profile)"], result.output
