"""The VM fleet's guest recipe and access, without booting anything: an operator with sudo and no root SSH,
and the documented stand-in for the NVIDIA container toolkit (executed here as plain scripts)."""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from specfleet_lab import Fleet, recipe, write_inventory
from specfleet_lab.host import as_user
from specfleet_lab.qemu.guest import QemuHost


def _heredoc(target: str) -> str:
    """The body the customize hook writes to `target` with `cat > "$R<target>" <<'EOF'`."""
    m = re.search(rf'^cat > "\$R{re.escape(target)}" <<\'EOF\'\n(.*?)\nEOF$', recipe.CUSTOMIZE_HOOK, flags=re.M | re.S)
    assert m, target
    return m.group(1) + "\n"


def test_hook_is_valid_shell():
    subprocess.run(["sh", "-n"], input=recipe.CUSTOMIZE_HOOK, text=True, check=True)


def test_root_cannot_log_in_and_the_operator_can():
    hook = recipe.CUSTOMIZE_HOOK
    assert "PermitRootLogin no" in hook
    assert "/root/.ssh/authorized_keys" not in hook
    assert "/home/spark/.ssh/authorized_keys" in hook and "NOPASSWD:ALL" in hook


def test_standin_prestart_hook_says_what_it_is_and_does_nothing(tmp_path):
    script = tmp_path / "nvidia-container-runtime-hook"
    script.write_text(_heredoc("/usr/bin/nvidia-container-runtime-hook"))
    assert "STAND-IN" in script.read_text() and "NO GPU" in script.read_text()
    version = subprocess.run(["sh", str(script), "--version"], capture_output=True, text=True, check=True)
    assert "STAND-IN" in version.stdout and "no GPU" in version.stdout
    # as runc runs an OCI prestart hook: argv "nvidia-container-runtime-hook prestart", the state on stdin
    state = json.dumps({"ociVersion": "1.0.2", "id": "x", "status": "created", "pid": 1, "bundle": "/b"})
    run = subprocess.run(["sh", str(script), "prestart"], input=state, capture_output=True, text=True, timeout=10)
    assert run.returncode == 0 and run.stdout == "" and run.stderr == ""


def test_standin_runtime_execs_runc_and_is_docker_s_nvidia_runtime(tmp_path):
    body = _heredoc("/usr/local/bin/nvidia-container-runtime-STANDIN")
    assert "STAND-IN" in body and "NO GPU" in body and 'exec "$r" "$@"' in body
    daemon = json.loads(_heredoc("/etc/docker/daemon.json"))
    assert daemon == {"runtimes": {"nvidia": {"path": "/usr/local/bin/nvidia-container-runtime-STANDIN"}}}
    assert "default-runtime" not in daemon  # runc stays the default, as after `nvidia-ctk runtime configure`


def test_recipe_version_is_in_the_hash(monkeypatch):
    h = recipe.recipe_hash()
    monkeypatch.setattr(recipe, "RECIPE_VERSION", recipe.RECIPE_VERSION + 1)
    assert recipe.recipe_hash() != h


def test_a_pairs_image_adds_netplan_and_ping_and_leaves_the_other_image_alone():
    """The session fleet's image stays the one it was (same recipe, same hash, same cache entry): only a pair's
    guests boot the image with recipe.PAIR_PACKAGES."""
    base, pair = recipe.recipe(), recipe.recipe(pair=True)
    assert "pair" not in base and not {"netplan.io", "iputils-ping"} & set(base["packages"])
    assert pair["pair"] is True and pair["packages"] == base["packages"] + ["netplan.io", "iputils-ping"]
    assert recipe.recipe_hash(pair=True) != recipe.recipe_hash() == recipe.recipe_hash(pair=False)
    assert "netplan.io" in recipe.packages("arm64", pair=True) and "netplan.io" not in recipe.packages("arm64")


@pytest.mark.parametrize("user,cmd,remote", [
    ("root", "id -u", "sudo -n -H sh -c 'id -u'"),
    ("spark", "id -u", "id -u"),
    ("nobody", "echo 'a b' > /x", "sudo -n -H -u nobody sh -c 'echo '\"'\"'a b'\"'\"' > /x'"),
])
def test_commands_run_through_the_operator_and_sudo(user, cmd, remote):
    assert as_user(user, cmd) == remote


