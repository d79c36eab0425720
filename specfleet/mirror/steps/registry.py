"""The image registry on the fleet's mirror host (image_mirror): the distribution's registry (Debian/Ubuntu package
docker-registry) under systemd, read-only, behind a filtering socket on the mirror's fleet address that admits only
the fleet's Sparks, and skopeo for the fetch job. Called by the mirror deploy (steps/hub.py: mirror_setup) with the
mirror's one status read; every decision comes from it, so a converged registry is only read.

Why the package's own unit is never used: its config listens on every interface (`:5000`) and its postinst starts it.
The deploy masks it before installing the package (deb-systemd-helper does not unmask a mask it did not make, and
its start of a masked unit fails quietly), and runs its own instance: one port, loopback, read-only, our config.
"""

from __future__ import annotations

import shlex

from pyinfra.operations import apt, python, server

from ...constants import DPKG_LOCK_TIMEOUT_SEC
from ...fleet.status import sha256
from ...fleet.steps.jobs import write_root_file
from ...host.layout import REGISTRY_PACKAGE_UNIT, REGISTRY_UNIT, REGISTRY_USER, MirrorLayout
from ..render import ngc_auth_text, registry_files
from ..status import MirrorState
from .ready import wait_answers

PACKAGES = ("docker-registry", "skopeo")


def registry_dirs(plan) -> dict[str, str]:
    """Directory -> mode|user|group the registry needs (none without image_mirror)."""
    s = plan.settings
    if not s.image_mirror:
        return {}
    p = MirrorLayout(s.mirror_cache_dir)
    return {p.registry_dir: "755|root|root", s.image_store_dir: f"750|{REGISTRY_USER}|{REGISTRY_USER}"}


def registry_problems(plan, st: MirrorState) -> list[str]:
    """What stops the registry here: the package's own registry running (it would hold the port on every
    interface)."""
    if plan.settings.image_mirror and st.registry_pkg and st.package_unit[1] == "active":
        return [f"{REGISTRY_PACKAGE_UNIT} (the registry of the docker-registry package, on every interface) is "
                "running; specfleet runs an instance of its own (stop and mask it: systemctl mask --now "
                f"{REGISTRY_PACKAGE_UNIT})"]
    return []


def registry_lines(plan, st: MirrorState) -> list[str]:
    """What the mirror deploy would do for the registry (`specfleet plan`); empty: nothing."""
    s = plan.settings
    if not s.image_mirror:
        return ["remove the image registry's units and configs (image_mirror is false; the store stays)"] \
            if _present(plan, st) else []
    out = [] if st.registry_pkg and st.skopeo_pkg else [f"install {' and '.join(PACKAGES)} from the distribution "
                                                        f"({REGISTRY_PACKAGE_UNIT} masked first)"]
    out += [f"write {path}" for path, text in registry_files(s).items() if st.sha.get(path) != sha256(text)]
    if out or st.registry != ("active", "active"):
        out.append(f"start the image registry on {s.image_registry} (read-only, for {len(s.image_clients)} Spark(s))")
    return out


def _present(plan, st: MirrorState) -> list[str]:
    p = MirrorLayout(plan.settings.mirror_cache_dir)
    return [f for f in (p.reader_config, p.writer_config, *p.registry_units) if f in st.sha]


def registry_setup(plan, st: MirrorState) -> None:
    """The registry installed, configured and answering (image_mirror), or removed (image_mirror off)."""
    s = plan.settings
    if not s.image_mirror:
        remove_registry(plan, st)
        return
    p = MirrorLayout(s.mirror_cache_dir)
    if not (st.registry_pkg and st.skopeo_pkg):
        if st.package_unit[0] != "masked":
            server.shell(name=f"Mask {REGISTRY_PACKAGE_UNIT} (the package would start it on every interface)",
                         commands=[f"systemctl mask {REGISTRY_PACKAGE_UNIT}"])
        apt.packages(name=f"{' and '.join(PACKAGES)} from the distribution (waits up to {DPKG_LOCK_TIMEOUT_SEC} s "
                          "for the dpkg lock)", packages=list(PACKAGES), update=True,
                     extra_install_args=f"-o DPkg::Lock::Timeout={DPKG_LOCK_TIMEOUT_SEC}")
    for path, want in registry_dirs(plan).items():
        if st.dirs.get(path) != want:
            mode, user, group = want.split("|")
            server.shell(name=f"Directory {path}",
                         commands=[f"install -d -m {mode} -o {user} -g {group} {shlex.quote(path)}"])
    changed = []
    for path, content in registry_files(s).items():
        if st.sha.get(path) != sha256(content):
            changed.append(path)
            python.call(name=f"Write {path}", function=write_root_file, path=path, content=content, mode="644")
    _ngc_login(plan, st)
    if set(changed) & set(p.registry_units):
        server.shell(name="systemd daemon-reload (image registry units changed)", commands=["systemctl daemon-reload"])
    if not (changed or st.registry != ("active", "active") or st.registry_enabled != ("enabled", "enabled")):
        return
    service, socket, proxy = p.registry_service_unit, p.registry_socket_unit, p.registry_proxy_unit
    server.shell(name=f"Start {REGISTRY_UNIT} (read-only) and its filtering socket on {s.image_registry}",
                 commands=[f"systemctl enable {service} {socket}",
                           f"systemctl {'restart' if changed else 'start'} {service}",
                           # a changed socket (address, port, allowed Sparks) takes effect only when re-created
                           f"systemctl stop {proxy} {socket}; systemctl start {socket}" if changed
                           else f"systemctl start {socket}"])
    python.call(name="The image registry answers", function=wait_answers, python="python3",
                url=f"http://127.0.0.1:{s.image_registry_engine_port}/v2/", unit=service, what="image registry")


def _ngc_login(plan, st: MirrorState) -> None:
    """The NGC login the fetch reads (--src-authfile), root-only, written from stdin; removed without a key."""
    path, text = plan.paths.ngc_auth_file, ngc_auth_text(plan.settings, redact=False)
    if text is not None and st.sha.get(path) != sha256(text):
        python.call(name=f"NGC login for the image fetch ({path}, root:root 0600, written from stdin)",
                    function=write_root_file, path=path, content=text, mode="600")
    elif text is None and path in st.sha:
        server.shell(name="Remove the NGC login (no ngc_api_key_file)", commands=[f"rm -f {shlex.quote(path)}"])


def remove_registry(plan, st: MirrorState, purge: bool = False) -> None:
    """The registry's units and configs gone (the cleanup deploy, or image_mirror turned off). The store and the
    packages stay: the store holds what would be fetched again upstream; `purge` (the cleanup deploy's
    purge_models) removes the store too."""
    p = MirrorLayout(plan.settings.mirror_cache_dir)
    units = (p.registry_socket_unit, p.registry_proxy_unit, p.registry_service_unit)
    if any(a not in ("", "inactive", "unknown") for a in st.registry) or "enabled" in st.registry_enabled:
        server.shell(name=f"Stop and disable {REGISTRY_UNIT}", commands=[f"systemctl disable --now {' '.join(units)}"])
    present = _present(plan, st) + [f for f in (plan.paths.ngc_auth_file,) if f in st.sha]
    if present:
        server.shell(name=f"Remove the image registry's {len(present)} file(s) (the store stays)",
                     commands=["rm -f " + shlex.join(present), "systemctl daemon-reload"])
    if purge and st.store_bytes is not None:
        server.shell(name=f"Purge the image store {plan.settings.image_store_dir}",
                     commands=[f"rm -rf {shlex.quote(plan.settings.image_store_dir)}"])
