#!/bin/sh
# The container output of the image (image.py), run on the built rootfs ($1) after the disk image was made from it,
# with the files of container_files/ ($2) copied over it first. What differs from the QEMU disk, and why
# (docs/dev/lab.md has the same list):
set -eu
R="$1"; FILES="$2"
cp -a "$FILES/." "$R/"

# the gettys would act on the machine's ttys, and udev's boot-time trigger of every device on the machine's devices:
# masked. udevd itself runs (networkd waits for it to have seen each interface, and netplan triggers the interfaces'
# uevents), fed with the net devices only (specfleet-lab-udev-net: a container's sysfs and uevents hold its own)
for u in systemd-udev-trigger.service systemd-udev-settle.service getty@.service serial-getty@.service \
         console-getty.service getty.target getty-static.service; do
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
# cgroupfs they landed at the machine's cgroup root), on its command line, so that daemon.json stays the disk image's.
# The rlimit clamp (the STAND-IN for a memlock limit a container host cannot raise: docs/dev/lab.md) is the `runc`
# that dockerd and containerd find first on their PATH (/usr/local/sbin before /usr/sbin), and it execs
# /usr/sbin/runc: docker's runtimes stay a Spark's (`runc` the default), so a test that rewrites daemon.json's
# runtimes and reloads docker, as an operator would, keeps the clamp (a default runtime declared on the command line
# is dropped by such a reload, and docker 20.10 then panics)
mkdir -p "$R/etc/systemd/system/docker.service.d" "$R/usr/local/sbin"
cat > "$R/etc/systemd/system/docker.service.d/specfleet-lab-container.conf" <<'EON'
[Service]
ExecStart=
ExecStart=/usr/sbin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock --exec-opt native.cgroupdriver=systemd $DOCKER_OPTS
EON
ln -sf /usr/local/bin/runc-container-host-STANDIN "$R/usr/local/sbin/runc"

# no block device to mount or check; docker mounts its own resolv.conf, hostname and hosts over these files
echo "# a container host: its root is the container's" > "$R/etc/fstab"
rm -f "$R/etc/resolv.conf"
: > "$R/etc/resolv.conf"

# /sys read-write at boot (docker mounts it read-only), as on a Spark: udevd runs only where it is, and netplan, which
# a pair's deploy runs, triggers the net devices' uevents (`udevadm trigger` writes their uevent files)
chroot "$R" systemctl enable specfleet-lab-ifnames.service specfleet-lab-sysfs-rw.service specfleet-lab-udev-net.service