def test_quoting_survives_the_remote_shell():
    """What the guest's login shell runs: with a `sudo` that drops its options, the command runs unchanged."""
    cmd = """printf '%s|' 'a b' "c'd" $((6*7)) "$HOME" """
    fake_sudo = 'sudo() { while [ "${1#-}" != "$1" ]; do [ "$1" = -u ] && shift; shift; done; "$@"; }; '
    out = subprocess.run(["sh", "-c", fake_sudo + as_user("root", cmd)], capture_output=True, text=True,
                         env={"HOME": "/root-home", "PATH": "/usr/bin:/bin"})
    assert out.stdout == "a b|c'd|42|/root-home|", out


def _guest(tmp_path) -> QemuHost:
    return QemuHost(name="spark-1", ssh_port=2222, overlay=tmp_path / "o.qcow2", pidfile=tmp_path / "p",
                 console_log=tmp_path / "c.log", key_path=tmp_path / "id_ed25519", argv=[])


def test_ssh_put_get_log_in_as_the_operator(tmp_path, monkeypatch):
    calls = []

    def fake_run(argv, **kw):
        calls.append(argv)
        if kw.get("stdout") not in (None,) and hasattr(kw.get("stdout"), "write"):
            kw["stdout"].write(b"content")
        return subprocess.CompletedProcess(argv, 0, b"", b"")

    monkeypatch.setattr(subprocess, "run", fake_run)
    g = _guest(tmp_path)
    g.ssh("systemctl is-active docker")
    src = tmp_path / "ca.crt"
    src.write_text("x")
    src.chmod(0o640)
    g.put(src, "/usr/local/share/ca-certificates/ca.crt")
    g.get("/tmp/mini.tar", tmp_path / "mini.tar")
    assert (tmp_path / "mini.tar").read_bytes() == b"content"
    for argv in calls:
        assert "spark@127.0.0.1" in argv and not any("root@" in a for a in argv)
        assert argv[-1].startswith("sudo -n -H sh -c ")
    assert "chmod 640" in calls[1][-1] and "mv -f" in calls[1][-1]
    assert "cat /tmp/mini.tar" in calls[2][-1]


def test_fleet_inventory_connects_as_the_operator_with_sudo(tmp_path):
    inv = tmp_path / "inventory.yml"
    write_inventory(inv, [_guest(tmp_path)], tmp_path / "id_ed25519")
    v = yaml.safe_load(inv.read_text())["all"]["vars"]
    assert v["ssh_user"] == "spark" and v["_sudo"] is True
    assert "ssh -i" in _guest(tmp_path).login_command() and "spark@127.0.0.1" in _guest(tmp_path).login_command()


def test_paused_session_fleet_stops_and_continues_the_guests_qemu(tmp_path, monkeypatch):
    """The arm64 module pauses the idle session fleet: SIGSTOP to each guest's QEMU, SIGCONT afterwards (also when
    the body fails). A stand-in process whose command line looks like the guest's QEMU plays the QEMU."""
    from tests.vm import conftest as vmconf
    g = _guest(tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "qemu-system-x86_64",
                             f"file={g.overlay},format=qcow2"])
    try:
        g.pidfile.write_text(f"{proc.pid}\n")
        deadline = time.monotonic() + 10
        while g.pid is None and time.monotonic() < deadline:  # until the child has exec'd (its cmdline is set)
            time.sleep(0.05)
        state = lambda: Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]  # noqa: E731
        fleet = Fleet(guests=[g], workdir=tmp_path, inventory_path=tmp_path / "inventory.yml", key_path=g.key_path)
        monkeypatch.setattr(vmconf, "SESSION_FLEETS", [fleet])
        with pytest.raises(RuntimeError), vmconf.paused_session_fleet() as paused:
            time.sleep(0.2)
            assert paused == ["spark-1"] and state() == "T"
            raise RuntimeError("the module failed")
        time.sleep(0.2)
        assert state() in ("S", "R")
    finally:
        proc.kill()
        proc.wait()
