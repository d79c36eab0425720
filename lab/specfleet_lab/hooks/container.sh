#!/bin/sh
# The container output of the image (image.py), run on the built rootfs ($1) after the disk image was made from it,
# with the files of container_files/ ($2) copied over it first. What differs from the QEMU disk, and why
# (docs/dev/lab.md has the same list):
set -eu
R="$1"; FILES="$2"
cp -a "$FILES/." "$R/"

# udev and the gettys would act on the machine's devices and ttys: masked
for u in systemd-udevd.service systemd-udevd-control.socket systemd-udevd-kernel.socket systemd-udev-trigger.service \
         systemd-udev-settle.service getty@.service serial-getty@.service console-getty.service getty.target \
         getty-static.service; do
  ln -sf /dev/null "$R/etc/systemd/system/$u"
done
rm -f "$R/etc/systemd/system/getty.target.wants/getty@tty1.service"

# docker gives every interface its address (management, shared network, a pair's link): networkd keeps them and runs
# no DHCP (the disk's eth0 file would wait for one for 120 s); 90-: a netplan file (10-netplan-*) comes first
rm -f "$R/etc/systemd/network/10-dhcp.network" "$R/etc/systemd/system/systemd-networkd-wait-online.service.d/eth0.conf"
cat > "$R/etc/systemd/network/90-specfleet-lab-container.network" <<'EON'
[Match]
Name=eth* en*

[Network]
DHCP=no
KeepConfiguration=yes
LinkLocalAddressing=no
IPv6AcceptRA=no
EON

# the inner dockerd: the systemd cgroup driver, so that its containers stay inside the host's memory limit (with
# cgroupfs they landed at the machine's cgroup root); and the rlimit clamp as its default runtime (the STAND-IN for
# a memlock limit a container host cannot raise: docs/dev/lab.md)
mkdir -p "$R/etc/systemd/system/docker.service.d"
cat > "$R/etc/systemd/system/docker.service.d/specfleet-lab-container.conf" <<'EON'
[Service]
ExecStart=
ExecStart=/usr/sbin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock --exec-opt native.cgroupdriver=systemd $DOCKER_OPTS
EON
cat > "$R/etc/docker/daemon.json" <<'EON'
{
  "default-runtime": "runc-rlimit-clamp",
  "runtimes": {
    "nvidia": {"path": "/usr/local/bin/nvidia-container-runtime-STANDIN"},
    "runc-rlimit-clamp": {"path": "/usr/local/bin/runc-rlimit-clamp-STANDIN"}
  }
}
EON

# no block device to mount or check; docker mounts its own resolv.conf, hostname and hosts over these files
echo "# a container host: its root is the container's" > "$R/etc/fstab"
rm -f "$R/etc/resolv.conf"
: > "$R/etc/resolv.conf"

chroot "$R" systemctl enable specfleet-lab-ifnames.service
