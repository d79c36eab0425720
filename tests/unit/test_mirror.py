"""The fleet's Hub mirror: vars and their validation, the hub_endpoint default, the rendered units and
olah config, and whole deploys on pyinfra's @fake connector (fresh mirror, converged mirror, warm-up order)."""

import re

import pytest

from specfleet.fleet.programs import program_text
from specfleet.fleet.status import sha256
from specfleet.host.layout import HOST_PROGRAMS, HOST_TOOL, MODULES, MirrorLayout
from specfleet.mirror.render import NAME, mirror_files
from specfleet.mirror.status import parse_mirror_state
from specfleet.plan import PlanError, build_plans, load_inventory_or_fail
from specfleet.steps import converge, mirror_setup
from tests.unit.fakehost import changed_ops, converged_responses, executed, run_deploy

FLEET = """
all:
  vars: {{hub_endpoint: "http://hub.lab:8999", hf_token_required: false, pip_index_url: "http://pypi.lab/simple"}}
  children:
    hub_mirror:
      hosts:
        mirror-01: {{ansible_host: 10.1.0.5{mirror}}}
    sparks:
      hosts:
        spark-01: {{operator_users: [nvidia]}}
        spark-02: {{hub_endpoint: "https://huggingface.co"}}
      {extra}
"""


def _plans(fleet_file, mirror="", extra="", profile="eagle3"):
    fleet_file(FLEET.format(mirror=mirror, extra=extra))
    return build_plans(load_inventory_or_fail(), profile, resolve=profile is not None, deploying=True)


def _problems(fleet_file, **kw):
    with pytest.raises(PlanError) as exc:
        _plans(fleet_file, **kw)
    return exc.value.lines


# ---- hub_endpoint defaults to the mirror -------------------------------------------------------------------
def test_other_hosts_default_to_the_mirror_and_the_controller_keeps_the_hub(fleet_file):
    plans = _plans(fleet_file)
    m, s1, s2 = plans["mirror-01"], plans["spark-01"], plans["spark-02"]
    assert m.is_mirror and not s1.is_mirror and s1.uses_mirror and not plans["spark-02"].uses_mirror
    assert m.settings.hub_endpoint == "http://hub.lab:8999"  # the mirror's upstream
    assert s1.settings.hub_endpoint == "http://10.1.0.5:8090"  # the mirror, from its ansible_host and mirror_port
    assert s1.settings.controller_endpoint == "http://hub.lab:8999"  # lookups still go upstream
    assert s2.settings.hub_endpoint == "https://huggingface.co"  # a host's own hub_endpoint wins


def test_mirror_address_and_port_and_group_override(fleet_file):
    plans = _plans(fleet_file, mirror=", mirror_address: mirror.lab, mirror_port: 9000",
                   extra='vars: {hub_endpoint: "http://other.lab:1"}')
    assert plans["spark-01"].settings.hub_endpoint == "http://other.lab:1"  # set by the group sparks
    plans = _plans(fleet_file, mirror=", mirror_address: mirror.lab, mirror_port: 9000")
    assert plans["spark-01"].settings.hub_endpoint == "http://mirror.lab:9000"


def test_no_mirror_group_changes_nothing(fleet_file):
    fleet_file("all:\n  hosts:\n    spark-01: {hf_token_required: false}\n")
    plans = build_plans(load_inventory_or_fail(), "eagle3")
    assert plans["spark-01"].settings.hub_endpoint == "https://huggingface.co"
    assert not plans["spark-01"].uses_mirror and plans["spark-01"].mirror_url is None


# ---- validation: one line per problem ------------------------------------------------------------------------
@pytest.mark.parametrize("var, value, expect", [
    ("mirror_port", "70000", "mirror-01: mirror_port: "),
    ("mirror_bind", "'all'", "mirror-01: mirror_bind: 'all' is not an IP address"),
    ("mirror_allowed_networks", "['10.0.0.0/33']",
     "mirror-01: mirror_allowed_networks: '10.0.0.0/33' is not a network in CIDR form"),
    ("mirror_allowed_networks", "[]", "mirror-01: mirror_allowed_networks: is empty"),
    ("mirror_requirement", "'olah; rm -rf /'", "mirror-01: mirror_requirement: "),
    ("mirror_python", "'python3 -c x'", "mirror-01: mirror_python: "),
    ("mirror_cache_dir", "'relative/dir'", "mirror-01: mirror_cache_dir: "),
    ("mirror_address", "'bad host$(x)'", "mirror-01: mirror_address: "),
    ("hub_endpoint", "'https://artifactory.lab/api/huggingfaceml/hf'", "mirror-01: hub_endpoint: "),
    ("hub_fallback", "'maybe'", "mirror-01: hub_fallback: "),
])
def test_bad_mirror_vars_are_one_line(fleet_file, var, value, expect):
    lines = _problems(fleet_file, mirror=f", {var}: {value}", profile=None)
    assert any(line.startswith(expect) for line in lines), lines
    assert all("\n" not in line and "Traceback" not in line for line in lines)


