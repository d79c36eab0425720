"""Let dockerd reach one registry over plain HTTP: `insecure-registries` merged into /etc/docker/daemon.json and
applied by SIGHUP to dockerd (a configuration reload: nothing restarts, no container stops). Run on a Spark as
`python3 -c <this file's text> --add HOST:PORT --pid-command CMD` (mirror/steps/images.py); CMD prints dockerd's
pid (host/layout.py's main_pid). Stdlib only.

docker's daemon reference, "Configuration reload behavior": `insecure-registries` is among the options a SIGHUP
reloads; a daemon.json that conflicts with dockerd's flags is not applied ("fails to reconfigure itself") but
dockerd keeps running. So the change is checked afterwards in what dockerd reports (`docker info`), and a
daemon.json that is not a JSON object is refused without a write. Every other key of the file is kept.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time

DAEMON_JSON = "/etc/docker/daemon.json"
KEY = "insecure-registries"


def fail(line: str) -> int:
    print(f"insecure-registry: {line}", file=sys.stderr, flush=True)
    return 1


def insecure_now() -> list[str]:
    out = subprocess.run(["docker", "info", "--format", "{{json .RegistryConfig.IndexConfigs}}"], capture_output=True,
                         text=True, timeout=60)
    try:
        configs = json.loads(out.stdout or "{}") or {}
    except ValueError:
        return []
    return [name for name, c in configs.items() if isinstance(c, dict) and c.get("Secure") is False]


def main(argv: list[str]) -> int:
    opts = dict(zip(argv[0::2], argv[1::2], strict=True))
    registry, path = opts["--add"], opts.get("--daemon-json", DAEMON_JSON)
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except FileNotFoundError:
        config = {}
    except (OSError, ValueError) as exc:
        return fail(f"{path} is not readable JSON ({exc}); not changed (fix it, then converge again)")
    if not isinstance(config, dict) or not isinstance(config.get(KEY, []), list):
        return fail(f"{path}: not a JSON object with a list {KEY}; not changed (fix it, then converge again)")
    if registry not in config.get(KEY, []):
        config[KEY] = [*config.get(KEY, []), registry]
        tmp = f"{path}.specfleet-tmp"
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(config, f, indent=2)
            f.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    pid = subprocess.run(shlex.split(opts["--pid-command"]), capture_output=True, text=True).stdout.strip()
    if not pid.isdigit() or pid == "0":
        return fail("dockerd is not running; not reloaded")
    os.kill(int(pid), signal.SIGHUP)
    deadline = time.monotonic() + float(opts.get("--wait-sec", 20))
    while time.monotonic() < deadline:
        if registry in insecure_now():
            print(f"insecure-registry: dockerd reaches {registry} over HTTP (daemon.json reloaded, nothing restarted)",
                  flush=True)
            return 0
        time.sleep(0.5)
    return fail(f"dockerd did not take {KEY} {registry} from {path} on reload (a conflicting --insecure-registry "
                "flag?); nothing restarted")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
