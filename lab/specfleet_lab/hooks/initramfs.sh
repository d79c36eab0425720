#!/bin/sh
set -eu
R="$1"
mkdir -p "$R/etc/initramfs-tools/conf.d" "$R/etc/initramfs-tools/hooks"
printf 'MODULES=list\nCOMPRESS=gzip\n' > "$R/etc/initramfs-tools/conf.d/specfleet-vm.conf"
cat > "$R/etc/initramfs-tools/hooks/specfleet-virtio" <<'EOF'
#!/bin/sh
# specfleet VM fleet: the modules a QEMU -M virt guest needs to mount its virtio root disk (MODULES=list)
case "${1:-}" in prereqs) exit 0 ;; esac
. /usr/share/initramfs-tools/hook-functions
for m in virtio_pci virtio_mmio virtio_blk virtio_net ext4 crc32c_generic; do
  manual_add_modules "$m"
done
for m in virtio_pci virtio_mmio virtio_blk ext4; do
  force_load "$m"
done
EOF
chmod 755 "$R/etc/initramfs-tools/hooks/specfleet-virtio"
