"""A fleet project's deploy files run as `pyinfra inventory.py deploys/X.py` runs them, on pyinfra's @fake connector.

The project is a copy of the scaffold of version 0.1.0 (tests/unit/scaffold_v010: what `specfleet init` wrote, and
what users' projects contain). Its inventory.py loads the fleet file as pyinfra's command line loads it (the deploy
file named on the command line picks the profile); each deploy file is then executed once per host in pyinfra's
prepare stage, operations identified by their call sites as the command line identifies them (fakehost.run_deploy
with `cli`), and run. specfleet is reached the way a project reaches it, through inventory.py and the deploy files;
what the hosts answer comes from the unit tests' helpers.

FLEET has every role: two Sparks serving eagle3, a TP=2 pair, a Hub mirror and a gateway. `answers` makes a fleet's
hosts answer as where nothing of specfleet is yet, where every deploy has run, or where a rollback has.
"""

from __future__ import annotations

import importlib
import re
import runpy
import shutil
import sys
import types
from collections.abc import Callable
from pathlib import Path
from unittest import mock

from pyinfra.api import State
from pyinfra.context import ctx_config, ctx_host, ctx_state

import specfleet.fleet.project
from tests.unit.fakehost import SPECFLEET_FACT, converged_responses, run_deploy, write_fake_lock
from tests.unit.test_gateway_deploy import KEY as GATEWAY_KEY
from tests.unit.test_gateway_deploy import _status as gateway_status
from tests.unit.test_mirror import MIRROR_FACT, _mirror_lines
from tests.unit.test_pair_trust import HOST_KEY_FILE, NEW_PUB, NEW_SWITCH, PAIR_USER, WORKER_HOST_KEY, _converged_trust

OPERATION = importlib.import_module("pyinfra.api.operation")  # the module (pyinfra.api's `operation` is its decorator)
PYINFRA_DIR = str(Path(OPERATION.__file__).parents[1])
SCAFFOLD = Path(__file__).parent / "scaffold_v010"
IMAGE = "nvcr.io/nvidia/tensorrt-llm/release:1.3.0rc12"  # the pair's profile needs 1.3.0rc12 or newer
# The mirror says what it serves: without `serves`, the pair's deploy refuses it (a host outside a pair group).
FLEET = f"""\
all:
  vars: {{ssh_user: spark, _sudo: true, operator_users: [spark], image: "{IMAGE}"}}
  children:
    hub_mirror:
      hosts:
        mirror-01: {{ssh_hostname: 10.0.0.5, serves: eagle3}}
    gateway:
      hosts:
        gw-1: {{ssh_hostname: 10.0.0.2}}
    sparks:
      vars: {{serves: eagle3}}
      hosts:
        spark-01: {{ssh_hostname: 10.0.0.11}}
        spark-02: {{ssh_hostname: 10.0.0.12, extra_llm_api_options: {{speculative_config: {{max_draft_len: 3}}}}}}
    pair_a:
      vars: {{serves: qwen3_eagle3_pair}}
      hosts:
        spark-03: {{ssh_hostname: 10.0.0.13, pair_role: head}}
        spark-04: {{ssh_hostname: 10.0.0.14, pair_role: worker}}
"""
API_KEYS = f"ci {GATEWAY_KEY}\n"  # $SPECFLEET_API_KEYS: the gateway's keys
EARLIER = "r-0000000000aa"  # the release the converged Sparks served before their current one
FRESH_GATEWAY = ["haproxy\t", "features\t", "active\tinactive", "enabled\tdisabled", "admin\tno", "dpkg_busy\t"]
REFUSAL = re.compile(r"^echo .* >&2; exit 1$")  # an operation that refuses: it fails its host


def project(tmp_path: Path, fleet: str | None = FLEET) -> Path:
    """A copy of the vendored scaffold with `fleet` as its fleet file (None: the example `specfleet init` wrote),
    and the lock `specfleet lock` would write for it (fake pins)."""
    root = tmp_path / "project"
    shutil.copytree(SCAFFOLD, root, ignore=shutil.ignore_patterns("__pycache__"))
    if fleet is not None:
        (root / "inventory" / "fleet.yml").write_text(fleet)
    write_fake_lock(root / "inventory" / "fleet.yml")
    return root


def load_inventory_py(root: Path, *argv: str) -> dict:
    """The globals of the project's inventory.py, loaded for `pyinfra <root>/inventory.py ARGV...`; the run's project
    it sets (its own directory) is put back afterwards."""
    saved = sys.argv, specfleet.fleet.project._project
    sys.argv = ["pyinfra", str(root / "inventory.py"), *argv]
    try:
        return runpy.run_path(str(root / "inventory.py"))
    finally:
        sys.argv, specfleet.fleet.project._project = saved


def plans_for(root: Path, deploy: str, *data: str) -> dict:
    """Host name -> the plan its host data carries, for `pyinfra inventory.py deploys/<deploy>.py [--data K=V]...`."""
    argv = [str(root / "deploys" / f"{deploy}.py"), *(arg for kv in data for arg in ("--data", kv))]
    return {name: hostdata["specfleet"] for name, hostdata in load_inventory_py(root, *argv)["all"]}


# Host name -> what it added, in its order: (operation hash, the name it gave it, the code that added it: the file
# and function of each frame from the deploy file in, pyinfra's own left out; no line numbers).
Trace = dict[str, list[tuple[str, str, tuple[tuple[str, str], ...]]]]


