"""The fleet's gateway on the hosts of the `gateway` group (deploys/gateway.py): HAProxy from the distribution, its
config rendered from the fleet file (one backend per model, each Spark's filtering socket a server), the API keys
as SHA-256 digests (root-only), the TLS pair (root-only). Every decision comes from one status read.

- A changed config is checked by HAProxy (`haproxy -c`) under another name before it replaces the running one, then
  HAProxy reloads (master-worker: no connection is dropped); the servers' states (a drain) are saved first.
- Changed keys alone need no reload: the running key map is synced in one transaction (haproxy_admin.py sync-map),
  so a revoked key is refused on its next request, also on a kept-alive connection.
The keys and the TLS key are read on the controller and travel on stdin (steps/jobs.write_root_file)."""

from __future__ import annotations

import re
import shlex

from pyinfra import host, logger
from pyinfra.api import deploy
from pyinfra.operations import apt, python, server

from ...constants import DPKG_LOCK_TIMEOUT_SEC
from ...fleet.status import sha256
from ...fleet.steps.jobs import write_root_file
from ...fleet.steps.state import current_plan, refuse
from ...host.layout import GatewayLayout
from ..render import check_config, gateway_host_files, secret_paths
from ..status import GatewayStatus, admin_command

LAYOUT = GatewayLayout()
NEW, CHECK = ".specfleet-new", ".specfleet-check"  # a file before it is proven; the config that proves them
MIN_HAPROXY = (2, 6)  # http_auth_bearer (2.5) and versioned maps, `prepare map`/`commit map` (2.4); Debian 12: 2.6
SECRET = secret_paths(LAYOUT)  # root-only (0600)
RELOAD = {LAYOUT.config, LAYOUT.models_map, LAYOUT.paths_map, LAYOUT.models_lua, LAYOUT.tls_pem}  # read at (re)load


def _version(text: str) -> tuple[int, ...]:
    """HAProxy's version string (`2.8.5-1ubuntu3`) as a comparable tuple."""
    return tuple(int(x) for x in re.findall(r"\d+", text.split("-")[0])[:2]) or (0,)


def loaded_stamp(wanted: dict[str, str]) -> str:
    """What LAYOUT.loaded_stamp holds once HAProxy runs with `wanted`: a digest of the files it reads at (re)load."""
    return sha256("".join(f"{p} {sha256(wanted[p])}\n" for p in sorted(RELOAD & set(wanted)))) + "\n"


def _work(st, wanted: dict[str, str]) -> tuple[list[str], str | None]:
    """(files that differ, then what HAProxy needs: start | reload | sync | None), from the one status read."""
    changed = [p for p in wanted if st.files.get(p) != f"{'600' if p in SECRET else '644'}|root|root|"
               f"{sha256(wanted[p])}"]
    if not (st.active == "active" and st.admin):
        return changed, "start"
    if set(changed) & RELOAD or not (st.files.get(LAYOUT.loaded_stamp) or "").endswith(
            "|" + sha256(loaded_stamp(wanted))):  # installed by a run that did not get to reload
        return changed, "reload"
    return changed, "sync" if LAYOUT.keys_map in changed else None


ACTIONS = {"start": "enable and start haproxy", "reload": "check the config with haproxy -c, then reload haproxy "
           "(no connection dropped; drain states kept)", "sync": "sync the running API-key map (no reload)"}


def gateway_lines(st, wanted: dict[str, str]) -> list[str]:
    """What deploys/gateway.py would do on this host (`specfleet plan`); empty: nothing."""
    changed, action = _work(st, wanted)
    out = [] if st.haproxy else ["install haproxy from the distribution"]
    out += [f"write {p}" + (" (root-only)" if p in SECRET else "") for p in changed]
    return out + ([ACTIONS[action]] if action else [])


@deploy("Gateway")
def gateway():
    plan = current_plan()
    if not plan.is_gateway:
        logger.info(f"    [{host.name}] not a gateway host: nothing to do")
        return
    s = plan.settings
    wanted, n_keys, problems = gateway_host_files(s, LAYOUT)
    if problems:
        refuse(name="Gateway preflight", message="; ".join(f"{host.name}: {p}" for p in problems))
        return
    st = host.get_fact(GatewayStatus, files=(*wanted, LAYOUT.loaded_stamp))
    if st.haproxy and _version(st.haproxy) < MIN_HAPROXY:
        refuse(name="Gateway preflight", message=f"{host.name}: gateway: haproxy {st.haproxy} is older than "
                                                 f"{'.'.join(map(str, MIN_HAPROXY))} (needed: http_auth_bearer, "
                                                 "prepare/commit map; Ubuntu 24.04 and Debian 12 ship newer)")
        return
    if st.haproxy and st.missing_features:
        refuse(name="Gateway preflight", message=f"{host.name}: gateway: haproxy {st.haproxy} is built without "
                                                 f"{', '.join(st.missing_features)} (needed: Lua for GET /v1/models, "
                                                 "PROMEX for /metrics; the distribution's package has both)")
        return
    if not st.haproxy:
        apt.packages(name=f"haproxy from the distribution (waits up to {DPKG_LOCK_TIMEOUT_SEC} s for the dpkg lock)",
                     packages=["haproxy"], update=True,
                     extra_install_args=f"-o DPkg::Lock::Timeout={DPKG_LOCK_TIMEOUT_SEC}")
    changed, action = _work(st, wanted)
    _write_checked(changed, wanted, action)
    stamp = f"printf %s {shlex.quote(loaded_stamp(wanted))} > {shlex.quote(LAYOUT.loaded_stamp)}"
    if action == "start":
        server.shell(name="Enable and start haproxy", commands=["systemctl enable haproxy",
                                                                "systemctl restart haproxy", stamp])
    elif action == "reload":
        # the running worker takes the new keys first: it keeps serving its kept-alive connections after the reload
        # (up to hard-stop-after), and a revoked key must be refused there too
        sync = [admin_command("sync-map", LAYOUT.keys_map)] if LAYOUT.keys_map in changed else []
        server.shell(name="Save the servers' states, then reload haproxy (no connection dropped)",
                     commands=[*sync, admin_command("save-state", LAYOUT.state_file), "systemctl reload haproxy",
                               stamp])
    logger.info(f"    [{host.name}] gateway: {len(s.gateway_backends)} Spark(s), {n_keys} API key(s), "
                f"{len(changed)} file(s) to write")