def test_cli_check_exits_2_with_the_line(fleet_file, tmp_path):
    from click.testing import CliRunner

    from specfleet.cli import main
    fleet_file(FLEET.format(mirror=", mirror_allowed_networks: [nonsense]", extra=""))
    inv = tmp_path / "inventory.py"
    inv.write_text("")
    deploy = tmp_path / "eagle3.py"
    deploy.write_text('PROFILE = "eagle3"\n')
    result = CliRunner().invoke(main, ["check", str(inv), str(deploy)])
    assert result.exit_code == 2
    assert "mirror-01: mirror_allowed_networks: 'nonsense' is not a network in CIDR form" in result.output
    assert "Traceback" not in result.output


# ---- rendered files --------------------------------------------------------------------------------------------
def test_rendered_units_and_config(fleet_file):
    plans = _plans(fleet_file, mirror=", mirror_allowed_networks: ['10.1.0.0/16', 192.168.7.9]", profile=None)
    plan = plans["mirror-01"]
    files = mirror_files(plan.settings, plan.connection)
    p = MirrorLayout("/var/lib/specfleet-mirror")
    socket, service, config = files[p.socket], files[p.service], files[p.config]
    assert "ListenStream=0.0.0.0:8090" in socket
    assert "IPAddressDeny=any\n" in socket and "IPAddressAllow=10.1.0.0/16 192.168.7.9/32\n" in socket
    assert "IPAddressDeny" not in service  # olah itself must reach the upstream Hub
    assert re.search(r"^ExecStart=/var/lib/specfleet-mirror/venv/bin/python -m olah.server --config "
                     r"/var/lib/specfleet-mirror/olah.toml --log-path /var/lib/specfleet-mirror/logs$", service, re.M)
    assert "Environment=GIT_PYTHON_REFRESH=quiet" in service  # olah starts on a host without git
    assert "User=specfleet-mirror" in service
    assert "ReadWritePaths=/var/lib/specfleet-mirror/repos /var/lib/specfleet-mirror/logs" in service
    assert "127.0.0.1:18090" in files[p.proxy]
    assert 'host = "127.0.0.1"' in config and "port = 18090" in config
    assert 'hf-scheme = "http"' in config and 'hf-netloc = "hub.lab:8999"' in config
    assert 'hf-lfs-netloc = "hub.lab:8999"' in config
    assert 'mirror-netloc = "10.1.0.5:8090"' in config and "xet-passthrough = false" in config


def test_upstream_huggingface_uses_its_lfs_host(fleet_file):
    fleet_file("all:\n  vars: {hf_token_required: false}\n  children:\n    hub_mirror:\n      hosts:\n        m1:\n")
    plan = build_plans(load_inventory_or_fail(), None, resolve=False)["m1"]
    config = mirror_files(plan.settings, plan.connection)[MirrorLayout(plan.settings.mirror_cache_dir).config]
    assert 'hf-scheme = "https"' in config and 'hf-netloc = "huggingface.co"' in config
    assert 'hf-lfs-netloc = "cdn-lfs.huggingface.co"' in config and 'mirror-netloc = "m1:8090"' in config


# ---- @fake deploys ---------------------------------------------------------------------------------------------
MIRROR_FACT = "export C="


def _host_programs() -> dict[str, str]:
    """The host tool and the modules it imports from its directory, as the package holds them."""
    return {name: program_text(HOST_PROGRAMS[name]) for name in (HOST_TOOL, *MODULES)}


