"""Hostile input: values are validated by what they are, and quoted for where they go.

The unit file is checked with a reference parser of systemd's own quoting rules (systemd.syntax(7),
systemd.service(5) "Command lines"), not with shlex: systemd processes C escapes inside quotes as well,
expands %-specifiers and $VARIABLES, and a lone `;` separates commands.
"""

import hashlib
import os
import random
import shlex
import shutil
import subprocess

import pytest

from specfleet.engines.command import serve_args
from specfleet.fleet.settings import build_settings
from specfleet.fleet.steps.tools import tools
from specfleet.host.layout import CONTAINER_MEMORY_VAR
from specfleet.serving.render import docker_run_args, memory_cap_args, systemd_word, unit_text
from specfleet.serving.steps.encodings import encodings
from tests.unit.fakehost import executed, make_plans, run_deploy

# ---- a reference parser of systemd's command-line quoting ------------------------------------------

_C_ESCAPES = {"\\": "\\", '"': '"', "'": "'", "n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b",
              "f": "\f", "v": "\v", "s": " ", " ": " "}


MEANT = "${" + CONTAINER_MEMORY_VAR + "}"  # the variable specfleet means: drop-caches' cap (render.memory_cap_args)
EXPANDED = "<expanded by systemd>"  # what the parser returns for MEANT, so a test sees which words systemd expands


def _expand(word: str) -> str:
    """%% -> % (specifiers) and $$ -> $ (environment variables); any other specifier or variable is an error
    here, because specfleet never means one but MEANT (returned as EXPANDED)."""
    out, i = [], 0
    while i < len(word):
        c = word[i]
        if word.startswith(MEANT, i):
            out.append(EXPANDED)
            i += len(MEANT)
        elif c in "%$":
            if word[i + 1:i + 2] != c:
                raise ValueError(f"unescaped {c!r} in {word!r} would be expanded by systemd")
            out.append(c)
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def systemd_split(line: str) -> list[str]:
    """The argv systemd builds from the value of an Exec*= line."""
    words, i, n = [], 0, len(line)
    while True:
        while i < n and line[i] in " \t":
            i += 1
        if i >= n:
            return [_expand(w) for w in words]
        start, word, quote = i, [], None
        while i < n and (quote or line[i] not in " \t"):
            c = line[i]
            if c == "\\":  # C escapes, inside and outside quotes
                e = line[i + 1:i + 2]
                if e == "x":
                    word.append(chr(int(line[i + 2:i + 4], 16)))
                    i += 4
                elif e in _C_ESCAPES and e:
                    word.append(_C_ESCAPES[e])
                    i += 2
                else:
                    raise ValueError(f"unknown escape at {line[i:i + 2]!r}")
            elif quote is None and c in "\"'":
                quote, i = c, i + 1
            elif c == quote:
                quote, i = None, i + 1
            else:
                word.append(c)
                i += 1
        if quote:
            raise ValueError(f"unbalanced {quote} in {line!r}")
        if line[start:i] == ";":
            raise ValueError("a lone ; separates commands in systemd")
        words.append("".join(word))


def unit_lines(unit: str) -> list[str]:
    """Logical lines of a unit file: a trailing backslash is replaced by a space and the next line appended."""
    out: list[str] = []
    pending = ""
    for raw in unit.split("\n"):
        if raw.endswith("\\"):
            pending += raw[:-1] + " "
            continue
        out.append(pending + raw)
        pending = ""
    return out


def exec_line(unit: str, key: str, index: int | None = None) -> list[str]:
    """The one `key=` line's arguments (`index`: of several such lines, e.g. ExecStartPre's)."""
    values = [line.split("=", 1)[1] for line in unit_lines(unit) if line.startswith(f"{key}=")]
    if index is None:
        [value] = values
    else:
        value = values[index]
    return systemd_split(value)