def run_file(root: Path, deploy: str, answers: Callable[[str], dict], *data: str) -> tuple[State, Trace]:
    """Run deploys/<deploy>.py of the project on its fleet's fake hosts, as pyinfra's command line does;
    `answers(name)`: the host's fact answers. Also returns what each host added, from where."""
    plans = plans_for(root, deploy, *data)
    path = str(root / "deploys" / f"{deploy}.py")
    trace: Trace = {}
    shared = OPERATION.ensure_shared_op_meta  # called once per host and operation, right after its hash is made

    def traced(state, op_hash, op_order, global_arguments, names):
        host = ctx_host.get().name.removeprefix("@fake/")
        trace.setdefault(host, []).append((op_hash, ", ".join(sorted(names)), _code_path(path)))
        return shared(state, op_hash, op_order, global_arguments, names)

    with mock.patch.object(OPERATION, "ensure_shared_op_meta", traced):
        state = run_deploy(plans, _exec_deploy, path, cli=True, responses=lambda p: answers(p.settings.host))
    return state, trace


def _code_path(deploy_file: str) -> tuple[tuple[str, str], ...]:
    out, frame = [], sys._getframe(2)  # the caller of `traced`
    while frame is not None:
        code = frame.f_code
        if not code.co_filename.startswith(PYINFRA_DIR):
            out.append((code.co_filename, code.co_name))
        if code.co_filename == deploy_file:
            break
        frame = frame.f_back
    return tuple(reversed(out))


def _exec_deploy(path: str) -> None:
    """What pyinfra's command line does with a deploy file for a host (pyinfra_cli.util.load_deploy_file): the file's
    code executed with `__file__` set, in a greenlet of the state's pool, with the host and a copy of the config set
    for it. The code runs in a module object that sys.modules holds meanwhile, so that `inspect` (pyinfra reads each
    operation's call stack with it) finds the file's module at once instead of searching every loaded module for it
    on each operation: the same stack, in less time."""
    state, host = ctx_state.get(), ctx_host.get()
    state.current_deploy_filename = path
    with open(path, encoding="utf-8") as f:
        code = compile(f.read(), path, "exec")
    module = types.ModuleType(f"specfleet_deploy_{Path(path).stem}")
    module.__file__ = path

    def load() -> None:
        with ctx_config.use(state.config.copy()), ctx_host.use(host):
            exec(code, module.__dict__)

    sys.modules[module.__name__] = module
    try:
        state.pool.spawn(load).get()
    finally:
        del sys.modules[module.__name__]


def _pair_link(plan) -> list[str]:
    """A pair host's network as its status read reports it before the link is configured (the link's addresses
    come with the converged status)."""
    s = plan.settings
    lines = [f"ifaces\tlo eth0 {' '.join(s.pair_link_interfaces)}", f"addr\teth0\t{plan.connection['ssh_hostname']}/24"]
    return lines + [f"link\t{i}\tup\t" for i in s.pair_link_interfaces]


def answers(root: Path, state: str, profile: str | None = None) -> Callable[[str], dict]:
    """Host name -> its fact answers, in a fleet where nothing of specfleet is yet (`fresh`), where every deploy has
    run (`converged`: each Spark serves the release of the profile it `serves`, else of `profile`, and keeps EARLIER
    to return to) or which was then rolled back to EARLIER (`rolled back`)."""
    plans = plans_for(root, "cleanup")  # a deploy without a profile: every host, in its role
    profiles = {p.settings.serves or profile for p in plans.values() if not (p.is_mirror or p.is_gateway)}
    serving = {} if state == "fresh" else {name: plan for p in sorted(profiles - {None})
                                          for name, plan in plans_for(root, p).items()
                                          if (plan.settings.serves or profile) == p}
    out: dict[str, dict] = {}
    for name, plan in plans.items():
        role = plan.settings.pair_role
        if plan.is_mirror:
            out[name] = {MIRROR_FACT: _mirror_lines(plan, converged=state != "fresh")}
        elif plan.is_gateway:
            out[name] = {"gateway.GatewayStatus": FRESH_GATEWAY if state == "fresh" else gateway_status(plan)}
        elif state == "fresh":
            lines = ["docker\tok", 'runtimes\t{"nvidia":{}}', "free\t999999999999"]
            lines += [f"groups\t{user}\t{user}" for user in plan.settings.operator_users]  # not in docker's group
            lines += _pair_link(plan) if role else []
            if role == "worker":  # no MPI login yet; its sshd's host key, which the head pins
                lines += [f"groups\t{PAIR_USER}\t(missing)", f"pubkey\t{HOST_KEY_FILE}\t{WORKER_HOST_KEY} root@{name}"]
            out[name] = {SPECFLEET_FACT: lines, "uname -s": "Linux"}
        else:
            spark = serving[name]
            current, previous = ((spark.release_id, EARLIER) if state == "converged" else (EARLIER, spark.release_id))
            out[name] = converged_responses(spark, current=current, previous=previous, releases=[current, previous],
                                            gate={"release": current, "result": "passed"})
            if role:
                out[name][SPECFLEET_FACT] = out[name][SPECFLEET_FACT] + _pair_link(spark) + _converged_trust(spark)
        out[name] = {REFUSAL: {"success": False, "stderr": "refused"}, **out[name]}
        if role == "head":  # its key generation prints the new public keys
            out[name]["ssh-keygen"] = [f"{NEW_PUB} specfleet-pair_a", f"{NEW_SWITCH} specfleet-pair_a-switch"]
    return out.__getitem__