def _mirror_lines(plan, converged: bool, free: int = 500 * 10**9, python: str = "3.11") -> list[str]:
    s, p = plan.settings, MirrorLayout(plan.settings.mirror_cache_dir)
    lines = [f"python\t{python}", "venv_module\tyes", f"free\t{free}"]
    if converged:
        lines += ["olah\t0.5.4", "user\t998", "active\tactive\tactive", "enabled\tenabled\tenabled"]
        lines += [f"sha\t{sha256(content)}\t{plan.paths.bin}/{name}" for name, content in _host_programs().items()]
        lines += [f"sha\t{sha256(c)}\t{path}" for path, c in mirror_files(s, plan.connection).items()]
        lines += [f"dir\t755|root|root\t{d}" for d in (p.cache_dir, s.data_dir, plan.paths.bin)]
        lines += [f"dir\t750|specfleet-mirror|specfleet-mirror\t{d}" for d in (p.repos, p.logs)]
        lines += [f"dir\t700|root|root\t{s.secrets_dir}"]
        if s.hf_token is not None:
            lines += [f"sha\t{sha256(s.hf_token.get_secret_value() + chr(10))}\t{plan.paths.token_file}"]
    return lines


def test_parse_mirror_state():
    st = parse_mirror_state(["python\t3.12", "olah\t0.5.4", "active\tactive\tinactive", "free\t123",
                             "commit\t1000\topenai/gpt-oss-120b/resolve/" + "a" * 40, "user\t"])
    assert st.python == "3.12" and st.olah == "0.5.4" and (st.service, st.socket) == ("active", "inactive")
    assert st.free_bytes == 123 and st.cached_bytes == 1000 and not st.user


def _mirror_only(fleet_file, responses):
    plans = _plans(fleet_file, profile=None)
    state = run_deploy({"mirror-01": plans["mirror-01"]}, mirror_setup, responses=responses)
    return plans["mirror-01"], state, executed(state)["mirror-01"]


def test_fresh_mirror_gets_olah_units_and_a_running_service(fleet_file):
    plan, state, cmds = _mirror_only(fleet_file, lambda p: {MIRROR_FACT: _mirror_lines(p, converged=False)})
    text = "\n".join(cmds)
    assert not state.failed_hosts
    for needle in ("useradd --system",
                   "install -d -m 750 -o specfleet-mirror -g specfleet-mirror /var/lib/specfleet-mirror/repos",
                   "python3 -m venv /var/lib/specfleet-mirror/venv",
                   "/var/lib/specfleet-mirror/venv/bin/pip install -q --disable-pip-version-check "
                   "--index-url http://pypi.lab/simple --trusted-host pypi.lab olah==0.5.4",
                   "systemctl daemon-reload", f"systemctl enable {NAME}.service {NAME}-proxy.socket",
                   f"systemctl restart {NAME}.service", "/etc/systemd/system/specfleet-hub-mirror-proxy.socket"):
        assert needle in text, needle
    assert "http://127.0.0.1:18090/" in text  # olah must answer before the deploy calls it done


def test_fresh_mirror_gets_the_host_tool_and_the_modules_it_imports(fleet_file):
    """The warm-up runs as a host job: specfleet-host imports layout.py and hostlib.py from its own directory."""
    plan, state, cmds = _mirror_only(fleet_file, lambda p: {MIRROR_FACT: _mirror_lines(p, converged=False)})
    status = cmds[0]
    assert not state.failed_hosts and status.startswith(MIRROR_FACT)
    for name in (HOST_TOOL, *MODULES):  # the one status read reports each of them
        assert f"{plan.paths.bin}/{name}" in status, name
    writes = {c for c in cmds if f"{plan.paths.bin}/" in c and "chmod" in c}
    for name, mode in ((HOST_TOOL, "755"), *((m, "644") for m in MODULES)):
        path = f"{plan.paths.bin}/{name}"
        written = [c for c in writes if f"chmod {mode} {path}.specfleet-tmp" in c and "chown root:root" in c]
        assert written, (name, writes)
    assert len(writes) == 1 + len(MODULES)


def test_converged_mirror_only_reads_its_status(fleet_file):
    plan, state, cmds = _mirror_only(fleet_file, lambda p: {MIRROR_FACT: _mirror_lines(p, converged=True)})
    assert not state.failed_hosts and changed_ops(state)["mirror-01"] == []
    assert len(cmds) == 1 and cmds[0].startswith(MIRROR_FACT)


def test_changed_allowed_networks_recreates_the_socket(fleet_file):
    plans = _plans(fleet_file, profile=None)
    old = _mirror_lines(plans["mirror-01"], converged=True)
    plans = _plans(fleet_file, mirror=", mirror_allowed_networks: [10.1.0.0/16]", profile=None)
    state = run_deploy({"mirror-01": plans["mirror-01"]}, mirror_setup, responses=lambda p: {MIRROR_FACT: old})
    text = "\n".join(executed(state)["mirror-01"])
    assert "pip install" not in text and "useradd" not in text
    assert f"systemctl stop {NAME}-proxy.service {NAME}-proxy.socket; systemctl start {NAME}-proxy.socket" in text


