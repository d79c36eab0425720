"""The mirror's warm-up program (specfleet.mirror.WARM) against the Hub stand-in, in process: what it sends and how
it retries. On the mirror host it reads through olah; here it reads the stand-in directly (same Hub API), so the
gated-repo token handling and the 429 backoff are checked in seconds. The VM side is tests/vm/test_hub_mirror.py."""

import subprocess
import sys

import pytest

from specfleet.mirror import WARM
from tests.vm.hub_standin import STANDIN_TOKEN, HubStandin

GATED = "nvidia/Llama-3.3-70B-Instruct-FP4"
PUBLIC = "nvidia/gpt-oss-120b-Eagle3-long-context"


@pytest.fixture
def hub():
    with HubStandin() as standin:
        yield standin


def _warm(hub, token_file: str, repo: str, name: str = "config.json"):
    commit = HubStandin.commit(repo)
    size = HubStandin.files(repo, commit)[name]
    return subprocess.run([sys.executable, "-c", WARM, hub.url, token_file, repo, commit, name, str(size)],
                          capture_output=True, text=True, timeout=120)


def test_gated_repo_is_read_with_the_token_from_its_file(hub, tmp_path):
    token = tmp_path / "hf_token"
    token.write_text(STANDIN_TOKEN + "\n")
    run = _warm(hub, str(token), GATED)
    assert run.returncode == 0, run.stderr
    assert "1 file(s)" in run.stdout and STANDIN_TOKEN not in run.stdout + run.stderr
    assert any(f"/{GATED}/resolve/" in p and n for p, n in hub.bytes_served().items())


def test_gated_repo_without_a_token_fails_with_one_line_naming_the_token(hub):
    run = _warm(hub, "-", GATED)
    assert run.returncode == 1
    assert "HTTP 401" in run.stderr and "hf_token_file" in run.stderr and "Traceback" not in run.stderr
    assert not any(n for p, n in hub.bytes_served().items() if "/resolve/" in p)


def test_upstream_429s_are_retried_with_backoff(hub):
    hub.fail_next(429, 2)
    run = _warm(hub, "-", PUBLIC)
    assert run.returncode == 0, run.stderr
    retries = [line for line in run.stdout.splitlines() if "HTTP 429; retrying in" in line]
    assert len(retries) == 2 and "retrying in 1 s" in retries[0] and "retrying in 2 s" in retries[1], run.stdout
    assert "(attempt 1 of 8)" in retries[0] and "(attempt 2 of 8)" in retries[1]


def test_a_longer_retry_after_is_honoured(hub):
    hub.fail_next(429, 1, retry_after=3)
    run = _warm(hub, "-", PUBLIC)
    assert run.returncode == 0, run.stderr
    assert "HTTP 429; retrying in 3 s (attempt 1 of 8)" in run.stdout, run.stdout


def test_a_body_cut_short_is_retried_not_a_traceback(tmp_path):
    """A mirror killed mid-file: a chunked response ends inside a chunk (http.client.IncompleteRead, not an OSError)."""
    import socket
    import threading
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    port = srv.getsockname()[1]
    body = b"x" * 100

    def serve():
        for i in range(2):
            conn, _ = srv.accept()
            conn.recv(65536)
            if i == 0:  # a chunk of 0x64 = 100 bytes announced, 10 sent, hang up
                conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n64\r\n" + body[:10])
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + body)
            conn.close()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    run = subprocess.run([sys.executable, "-c", WARM, f"http://127.0.0.1:{port}", "-", PUBLIC, "c" * 40, "f.bin", "100"],
                         capture_output=True, text=True, timeout=60)
    srv.close()
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert "IncompleteRead" in run.stdout and "retrying in 1 s" in run.stdout, run.stdout