def test_parser_follows_systemd_quoting():
    assert systemd_split(r'''a "b c" 'd "e"' "f\"g" "h\\i" \x41 "%%" "$$X" "j'k"''') == \
        ["a", "b c", 'd "e"', 'f"g', "h\\i", "A", "%", "$X", "j'k"]
    for bad in ('"unbalanced', "a ; b", "%n", "$HOME", r"\q"):
        with pytest.raises(ValueError):
            systemd_split(bad)


# ---- systemd_word ------------------------------------------------------------------------------------

@pytest.mark.parametrize("plain", ["--ipc=host", "memlock=-1", "stack=67108864", "/var/lib/specfleet/hf:/root/.cache/huggingface:ro",
                                   "nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc6", "HF_HUB_OFFLINE=1", "openai/gpt-oss-120b"])
def test_plain_words_stay_bare(plain):
    assert systemd_word(plain) == plain


@pytest.mark.parametrize("value,rendered", [
    ("a b", '"a b"'), ("it's", '"it\'s"'), ('say "hi"', '"say \\"hi\\""'), ("C:\\dir", '"C:\\\\dir"'),
    ("100%", '"100%%"'), ("$HOME", '"$$HOME"'), (";", '";"'), ("#x", '"#x"'), ("", '""'), ("a\nb", '"a\\nb"'),
])
def test_systemd_word_escapes(value, rendered):
    assert systemd_word(value) == rendered
    assert systemd_split(rendered) == [value]


def test_systemd_word_round_trips_any_string():
    rng = random.Random(20240611)
    alphabet = "ab Z09 \t\n\r\x00\x01\x7f'\"\\%$;#=:,/@-_.{}()*?~é€"
    for _ in range(2000):
        value = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        rendered = systemd_word(value)
        assert "\n" not in rendered and "\r" not in rendered
        assert systemd_split(f"x {rendered} y") == ["x", value, "y"], (value, rendered)


# ---- the rendered unit ---------------------------------------------------------------------------------

HOSTILE_ENV = {
    "SPACES": "a b  c", "SQUOTE": "it's", "DQUOTE": 'say "hi"', "BACKSLASH": "C:\\dir\\", "PERCENT": "100% %n %%",
    "DOLLAR": "$HOME ${PATH} $$", "SEMI": "a ; b;c", "HASH": "#not a comment", "EQUALS": "k=v=w",
    "ESCAPES": "\\n \\x41 \\\\", "MIXED": "'\"\\%$;#= x",
    "THE_CAP": "${SPECFLEET_CONTAINER_MEMORY}",
}
INTENDED_EXEC = ["ExecStartPre=", "ExecStartPre=", "ExecStart=", "ExecStop=", "ExecStopPost="]


def _settings(profile="eagle3", **vars):
    plan = make_plans({"spark-01": vars}, profile)["spark-01"]
    return plan.settings


@pytest.mark.parametrize("profile", ["eagle3", "draft_target", "baseline"])
def test_exec_start_parses_to_exactly_the_argument_list(profile):
    s = _settings(profile, container_env=HOSTILE_ENV, serve_host="::1")
    unit = unit_text(s)
    argv = exec_line(unit, "ExecStart")
    pre, cap = memory_cap_args(s)
    assert cap == ["--memory=${SPECFLEET_CONTAINER_MEMORY}", "--memory-swap=${SPECFLEET_CONTAINER_MEMORY}"]
    # systemd expands the cap's two words and nothing else (a value holding "${...}" is escaped: HOSTILE_ENV)
    assert argv[2:4] == [c.replace(MEANT, EXPANDED) for c in cap]
    assert argv == ["/usr/bin/docker", "run", *argv[2:4], *docker_run_args(s), s.image, "trtllm-serve", *serve_args(s)]
    for key, value in HOSTILE_ENV.items():
        assert argv[argv.index(f"{key}={value}") - 1] == "-e"
    assert exec_line(unit, "ExecStartPre", 0) == pre == [f"{s.data_dir}/bin/drop-caches", f"{s.data_dir}/mem-at-start.json",
                                                         "7812500", f"{s.data_dir}/container-memory.env",
                                                         "SPECFLEET_CONTAINER_MEMORY"]
    assert exec_line(unit, "ExecStartPre", 1) == ["-/usr/bin/docker", "rm", "-f", s.serving_unit]
    assert exec_line(unit, "ExecStop")[-1] == s.serving_unit
    exec_lines = [line.split("=", 1)[0] + "=" for line in unit_lines(unit) if line.startswith("Exec")]
    assert exec_lines == INTENDED_EXEC


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_real_systemd_parses_the_unit_without_warnings(tmp_path):
    unit = tmp_path / "specfleet-trtllm.service"
    unit.write_text(unit_text(_settings(container_env=HOSTILE_ENV)))
    out = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60)
    # Parse problems are reported as FILE:LINE: ... (e.g. "Ignoring unknown escape sequences"); a missing
    # docker.service or /usr/bin/docker on this machine is not one.
    assert not [line for line in (out.stdout + out.stderr).splitlines() if f"{unit}:" in line], out.stderr