@pytest.mark.parametrize("python, free, expect", [
    ("3.9", 500 * 10**9, "olah needs >= 3.10"),
    ("", 500 * 10**9, "python3 not found"),
])
def test_mirror_preflight_refuses_with_one_line(fleet_file, python, free, expect):
    plan, state, cmds = _mirror_only(fleet_file, lambda p: {MIRROR_FACT: _mirror_lines(p, False, free, python)})
    assert any(expect in c for c in cmds) and not any("pip install" in c for c in cmds)


def test_mirror_disk_preflight_counts_the_fleets_models(fleet_file):
    plans = _plans(fleet_file)
    need = sum(size for pin in plans["spark-01"].pins.values() for _, size in pin.files)
    responses = lambda p: ({MIRROR_FACT: _mirror_lines(p, False, free=need)} if p.is_mirror else converged_responses(p))  # noqa: E731
    state = run_deploy(plans, converge, "eagle3", responses=responses)
    cmds = executed(state)["mirror-01"]
    assert any("hub mirror preflight: not enough disk under /var/lib/specfleet-mirror" in c for c in cmds)


def _fresh_spark(plan):
    return converged_responses(plan, sizes={path: -1 for paths in __import__("specfleet.serving.status", fromlist=["x"])
                                            .model_paths(plan).values() for path, _ in paths})


def test_converge_warms_the_mirror_before_any_host_fetches(fleet_file):
    plans = _plans(fleet_file)
    responses = lambda p: {MIRROR_FACT: _mirror_lines(p, converged=True)} if p.is_mirror else _fresh_spark(p)  # noqa: E731
    state = run_deploy(plans, converge, "eagle3", responses=responses)
    assert not state.failed_hosts
    mirror = executed(state)["mirror-01"]
    warm = [c for c in mirror if "job start" in c]
    assert len(warm) == 1 and "warm:" in warm[0] and "http://127.0.0.1:18090" in warm[0]
    # exactly the pinned files (each once), nothing else
    pins = {(pin.repo, pin.commit, name, size) for plan in plans.values() if not plan.is_mirror
            for pin in plan.pins.values() for name, size in pin.files}
    for repo, commit, name, size in pins:
        assert f" {repo} {commit} {name} {size}" in warm[0]
    assert warm[0].count(" config.json ") == len({(r, c) for r, c, _, _ in pins})
    # the warm-up operation comes before every fetch in the run's operation order
    order = [state.get_op_meta(h).names for h in state.get_op_order()]
    warm_at = next(i for i, n in enumerate(order) if any("Hub mirror: warm" in x for x in n))
    fetch_at = [i for i, n in enumerate(order) if any("| Fetch " in x for x in n)]
    assert fetch_at and warm_at < min(fetch_at)
    # the mirror serves nothing: no trtllm unit, no docker, no activate (its status read asks about docker-registry)
    assert not [c for c in mirror if not c.startswith(MIRROR_FACT)
                and ("docker" in c or " activate " in c or "fetch-model" in c)]
    # the sparks download from the mirror (spark-02 set its own hub_endpoint)
    assert any("HF_ENDPOINT=http://10.1.0.5:8090" in c and "HF_HUB_ETAG_TIMEOUT=120" in c
               for c in executed(state)["spark-01"])


def test_converged_fleet_with_mirror_warms_nothing(fleet_file):
    plans = _plans(fleet_file)
    responses = lambda p: {MIRROR_FACT: _mirror_lines(p, converged=True)} if p.is_mirror else converged_responses(p)  # noqa: E731
    state = run_deploy(plans, converge, "eagle3", responses=responses)
    assert not state.failed_hosts
    assert len(executed(state)["mirror-01"]) == 1  # its status read
    for spark in ("spark-01", "spark-02"):
        assert changed_ops(state)[spark] == []


def _warm_fails(p):
    """Responses: a converged mirror whose warm-up job fails; fresh Sparks."""
    if p.is_mirror:
        return {MIRROR_FACT: _mirror_lines(p, converged=True),
                "job status": '{"id": "j1", "key": "warm", "state": "failed", "exit": 1, "message": "upstream 503"}'}
    return _fresh_spark(p)


