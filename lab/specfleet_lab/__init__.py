"""Hosts that stand in for DGX Spark hosts in the tests: real systemd, sshd and docker, reached over SSH as the
operator, from one image recipe, on one of two drivers (docs/dev/lab.md has the map, the flags and the fidelity
ledger):

* ``container`` (the default): each host a systemd container of the lab's own docker engine (``container/``),
  up in a second or two;
* ``qemu``: each host a guest with a kernel of its own under TCG (``qemu/``), for what a container cannot show
  (the ledger's rows: the kernel's OOM killer, netplan and udev on the link's NICs, arm64, ...).

What a host is
--------------
A Debian 12 (bookworm) system built with ``mmdebstrap --variant=minbase`` and the
packages a deploy relies on (systemd, openssh-server, python3 + venv, docker.io with
AppArmor, curl, iproute2, sudo, ...). The QEMU driver boots the root filesystem as a sparse raw ext4 image
(``mkfs.ext4 -d``) with the guest kernel (no bootloader), each guest on its own qcow2 overlay; the container
driver imports the same tree, changed by ``hooks/container.sh``, as an image of its engine.

Like a DGX OS host a host is reached as the operator user ``spark`` (uid 1000, bash,
passwordless sudo, *not* in the ``docker`` group) with the fleet's generated ed25519 key;
root cannot log in over SSH (``PermitRootLogin no``). The fleet's inventory connects as
``spark`` with ``_sudo: true``, and :meth:`Host.ssh` / :meth:`Host.put` /
:meth:`Host.get` run as root through ``sudo -n`` (``user=`` selects another account).
Each host gets its own machine-id, SSH host keys and hostname (``spark-N``) at first boot.

The NVIDIA container toolkit: a STAND-IN
-----------------------------------------
A Spark always runs the serving container with ``--gpus=all`` and needs docker's
``nvidia`` runtime (specfleet's preflight checks for it). The guests have no GPU, so the
image carries a documented stand-in that does nothing and says so:

* ``/usr/local/bin/nvidia-container-runtime-STANDIN``, registered in
  ``/etc/docker/daemon.json`` as the runtime ``nvidia``: it only execs runc.
* ``/usr/bin/nvidia-container-runtime-hook``: a no-op OCI prestart hook (reads the
  container state from stdin, exits 0). dockerd registers its ``--gpus`` device driver
  only when a binary of exactly this name is on its PATH at start, and then adds it to
  every ``--gpus`` container as a prestart hook with the arguments
  ``nvidia-container-runtime-hook prestart`` (moby v20.10.24, the version of Debian 12's
  docker.io, ``daemon/nvidia_linux.go``: ``const nvidiaHook =
  "nvidia-container-runtime-hook"``, ``init()`` -> ``exec.LookPath(nvidiaHook)`` ->
  ``registerDeviceDriver("nvidia", ...)``; ``setNvidiaGPUs`` appends ``specs.Hook{Path:
  path, Args: []string{nvidiaHook, "prestart"}}`` and sets ``NVIDIA_VISIBLE_DEVICES``).
  ``nvidia-container-runtime-hook --version`` prints ``STAND-IN``; testinfra's real-GPU
  tier skips a host whose hook says so.

CI-only differences (kept short on purpose)
-------------------------------------------
* Debian 12 instead of DGX OS 7 (Ubuntu 24.04); no GPU (the NVIDIA container toolkit is
  the stand-in above). A container host runs the machine's kernel: what that cannot show is
  in the ledger (docs/dev/lab.md), and the memlock limit it cannot raise is met by the
  STAND-IN ``runc-container-host-STANDIN``, the ``runc`` its inner dockerd finds first on its PATH
  (which also gives each container the host's ``/proc/meminfo``, lxcfs' view).
* QEMU guests are x86_64 by default; ``up(arch="arm64")`` (CLI ``--arch
  arm64``, or ``x86_64,arm64`` for one arch per guest) gives aarch64 guests like a Spark:
  an arm64 image (``linux-image-arm64``; its own recipe hash, cached side by side), built
  by mmdebstrap through qemu-user (binfmt_misc) with a MODULES=list initramfs, booted by
  ``qemu-system-aarch64 -M virt`` (always TCG on an x86_64 host; console ttyAMA0).
* Container hosts: a management network per engine (the controller at its gateway, each host
  at a fixed address), shared networks and a pair's link as docker networks.
* QEMU user-mode networking: each guest is 10.0.2.15, reaches the controller at
  10.0.2.2, uses slirp's DNS 10.0.2.3 (static /etc/resolv.conf), and is reached by
  the controller through a per-guest SSH port forward on 127.0.0.1.
* TCG emulation (nested KVM is broken on the CI machines); KVM is used only when a
  one-off probe boot proves it works.
* Kernel command line adds ``mitigations=off`` (CPU side-channel mitigations only
  cost time under TCG) and ``tsc=reliable`` (TCG's TSC is the host's monotonic clock;
  without it the guest's clocksource watchdog falls back to the emulated HPET and a
  guest boots ~1.4x slower).
* SSH host keys are ed25519 + ecdsa only (RSA key generation takes ~25 s under TCG).
* Docs and man pages are not installed (smaller image, faster build).

Environment overrides: ``SPECFLEET_LAB_DRIVER`` (``container``/``qemu``), ``SPECFLEET_LAB_ROOT``
(the container engines' runs), ``SPECFLEET_VM_DIR`` (workdir), ``SPECFLEET_CACHE_DIR`` (image cache),
``SPECFLEET_VM_ACCEL`` (``auto``/``tcg``/``kvm``), ``SPECFLEET_VM_SMP``
(vCPUs per guest), ``SPECFLEET_VM_BOOT_TIMEOUT`` (seconds).


The lab is a distribution of its own (``specfleet-lab``, in ``lab/`` of the specfleet repository), outside
the runtime wheel: operators never install it; the dev install does (``pip install -e ./lab``, done by
``tests/install-deps.sh``). Its command is ``specfleet-lab up|down|build-image|status``.

Code map (each module imports only those above it)
--------------------------------------------------
* ``errors``: VMError, SSHError.
* ``local``: the controller side: directories (``lab_root``), local commands, ports, pid files, mounts.
* ``arch``: host architectures, ``--arch`` parsing.
* ``recipe``: the image recipe and its hash; the mmdebstrap hooks are the shell files ``hooks/*.sh``, the container
  output's files ``container_files/``.
* ``image``: building and caching both outputs (``build_image``).
* ``host``: ``Host``, what every driver's host offers (SSH as the operator, copies, power, readiness).
* ``drivers``: ``Driver``, the registry and ``choose`` (the fallback to QEMU, with its reason).
* ``qemu/``: the QEMU driver (``guest``, ``accel``, ``lan``, ``pair_link``, ``process``, ``driver``).
* ``container/``: the container driver (``slots``, ``cgroups``, ``engine``, ``flags``, ``host``, ``driver``).
* ``state``: ``fleet.json``, the inventory, ``Fleet``, ``load``.
* ``fleet``: ``up`` and ``down``, the registry of fleets up (``down --all``).
* ``cli``: the ``specfleet-lab`` command (click), SIGTERM handling while a command runs.

This package re-exports the API the tests and scripts use: ``up``, ``down``, ``load``, ``build_image``,
``Host``, ``Fleet``, ``choose``, ``VMError``, ``OPERATOR``, ...
"""

from .arch import ARCHES, DEFAULT_ARCH, guest_arches, host_arch, parse_arch, parse_arches
from .drivers import Driver, choose
from .errors import SSHError, VMError
from .fleet import FIRST_HOST, down, up
from .host import OPERATOR, Host
from .image import ImageInfo, build_image
from .local import default_cache_dir, default_workdir
from .recipe import DISK_SIZE, recipe_hash
from .state import Fleet, load, write_inventory

__all__ = [
    "ARCHES", "DEFAULT_ARCH", "DISK_SIZE", "FIRST_HOST", "OPERATOR", "Driver", "Fleet", "Host", "ImageInfo",
    "SSHError", "VMError", "build_image", "choose", "default_cache_dir", "default_workdir", "down", "guest_arches",
    "host_arch", "load", "parse_arch", "parse_arches", "recipe_hash", "up", "write_inventory",
]
