#!/bin/sh
set -eu
R="$1"; PUB="$2"

# network: DHCP on the user-mode NAT NIC (eth0, the first; net.ifnames=0) via systemd-networkd; slirp's DNS
mkdir -p "$R/etc/systemd/network"
cat > "$R/etc/systemd/network/10-dhcp.network" <<'EOF'
[Match]
Name=eth0

[Network]
DHCP=yes
EOF
# the shared guest network's NIC (eth1) is addressed from the kernel command line (specfleet_lab/lan.py: ip=) by
# systemd-network-generator; a guest without one has no eth1. network-online means eth0 is (the NAT: SSH, the Hub
# stand-in): waiting for every managed link kept boots 11 s longer with eth1 (measured: 13.5 s vs 2.1 s)
mkdir -p "$R/etc/systemd/system/systemd-networkd-wait-online.service.d"
cat > "$R/etc/systemd/system/systemd-networkd-wait-online.service.d/eth0.conf" <<'EOF'
[Service]
ExecStart=
ExecStart=/lib/systemd/systemd-networkd-wait-online --interface=eth0
EOF
rm -f "$R/etc/resolv.conf"
echo "nameserver 10.0.2.3" > "$R/etc/resolv.conf"

echo "/dev/vda / ext4 defaults,errors=remount-ro 0 1" > "$R/etc/fstab"
echo "spark" > "$R/etc/hostname"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' > "$R/etc/hosts"

# per-guest identity: machine-id and SSH host keys are generated at first boot
: > "$R/etc/machine-id"
rm -f "$R/var/lib/dbus/machine-id"
rm -f "$R"/etc/ssh/ssh_host_*
cat > "$R/etc/systemd/system/specfleet-ssh-hostkeys.service" <<'EOF'
[Unit]
Description=Generate this guest's SSH host keys
Before=ssh.service
ConditionPathExists=!/etc/ssh/ssh_host_ed25519_key

[Service]
Type=oneshot
ExecStartPre=/bin/sh -c 'rm -f /etc/ssh/ssh_host_*'
ExecStart=/usr/bin/ssh-keygen -q -t ecdsa -N "" -f /etc/ssh/ssh_host_ecdsa_key
ExecStart=/usr/bin/ssh-keygen -q -t ed25519 -N "" -f /etc/ssh/ssh_host_ed25519_key

[Install]
RequiredBy=ssh.service
EOF
# RSA host keys take ~25 s to generate under TCG: serve ed25519 + ecdsa only
printf 'HostKey /etc/ssh/ssh_host_ed25519_key\nHostKey /etc/ssh/ssh_host_ecdsa_key\n' \
    > "$R/etc/ssh/sshd_config.d/specfleet-hostkeys.conf"
# no interactive first-boot prompts on the console
ln -sf /dev/null "$R/etc/systemd/system/systemd-firstboot.service"

# the operator user 'spark' (uid 1000, bash, passwordless sudo, not in docker); as on DGX OS,
# root does not log in over SSH: everything privileged goes through sudo
printf 'PermitRootLogin no\n' > "$R/etc/ssh/sshd_config.d/specfleet-no-root.conf"
chroot "$R" useradd --create-home --uid 1000 --user-group --shell /bin/bash \
    --groups sudo spark
chroot "$R" usermod --password '*' spark
install -d -m 700 -o 1000 -g 1000 "$R/home/spark/.ssh"
install -m 600 -o 1000 -g 1000 "$PUB" "$R/home/spark/.ssh/authorized_keys"
echo 'spark ALL=(ALL) NOPASSWD:ALL' > "$R/etc/sudoers.d/spark"
chmod 440 "$R/etc/sudoers.d/spark"

# STAND-IN for the NVIDIA container toolkit (no GPU in a guest): a docker runtime named "nvidia"
# that only runs runc, and the prestart hook binary docker's --gpus needs, doing nothing.
# dockerd (moby v20.10.24, Debian 12's docker.io) daemon/nvidia_linux.go: init() registers the
# "nvidia" --gpus device driver only if exec.LookPath("nvidia-container-runtime-hook") succeeds;
# setNvidiaGPUs then adds an OCI prestart hook {Path: <that path>, Args:
# ["nvidia-container-runtime-hook", "prestart"]} to every --gpus container. runc runs it with the
# container state on stdin; it must exit 0.
mkdir -p "$R/usr/local/bin" "$R/etc/docker"
cat > "$R/usr/local/bin/nvidia-container-runtime-STANDIN" <<'EOF'
#!/bin/sh
# specfleet VM fleet: STAND-IN for nvidia-container-runtime. It is NOT the NVIDIA container
# toolkit and exposes NO GPU: it runs runc unchanged, so that docker has a runtime named
# "nvidia" as on a DGX Spark.
for r in /usr/sbin/runc /usr/bin/runc; do [ -x "$r" ] && exec "$r" "$@"; done
echo "nvidia-container-runtime-STANDIN: runc not found" >&2
exit 127
EOF
cat > "$R/usr/bin/nvidia-container-runtime-hook" <<'EOF'
#!/bin/sh
# specfleet VM fleet: STAND-IN for nvidia-container-runtime-hook (NVIDIA container toolkit).
# It exposes NO GPU and does nothing: docker's --gpus only needs a binary of this name on
# dockerd's PATH and runs it as an OCI prestart hook ("nvidia-container-runtime-hook prestart",
# the container state on stdin). Real Sparks have NVIDIA's hook here.
case "${1:-}" in
  --version|-version|version)
    echo "nvidia-container-runtime-hook STAND-IN (specfleet VM fleet): no GPU, does nothing"
    exit 0 ;;
esac
cat > /dev/null
exit 0
EOF
chmod 755 "$R/usr/local/bin/nvidia-container-runtime-STANDIN" "$R/usr/bin/nvidia-container-runtime-hook"
cat > "$R/etc/docker/daemon.json" <<'EOF'
{
  "runtimes": {
    "nvidia": {"path": "/usr/local/bin/nvidia-container-runtime-STANDIN"}
  }
}
EOF

chroot "$R" systemctl enable systemd-networkd.service systemd-network-generator.service ssh.service docker.service \
    specfleet-ssh-hostkeys.service
# earlyoom, haproxy, docker-registry and skopeo are in the image because the hosts have no apt lists (a deploy installs
# them on DGX OS, where they are missing); as there, they do not run until a deploy enables them (memory/steps.py,
# gateway/steps/gateways.py). The package's own registry is masked, as the mirror deploy masks it before installing it
# (mirror/steps/registry.py): it would listen on every interface.
chroot "$R" systemctl disable earlyoom.service haproxy.service
chroot "$R" systemctl mask docker-registry.service
