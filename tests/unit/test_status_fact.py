"""The one status fact, run for real by a local shell against a scratch data dir (no host, no pyinfra)."""

import json
import subprocess

from specfleet.facts import SpecfleetHost


def _status(tmp_path, sizes=(), files=(), users=()):
    fact = SpecfleetHost()
    command = fact.command(data_dir=str(tmp_path), service="specfleet-test-nonexistent", port=1, image="img",
                           sizes=sizes, files=files, users=users)
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=60).stdout
    return fact.process(out.splitlines())


def test_hub_file_names_with_spaces_are_found(tmp_path):
    snap = tmp_path / "hf" / "hub" / "models--org--m" / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    (snap / "tokenizer config.json").write_text("12345")
    (snap / "sub dir").mkdir()
    (snap / "sub dir" / "it's here.bin").write_bytes(b"x" * 7)
    wanted = (str(snap / "tokenizer config.json"), str(snap / "sub dir" / "it's here.bin"), str(snap / "missing file"))
    st = _status(tmp_path, sizes=wanted, files=wanted[:1])
    assert st.sizes == {wanted[0]: 5, wanted[1]: 7, wanted[2]: -1}
    assert st.files[wanted[0]][0] == "file"


def test_gate_and_active_job_are_read(tmp_path):
    (tmp_path / "gate.json").write_text(json.dumps({"release": "r-1", "result": "passed", "at": "x"}, indent=1))
    st = _status(tmp_path)
    assert st.gate == {"release": "r-1", "result": "passed", "at": "x"} and st.gate_passed("r-1") and not st.gate_passed("r-2")
    (tmp_path / "gate.json").write_text(json.dumps({"release": "r-1", "result": "running"}))
    assert not _status(tmp_path).gate_passed("r-1")
    (tmp_path / "gate.json").unlink()
    assert _status(tmp_path).gate == {}