def test_plain_values_render_without_quotes():
    unit = unit_text(_settings(container_env={"TRT_LLM_DISABLE_LOAD_WEIGHTS_IN_PARALLEL": "1"}))
    assert '"' not in unit and "'" not in unit
    assert " -e TRT_LLM_DISABLE_LOAD_WEIGHTS_IN_PARALLEL=1 " in unit and " --ipc=host " in unit


def test_newline_in_a_value_cannot_add_a_unit_line_even_unvalidated():
    # Validation refuses it (tests/unit/test_check.py); rendering alone must not let it through either.
    s = _settings()
    s = s.model_copy(update={"container_env": {"X": "y\nExecStartPre=/bin/touch /tmp/pwned"}})
    unit = unit_text(s)
    assert [line.split("=", 1)[0] + "=" for line in unit_lines(unit) if line.startswith("Exec")] == INTENDED_EXEC
    assert "X=y\nExecStartPre=/bin/touch /tmp/pwned" in exec_line(unit, "ExecStart")


# ---- validation: hostile is refused, legitimate is accepted -------------------------------------------

GOOD = [
    ("hub_endpoint", "http://10.0.2.2:8080", "http://10.0.2.2:8080"),
    ("hub_endpoint", "https://hf-mirror.example.com/", "https://hf-mirror.example.com"),
    ("controller_hub_endpoint", "https://[::1]:8443/hub", "https://[::1]:8443/hub"),
    ("pip_index_url", "https://pypi.example/simple/", "https://pypi.example/simple"),
    ("tiktoken_base_url", "https://m.example/enc%20files/v~1", "https://m.example/enc%20files/v~1"),
    ("data_dir", "/srv/spec-fleet_2/", "/srv/spec-fleet_2"),
    ("secrets_dir", "/etc/spec.fleet", "/etc/spec.fleet"),
    ("image", "localhost:5000/team/trtllm:1.2.0rc6-standin", None),
    ("image", "specfleet-standin/trtllm-serve:1.2.0rc6-standin", None),
    ("image", "nvcr.io/nvidia/tensorrt-llm/release@sha256:" + "a" * 64, None),
    ("service_name", "trtllm-eagle3.v2", None),
    ("target_revision", "refs/pr/1", None),
    ("draft_revision", "a" * 40, None),
    ("target_revision", "v1.0-rc_2", None),
    ("hub_client_requirement", "huggingface_hub[cli]>=2.4", None),
    ("serve_host", "::1", None),
    ("container_env", {"A_1": "x y 'z' \"w\" \\ % $ ; # ="}, None),
    ("extra_llm_api_options", {"speculative_config": {"speculative_model_dir": "/opt/my-draft_v1.2/"}}, None),
]


