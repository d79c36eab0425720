"""The one status fact, run for real by a local shell against a scratch data dir (no host, no pyinfra)."""

import json
import subprocess

from specfleet.fleet.status import SpecfleetHost
from tests.unit.fakehost import status_command


def _status(tmp_path, sizes=(), files=(), users=()):
    command = status_command(str(tmp_path), SIZES="\n".join(sizes), FILES="\n".join(files), USERS="\n".join(users))
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60).stdout
    return SpecfleetHost().process(out.splitlines())


def test_hub_file_names_with_spaces_are_found(tmp_path):
    snap = tmp_path / "hf" / "hub" / "models--org--m" / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (snap / "tokenizer config.json").write_text("12345")
    (snap / "sub dir").mkdir()
    (snap / "sub dir" / "it's here.bin").write_bytes(b"x" * 7)
    wanted = (str(snap / "tokenizer config.json"), str(snap / "sub dir" / "it's here.bin"), str(snap / "missing file"))
    st = _status(tmp_path, sizes=wanted, files=wanted[:1])
    assert st.files.sizes == {wanted[0]: 5, wanted[1]: 7, wanted[2]: -1}
    assert st.files.found[wanted[0]][0] == "file"


def test_gate_and_active_job_are_read(tmp_path):
    (tmp_path / "gate.json").write_text(json.dumps({"release": "r-1", "result": "passed", "at": "x"}, indent=1))
    st = _status(tmp_path).release
    assert st.gate == {"release": "r-1", "result": "passed", "at": "x"} and st.gate_passed("r-1") and not st.gate_passed("r-2")
    (tmp_path / "gate.json").write_text(json.dumps({"release": "r-1", "result": "running"}))
    assert not _status(tmp_path).release.gate_passed("r-1")
    (tmp_path / "gate.json").unlink()
    assert _status(tmp_path).release.gate == {}


# What the probe printed per path before file_status.py (coreutils, a few programs per path): the reference that
# the one-process reader must match line for line.
_COREUTILS = r"""
printf '%s\n' "$SIZES" | while IFS= read -r f; do [ -n "$f" ] || continue
  s=$(stat -L -c %s "$f" 2>/dev/null || echo -1); echo "size	$s	$f"; done
printf '%s\n' "$FILES" | while IFS= read -r f; do [ -n "$f" ] || continue
  if [ -L "$f" ]; then echo "file	link|$(readlink "$f")	$f"
  elif [ -d "$f" ]; then echo "file	dir|$(stat -c '%a|%U|%G' "$f")	$f"
  elif [ -f "$f" ]; then echo "file	file|$(stat -c '%a|%U|%G' "$f")|$(sha256sum "$f" | cut -d' ' -f1)	$f"; fi
done
printf '%s\n' "$USERS" | while IFS= read -r u; do [ -n "$u" ] || continue
  echo "groups	$u	$(id -nG "$u" 2>/dev/null || echo '(missing)')"; done
"""


def test_file_status_prints_what_coreutils_printed(tmp_path):
    import getpass
    import os

    from specfleet.fleet.status import FILE_STATUS

    (tmp_path / "a file").write_bytes(b"x" * 3000)
    (tmp_path / "secret").write_text("t")
    (tmp_path / "secret").chmod(0o600)
    (tmp_path / "sticky dir").mkdir()
    (tmp_path / "sticky dir").chmod(0o1777)
    (tmp_path / "link").symlink_to("a file")
    (tmp_path / "dangling").symlink_to("nowhere/at all")
    os.mkfifo(tmp_path / "fifo")
    names = ["a file", "secret", "sticky dir", "link", "dangling", "fifo", "missing", ""]
    paths = "\n".join(str(tmp_path / n) for n in names)
    env = {**os.environ, "SIZES": paths, "FILES": paths, "USERS": f"{getpass.getuser()}\nno-such-user-xyz"}
    want = subprocess.run(["sh", "-c", _COREUTILS], env=env, capture_output=True, check=True).stdout
    got = subprocess.run(["python3", "-I", "-S", "-c", FILE_STATUS], env=env, capture_output=True, check=True).stdout
    assert b"file\tlink|nowhere/at all" in want and b"\t(missing)\n" in want and b"|1777|" in want  # the cases
    assert got.decode().splitlines() == want.decode().splitlines()


def test_a_path_in_stats_is_stated_never_opened(tmp_path):
    """A pair head's private key is in STATS: its kind, mode, owner and size are reported and it is never opened (a
    FIFO shows it: opening one for reading blocks until a writer comes, so the probe would hang, here for 10 s)."""
    import getpass
    import grp
    import os

    from specfleet.fleet.status import FILE_STATUS

    os.mkfifo(tmp_path / "mpi_key", 0o600)
    (tmp_path / "mpi_key.pub").write_text("ssh-ed25519 AAAA comment\nsecond line\n")
    env = {**os.environ, "STATS": str(tmp_path / "mpi_key"), "KEYS": str(tmp_path / "mpi_key.pub")}
    got = subprocess.run(["timeout", "10", "python3", "-I", "-S", "-c", FILE_STATUS], env=env, capture_output=True,
                         text=True)
    user, group = getpass.getuser(), grp.getgrgid(os.getgid()).gr_name
    assert got.returncode == 0, got
    assert got.stdout.splitlines() == [f"stat\tother|600|{user}|{group}|0\t{tmp_path}/mpi_key",
                                       f"pubkey\t{tmp_path}/mpi_key.pub\tssh-ed25519 AAAA comment"]


def test_the_serving_unit_read_is_the_current_releases(tmp_path):
    """The unit whose state the read reports is the one that serves: the current release's record names it (a
    release of the other engine runs as another unit until the switch stops it); without a release, the plan's."""
    assert _status(tmp_path).release.serving_unit == "specfleet-test-nonexistent"
    rdir = tmp_path / "releases" / "r-aaaaaaaaaaaa"
    rdir.mkdir(parents=True)
    (rdir / "release.json").write_text(json.dumps({"id": "r-aaaaaaaaaaaa", "service": "specfleet-other",
                                                   "profile": "x"}, indent=1) + "\n")
    (tmp_path / "current").symlink_to("releases/r-aaaaaaaaaaaa")
    assert _status(tmp_path).release.serving_unit == "specfleet-other"
    (rdir / "release.json").write_text(json.dumps({"id": "r-aaaaaaaaaaaa", "service": "bad name;x"}, indent=1))
    assert _status(tmp_path).release.serving_unit == "specfleet-test-nonexistent", "an odd name is not read"
