#!/usr/bin/env bash
# Put the tiny test guest into the local OCI image store that local mode reads containerDisk and
# kernelBoot images from (run after build.sh):
#
#   bash hack/guest/images.sh OUTDIR
#
#   OUTDIR/images   localhost/qvirt/tiny-kernel:latest  /boot/vmlinuz, /boot/initrd.img
#                   localhost/qvirt/tiny-disk:latest    /disk/disk.qcow2
#
# Cached like build.sh: nothing happens while the store is newer than its inputs
# (QVIRT_GUEST_FORCE=1 rebuilds). Equal inputs give equal image digests.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=${1:?usage: images.sh OUTDIR}
store=$out/images
inputs=("$out/vmlinuz" "$out/initrd.img" "$out/disk.qcow2" "$here/images.sh")
stamp=$store/.qvirt-guest-images

for f in "${inputs[@]}"; do [ -s "$f" ] || { echo "guest images: $f missing (run build.sh first)" >&2; exit 1; }; done
if [ "${QVIRT_GUEST_FORCE:-}" != 1 ] && [ -f "$stamp" ]; then
	fresh=1
	for f in "${inputs[@]}"; do [ "$stamp" -nt "$f" ] || fresh=; done
	if [ -n "$fresh" ]; then
		echo ">> guest images: $store is up to date"
		exit 0
	fi
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/qvirt-images.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo ">> guest images: building qvirt-image"
(cd "$repo" && ${GO:-go} build -o "$work/qvirt-image" ./cmd/qvirt-image)
qi() { "$work/qvirt-image" --store "$store" "$@"; }
qi add localhost/qvirt/tiny-kernel:latest /boot/vmlinuz="$out/vmlinuz" /boot/initrd.img="$out/initrd.img"
qi add localhost/qvirt/tiny-disk:latest /disk/disk.qcow2="$out/disk.qcow2"
touch "$stamp"
echo ">> guest images: done: $store"