def test_failed_warm_fails_the_stage_with_a_line_naming_the_mirror(fleet_file, caplog):
    plans = _plans(fleet_file)
    state = run_deploy(plans, converge, "eagle3", responses=_warm_fails)
    failed = {h.name.removeprefix("@fake/") for h in state.failed_hosts}
    assert failed == {"mirror-01", "spark-01"}  # spark-02 downloads from the Hub itself (its own hub_endpoint)
    assert not [c for c in executed(state)["spark-01"] if "fetch-model --repo" in c or " activate " in c]
    assert "hub mirror mirror-01 (http://10.1.0.5:8090) failed to warm; not staging from it" in caplog.text


def test_failed_warm_with_hub_fallback_fetches_from_the_upstream_hub_with_a_warning(fleet_file, caplog):
    plans = _plans(fleet_file, extra="  spark-03: {hub_fallback: true}")
    state = run_deploy(plans, converge, "eagle3", responses=_warm_fails)
    failed = {h.name.removeprefix("@fake/") for h in state.failed_hosts}
    assert failed == {"mirror-01", "spark-01"}  # spark-01 has no hub_fallback: refuses, as without a mirror
    fetches = [c for c in executed(state)["spark-03"] if "fetch-model" in c and "job start" in c]
    assert len(fetches) == 2 and all("HF_ENDPOINT=http://hub.lab:8999" in c for c in fetches), fetches
    assert all("@" in c and " from http://hub.lab:8999' -- " in c for c in fetches), fetches  # keys of their own
    assert not [c for c in executed(state)["spark-03"] if "HF_ENDPOINT=http://10.1.0.5:8090" in c]
    warning = [r for r in caplog.records
               if "hub_fallback: fetching from the Hub directly (http://hub.lab:8999)" in r.getMessage()]
    assert warning and warning[0].levelname == "WARNING" and "spark-03" in warning[0].getMessage()
    assert "hub mirror mirror-01 (http://10.1.0.5:8090) failed to warm; not staging from it" in caplog.text  # spark-01


def test_warm_skips_files_whose_content_the_host_has(fleet_file):
    """A new commit's unchanged file (same blob) is linked from the host's cache: the mirror does not fetch it."""
    from specfleet.serving.status import blob_path, model_paths
    plans = _plans(fleet_file)
    spark = plans["spark-01"]
    pin = spark.pins["draft"]
    kept = dict(zip((n for n, _ in pin.files), pin.blobs, strict=True))["config.json"]

    def responses(p):
        if p.is_mirror:
            return {MIRROR_FACT: _mirror_lines(p, converged=True)}
        out = _fresh_spark(p)
        if p is spark:  # spark-01 lacks the draft's snapshot files but has config.json's content (its blob)
            from tests.unit.fakehost import SPECFLEET_FACT
            out[SPECFLEET_FACT] = out[SPECFLEET_FACT] + [f"size\t100\t{blob_path(p, pin, kept)}"]
        return out
    for h in ("spark-02",):
        del plans[h]
    state = run_deploy(plans, converge, "eagle3", responses=responses)
    warm = next(c for c in executed(state)["mirror-01"] if "job start" in c)
    assert f" {pin.repo} {pin.commit} config.json " not in warm
    assert f" {pin.repo} {pin.commit} model-00001-of-00002.safetensors " in warm
    assert model_paths(spark)  # (the fetch itself still links config.json into the new snapshot)


class _Rollout:
    """specfleet rollout with run_on recorded (no hosts): which deploy ran on which hosts, in order."""

    def __init__(self, monkeypatch, fail: dict | None = None):
        from specfleet.fleet import run as runner
        self.calls: list[tuple[str, list[str]]] = []
        self.fail = fail or {}
        monkeypatch.setattr(runner, "run_on", self.run_on)

    def run_on(self, plans, hosts, fn, *args):
        name = getattr(fn, "__name__", str(fn))
        self.calls.append((name, list(hosts)))
        return set(self.fail.get(name, ())) & set(hosts)


def _rollout(fleet_file, tmp_path, monkeypatch, fail=None):
    from click.testing import CliRunner

    from specfleet.cli import main
    fleet_file(FLEET.format(mirror="", extra=""))
    (tmp_path / "inventory.py").write_text("")
    (tmp_path / "eagle3.py").write_text('PROFILE = "eagle3"\n')
    rec = _Rollout(monkeypatch, fail)
    result = CliRunner().invoke(main, ["rollout", str(tmp_path / "inventory.py"), str(tmp_path / "eagle3.py")])
    return rec, result