@pytest.mark.parametrize("key,value,stored", GOOD, ids=[f"{g[0]}={g[1]!r}"[:60] for g in GOOD])
def test_legitimate_values_are_accepted(key, value, stored):
    settings, problems = build_settings("h", {key: value}, "eagle3")
    assert problems == [] and settings is not None
    if stored is not None:
        assert getattr(settings, key) == stored


def test_every_default_is_accepted():
    for profile in ("eagle3", "draft_target", "baseline", None):
        settings, problems = build_settings("h", {}, profile)
        assert problems == [], problems


def test_problem_lines_stay_one_line():
    _, problems = build_settings("h", {"bad\nkey": 1, "container_env": {"A": "x\ny"}}, "eagle3")
    assert problems and all("\n" not in str(p) for p in problems)


# ---- shell quoting at the use sites ---------------------------------------------------------------------

def _hostile_plan(**update):
    """A valid plan whose settings are then made hostile behind validation's back: quoting must hold alone."""
    plans = make_plans({"spark-01": {}}, "eagle3")
    plan = plans["spark-01"]
    plan.settings = plan.settings.model_copy(update=update)
    return plans, plan


def test_pip_index_url_is_one_quoted_argument():
    url = "https://m.example/simple;touch /tmp/pwned"
    plans, _ = _hostile_plan(pip_index_url=url)
    cmds = executed(run_deploy(plans, tools, responses=lambda p: {}))["spark-01"]
    [install] = [c for c in cmds if " install " in c and "huggingface_hub" in c]
    argv = shlex.split(install)
    assert argv[argv.index("--index-url") + 1] == url


def test_encodings_commands_run_with_hostile_values(tmp_path):
    """Run the generated commands in a real shell with a stand-in curl: the URL reaches curl as one argument,
    nothing is executed from it, and the file lands only when its SHA-256 matches."""
    marker = tmp_path / "pwned"
    content = b"stand-in encoding\n"
    digest = hashlib.sha256(content).hexdigest()
    data_dir = tmp_path / "data"
    (data_dir / "tiktoken").mkdir(parents=True)
    url = f"https://m.example/enc'$(touch {marker})'\"`touch {marker}`\";touch {marker}"
    plans, _ = _hostile_plan(tiktoken_base_url=url, data_dir=str(data_dir),
                             tiktoken_sha256={"o200k_base.tiktoken": digest, "cl100k_base.tiktoken": "0" * 64})
    cmds = executed(run_deploy(plans, encodings, responses=lambda p: {}))["spark-01"]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "curl").write_text('#!/bin/sh\nprintf "%s\\n" "$@" >> "$CURL_LOG"\n'
                                  'while [ "$1" != "-o" ]; do shift; done\nprintf "stand-in encoding\\n" > "$2"\n')
    (bin_dir / "chown").write_text("#!/bin/sh\nexit 0\n")
    for tool in ("curl", "chown"):
        (bin_dir / tool).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "CURL_LOG": str(tmp_path / "curl.log")}
    fetch = [c for c in cmds if "curl " in c or "mv -f " in c]
    assert len(fetch) == 4
    results = []
    for cmd in fetch:
        results.append(subprocess.run(["sh", "-c", cmd], env=env, capture_output=True, text=True))
        if results[-1].returncode:
            break
    assert [r.returncode for r in results] == [0, 0, 1], [r.stderr for r in results]
    assert not marker.exists()
    assert f"{url}/o200k_base.tiktoken" in (tmp_path / "curl.log").read_text().splitlines()
    assert (data_dir / "tiktoken" / "o200k_base.tiktoken").read_bytes() == content
    assert not (data_dir / "tiktoken" / "cl100k_base.tiktoken").exists()
    assert not (data_dir / "tiktoken" / "cl100k_base.tiktoken.part").exists()
    assert results[-1].stderr.strip().splitlines()[-1] == (f"cl100k_base.tiktoken from {url}/cl100k_base.tiktoken failed the download "
                                                            "or SHA-256 check (tiktoken_base_url / tiktoken_sha256)")