def _write_checked(changed: list[str], wanted: dict[str, str], action: str | None) -> None:
    """Every changed file goes to <path>.specfleet-new first; nothing replaces a file in use until it is proven:
    HAProxy checks the whole new set (`haproxy -c` on a config that names the new files), or, for keys alone, the
    running key map is synced from the new file. A failure leaves the old files (and HAProxy) as they were, and
    the next run sees the same differences."""
    if not changed:
        return
    new = {path: f"{path}{NEW}" for path in changed}
    for path in changed:
        python.call(name=f"Write {new[path]}" + (" (root-only, from stdin)" if path in SECRET else ""),
                    function=write_root_file, path=new[path], content=wanted[path],
                    mode="600" if path in SECRET else "644")
    install = " && ".join(f"mv -f {shlex.quote(new[p])} {shlex.quote(p)}" for p in changed)
    # whatever happens, no unproven copy stays (the TLS key's included): the next run writes them again
    tidy = f"rc=$?; rm -f {shlex.join([*new.values(), LAYOUT.config + CHECK])}; exit $rc"
    if action == "sync":
        server.shell(name="Sync the running API-key map from the new file (no reload), then install it",
                     commands=[admin_command("sync-map", LAYOUT.keys_map, "--from", new[LAYOUT.keys_map])
                               + f" && {install}; {tidy}"])
        return
    check = check_config(wanted[LAYOUT.config], {p: new[p] for p in changed if p != LAYOUT.config})
    python.call(name=f"Write {LAYOUT.config}{CHECK}", function=write_root_file, path=f"{LAYOUT.config}{CHECK}",
                content=check, mode="600")
    server.shell(name=f"Check the new files with haproxy -c, then install them ({len(changed)})",
                 commands=[f"haproxy -c -q -f {shlex.quote(LAYOUT.config + CHECK)} && {install}; {tidy}"])


@deploy("Gateway plan (read only)")
def gateway_plan(out: dict):
    """What deploys/gateway.py would do here, or the problems that refuse it (`specfleet plan`)."""
    plan = current_plan()
    wanted, _, problems = gateway_host_files(plan.settings, LAYOUT)
    if problems:
        out[host.name] = [f"refused: {p}" for p in problems]
        return
    out[host.name] = gateway_lines(host.get_fact(GatewayStatus, files=(*wanted, LAYOUT.loaded_stamp)), wanted)


@deploy("Gateway status (read only)")
def gateway_alive(out: dict):
    """Whether this gateway host's HAProxy runs with specfleet's config (its runtime API socket is there)."""
    st = host.get_fact(GatewayStatus, files=())
    out[host.name] = ("" if st.active == "active" and st.admin else
                      "haproxy is not running" if st.haproxy else "haproxy is not installed")


@deploy("Gateway cleanup")
def gateway_cleanup():
    """Stop and disable HAProxy, remove every file the gateway deploy wrote, and the package it installed."""
    files = (LAYOUT.config, LAYOUT.models_map, LAYOUT.paths_map, LAYOUT.keys_map, LAYOUT.models_lua, LAYOUT.tls_pem)
    # with what a run cut short may have left: unproven copies (.specfleet-new, the TLS key's too), half-written ones
    ours = (*files, *(f + NEW for f in files), *(f + ".specfleet-tmp" for f in files), LAYOUT.config + CHECK,
            LAYOUT.state_file, LAYOUT.loaded_stamp)
    st = host.get_fact(GatewayStatus, files=ours)
    if st.active == "active" or st.enabled == "enabled":
        server.shell(name="Stop and disable haproxy", commands=["systemctl disable --now haproxy"])
    present = [path for path in ours if path in st.files]
    if present:
        server.shell(name=f"Remove {len(present)} gateway file(s), the keys' digests and TLS pair included",
                     commands=["rm -f " + shlex.join(present)])
    if st.haproxy:
        apt.packages(name="Purge haproxy (installed by the gateway deploy)", packages=["haproxy"], present=False,
                     purge=True,
                     extra_uninstall_args=f"-o DPkg::Lock::Timeout={DPKG_LOCK_TIMEOUT_SEC}")