def test_rollout_warms_the_mirror_before_it_stages_and_never_switches_it(fleet_file, tmp_path, monkeypatch):
    rec, result = _rollout(fleet_file, tmp_path, monkeypatch)
    names = [n for n, _ in rec.calls]
    assert names.index("warm_phase") < names.index("stage"), rec.calls
    assert dict(rec.calls)["warm_phase"] == ["mirror-01", "spark-01"]  # spark-02 downloads from its own hub_endpoint
    for name, hosts in rec.calls:
        if name != "warm_phase":
            assert "mirror-01" not in hosts, (name, hosts)
    assert "mirror-01" not in result.output.split("rollout ")[-1]  # not in the summary table


def test_rollout_with_a_failed_warm_stages_only_the_hosts_that_do_not_use_the_mirror(fleet_file, tmp_path, monkeypatch):
    rec, result = _rollout(fleet_file, tmp_path, monkeypatch, fail={"warm_phase": {"mirror-01"}})
    assert dict(rec.calls)["stage"] == ["spark-02"]
    assert "spark-01" in result.output and "hub mirror mirror-01 (http://10.1.0.5:8090) failed to warm" in result.output
    assert result.exit_code == 1  # one failure > --max-fail 0: halted, nothing switched


def test_rollout_with_a_failed_warm_stages_hub_fallback_hosts_from_the_upstream_hub(fleet_file, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from specfleet.cli import main
    fleet_file(FLEET.format(mirror="", extra="  spark-03: {hub_fallback: true}"))
    (tmp_path / "inventory.py").write_text("")
    (tmp_path / "eagle3.py").write_text('PROFILE = "eagle3"\n')
    seen = {}
    rec = _Rollout(monkeypatch, fail={"warm_phase": {"mirror-01"}})
    original = rec.run_on

    def run_on(plans, hosts, fn, *args):
        if fn.__name__ == "stage":
            seen.update({h: plans[h].mirror_down for h in hosts})
        return original(plans, hosts, fn, *args)
    from specfleet.fleet import run as runner
    monkeypatch.setattr(runner, "run_on", run_on)
    CliRunner().invoke(main, ["rollout", str(tmp_path / "inventory.py"), str(tmp_path / "eagle3.py")])
    assert seen == {"spark-02": False, "spark-03": True}  # spark-01 (no hub_fallback) refused; spark-03 stages upstream


def test_mirror_host_gets_the_token_root_only_from_stdin_and_the_warm_up_names_only_its_path(fleet_file):
    from tests.unit.conftest import TOKEN
    plan, state, cmds = _mirror_only(fleet_file, lambda p: {MIRROR_FACT: _mirror_lines(p, converged=False)})
    text = "\n".join(cmds)
    assert not state.failed_hosts
    assert f"install -d -m 700 -o root -g root {plan.settings.secrets_dir}" in text
    assert f"chmod 600 {plan.settings.secrets_dir}/.hf_token.tmp" in text
    assert TOKEN not in text  # on stdin only
    # converged: the token file matches -> not written again
    plan, state, cmds = _mirror_only(fleet_file, lambda p: {MIRROR_FACT: _mirror_lines(p, converged=True)})
    assert not [c for c in cmds if ".hf_token.tmp" in c]


def test_warm_up_reads_gated_repos_with_the_token_file(fleet_file):
    from tests.unit.conftest import TOKEN
    plans = _plans(fleet_file)
    responses = lambda p: {MIRROR_FACT: _mirror_lines(p, converged=True)} if p.is_mirror else _fresh_spark(p)  # noqa: E731
    state = run_deploy(plans, converge, "eagle3", responses=responses)
    warm = next(c for c in executed(state)["mirror-01"] if "job start" in c)
    assert f"http://127.0.0.1:18090 {plans['mirror-01'].paths.token_file} " in warm and TOKEN not in warm


def test_mirror_deploy_needs_the_token_like_a_profile_run_and_read_only_commands_do_not(fleet_file, monkeypatch):
    monkeypatch.delenv("HF_TOKEN")
    fleet_file(FLEET.format(mirror=", hf_token_required: true", extra=""))
    with pytest.raises(PlanError) as exc:
        build_plans(load_inventory_or_fail(), None, resolve=False, deploying=True)  # pyinfra ... deploys/hub_mirror.py
    assert [line for line in exc.value.lines
            if line.startswith("mirror-01: hf_token: no Hugging Face token")], exc.value.lines
    plans = build_plans(load_inventory_or_fail(), None, resolve=False)  # specfleet mirror status, status, logs
    assert plans["mirror-01"].settings.hf_token is None
