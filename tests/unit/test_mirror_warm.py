"""The mirror's programs (specfleet/mirror/host/mirror_warm.py, shipped as specfleet.mirror.status.WARM; olah_ready.py):
their logic in process, and the warm-up shipped as on the host (`python -c WARM ...`) against the Hub stand-in: what
it sends and how it retries. On the mirror host it reads through olah; here it reads the stand-in directly (same Hub
API), so the gated-repo token handling and the 429 backoff are checked in seconds. The VM side is
tests/vm/test_hub_mirror.py."""

import subprocess
import sys
import urllib.error

import pytest

from specfleet.mirror.host import mirror_warm, olah_ready
from specfleet.mirror.status import WARM
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
    run = subprocess.run([sys.executable, "-c", WARM, f"http://127.0.0.1:{port}", "-", PUBLIC, "c" * 40, "f.bin",
                          "100"], capture_output=True, text=True, timeout=60)
    srv.close()
    assert run.returncode == 0 and "Traceback" not in run.stderr, run.stderr
    assert "IncompleteRead" in run.stdout and "retrying in 1 s" in run.stdout, run.stdout


# ---- the programs' logic, in process ---------------------------------------------------------------------------
def test_the_shipped_text_is_the_module():
    from pathlib import Path
    assert Path(mirror_warm.__file__).read_text(encoding="utf-8") == WARM


def test_quadruples_and_backoff():
    assert mirror_warm.quadruples(["o/r", "c" * 40, "a b.json", "12", "o/s", "d" * 40, "x", "0"]) == [
        ("o/r", "c" * 40, "a b.json", 12), ("o/s", "d" * 40, "x", 0)]
    assert [mirror_warm.backoff(a) for a in range(1, 8)] == [1, 2, 4, 8, 16, 30, 30]
    assert mirror_warm.backoff(1, " 7 ") == 7 and mirror_warm.backoff(5, "3") == 16  # the longer wait wins
    assert mirror_warm.backoff(1, "9999") == 300 and mirror_warm.backoff(2, "Wed, 21 Oct 2015 07:28:00 GMT") == 2


@pytest.mark.parametrize("code, with_token, retried, says", [
    (401, True, False, "HTTP 401 Unauthorized (a gated repo?"),
    (403, False, False, "HTTP 403 Forbidden (a gated repo?"),
    (404, False, False, "HTTP 404 Not Found (a gated repo?"),  # the Hub answers 404 to a gated repo without a token
    (404, True, False, "HTTP 404 Not Found"),
    (400, True, False, "HTTP 400 Bad Request"),
    (429, False, True, None),
    (503, True, True, None),
])
def test_which_http_errors_are_retried(code, with_token, retried, says):
    line = mirror_warm.refusal(code, {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found"}
                               .get(code, "x"), "hub mirror http://m: o/r@cccc f", with_token)
    assert (line is None) == retried
    if says:
        assert line.startswith(f"hub mirror http://m: o/r@cccc f: {says}") and "\n" not in line


def _reads(*results):
    """A read_through stand-in answering each call with the next result (an exception is raised)."""
    calls = []

    def read(url, headers):
        calls.append((url, dict(headers)))
        result = results[len(calls) - 1]
        if isinstance(result, Exception):
            raise result
        return result
    return read, calls


def test_warm_file_retries_a_short_body_and_a_503_then_reads_it(capsys):
    err = urllib.error.HTTPError("u", 503, "Unavailable", {"Retry-After": "5"}, None)
    read, calls = _reads(99, err, 100)
    slept = []
    n = mirror_warm.warm_file("http://m", {"Authorization": "Bearer t"}, "o/r", "c" * 40, "dir/a b.bin", 100,
                              read=read, sleep=slept.append)
    assert n == 100 and slept == [1, 5]
    assert calls[0] == (f"http://m/o/r/resolve/{'c' * 40}/dir/a%20b.bin", {"Authorization": "Bearer t"})
    out = capsys.readouterr().out
    assert "OSError: got 99 bytes, expected 100; retrying in 1 s (attempt 1 of 8)" in out
    assert "HTTP 503; retrying in 5 s (attempt 2 of 8)" in out and "dir/a b.bin: 100 bytes" in out


def test_warm_file_gives_up_after_its_attempts_with_one_line():
    read, calls = _reads(*[ConnectionResetError("reset")] * mirror_warm.ATTEMPTS)
    with pytest.raises(SystemExit) as exc:
        mirror_warm.warm_file("http://m", {}, "o/r", "c" * 40, "f", 1, read=read, sleep=lambda s: None)
    assert len(calls) == mirror_warm.ATTEMPTS
    assert str(exc.value.code) == (f"hub mirror http://m: o/r@{'c' * 12} f: failed after 8 attempts "
                                   "(ConnectionResetError: reset)")


def test_olah_ready_waits_for_any_http_answer(hub):
    assert olah_ready.main(["-c", hub.url + "/no-such-page"], attempts=1) == 0  # a 404 is an answer: olah is up
    slept = []
    assert olah_ready.main(["-c", "http://127.0.0.1:9/"], attempts=3, sleep=slept.append) == 1  # nothing listens
    assert slept == [1, 1, 1]
