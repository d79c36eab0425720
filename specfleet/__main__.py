"""The `specfleet` console script (and `python -m specfleet`).

Commands that reach hosts (rollout, releases, status, logs, mirror, bench) run pyinfra's API, which works on every
host at once in gevent greenlets: like pyinfra's own CLI, this entry point monkey-patches the process with gevent
first, before anything imports sockets or threads; without it each host's SSH I/O blocks the others and a rollout
stages its hosts one after another. Every command runs patched (the VM lab, which runs QEMU processes and threads
unpatched, is a command of its own: `specfleet-lab`, outside this package).
"""

from gevent import monkey

monkey.patch_all()

from specfleet.cli import main  # noqa: E402


def run() -> None:
    main()


if __name__ == "__main__":
    main()
