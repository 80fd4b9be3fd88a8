#!/usr/bin/env bash
# Build the tiny qvirt test guest from Debian packages only.
#
#   bash hack/guest/build.sh OUTDIR
#
# Outputs in OUTDIR (see hack/guest/README.md):
#   vmlinuz          Debian cloud kernel (linux-image-cloud-amd64): fast to boot, no SATA/AHCI
#   vmlinuz-generic  Debian generic kernel (linux-image-amd64): slower to boot, has SATA/AHCI
#   initrd.img       gzip'd cpio for either kernel: busybox-static, hack/guest/init, modules
#   disk.qcow2       ext4 (label qvirt-disk) holding hello.txt = "qvirt-disk-content"
#   build-info.txt   package versions and module lists
# Kernels are unpacked with dpkg-deb, never installed on the host.
#
# QVIRT_GUEST_FORCE=1 rebuilds even when the outputs are up to date.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${1:?usage: build.sh OUTDIR}
sources=("$here/build.sh" "$here/init")
outputs=(vmlinuz vmlinuz-generic initrd.img disk.qcow2)
# output file : kernel metapackage
kernels=("vmlinuz:linux-image-cloud-amd64" "vmlinuz-generic:linux-image-amd64")

# Modules the guest loads, in this order, where the running kernel has them as modules
# ("name args" passes module parameters; names that are built in or absent are skipped).
# scsi_mod goes first with scan=sync so that disks exist once the controllers' modprobe returns.
modules=(
	"scsi_mod scan=sync" sd_mod sr_mod
	virtio_pci virtio_blk virtio_scsi virtio_net virtio_rng virtio_balloon virtio_console
	ahci ata_piix nvme
	crc32c_generic crc32c_intel ext4 isofs vfat nls_cp437 nls_ascii nls_utf8 loop
	button evdev
)

log() { echo ">> guest: $*"; }
die() { echo "guest: error: $*" >&2; exit 1; }

# ---- up to date? -------------------------------------------------------------------
if [ "${QVIRT_GUEST_FORCE:-}" != 1 ]; then
	fresh=1
	for o in "${outputs[@]}"; do
		[ -s "$out/$o" ] || { fresh=; break; }
		for s in "${sources[@]}"; do [ "$out/$o" -nt "$s" ] || fresh=; done
	done
	if [ -n "$fresh" ]; then
		echo ">> guest: $out is up to date (QVIRT_GUEST_FORCE=1 to rebuild)"
		exit 0
	fi
fi

for c in apt-get apt-cache dpkg-deb cpio gzip mkfs.ext4 qemu-img; do
	command -v "$c" >/dev/null || die "$c not found (run 'make apt')"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/qvirt-guest.XXXXXX")
trap 'rm -rf "$work"' EXIT
chmod 755 "$work"
dl=$work/debs
mkdir -p "$dl"
# apt-get download drops privileges to _apt: let it write here.
if [ "$(id -u)" = 0 ] && id _apt >/dev/null 2>&1; then chown _apt "$dl"; fi

# ---- download ----------------------------------------------------------------------
# resolve META: the kernel image package that a metapackage currently points at.
resolve() {
	apt-cache depends "$1" 2>/dev/null | awk '/^ *Depends: linux-image-[0-9]/ { print $2; exit }'
}
resolve_all() {
	pkgs=()
	local k p
	for k in "${kernels[@]}"; do
		p=$(resolve "${k#*:}")
		[ -n "$p" ] || return 1
		pkgs+=("$p")
	done
}
# The SSH server and what it needs that a host with QEMU installed does not have.
ssh_pkgs=(dropbear-bin libtomcrypt1 libtommath1 openssh-sftp-server)
fetch() { (cd "$dl" && apt-get download -q "${pkgs[@]}" busybox-static qemu-guest-agent "${ssh_pkgs[@]}" >/dev/null 2>"$work/apt.err"); }
updated=
apt_update() {
	[ -z "$updated" ] || return 1
	log "apt-get update"
	apt-get update -qq || die "apt-get update failed"
	updated=1
}

if ! resolve_all; then
	apt_update
	resolve_all || die "cannot resolve the kernel packages behind: ${kernels[*]#*:}"
fi
log "downloading ${pkgs[*]} busybox-static qemu-guest-agent ${ssh_pkgs[*]}"
if ! fetch; then
	# Stale package lists name files that the archive no longer has.
	apt_update || { cat "$work/apt.err" >&2; die "apt-get download failed"; }
	resolve_all || die "cannot resolve the kernel packages behind: ${kernels[*]#*:}"
	fetch || { cat "$work/apt.err" >&2; die "apt-get download failed"; }
fi

deb() { local f=("$dl/$1"_*.deb); echo "${f[0]}"; }
bbroot=$work/busybox
dpkg-deb -x "$(deb busybox-static)" "$bbroot"
bb=$bbroot/bin/busybox
[ -x "$bb" ] || die "no bin/busybox in busybox-static"
info=("busybox-static: $(dpkg-deb -f "$(deb busybox-static)" Version)")

# ---- initramfs ---------------------------------------------------------------------
root=$work/root
stage=$work/out
mkdir -p "$stage" "$root"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,tmp,run,mnt,root,etc,var/log}
chmod 1777 "$root/tmp"
declare -A use=() # module entries that some kernel has as a module

for i in "${!kernels[@]}"; do
	file=${kernels[$i]%%:*}
	pkg=${pkgs[$i]}
	log "unpacking $pkg"
	kroot=$work/k$i
	dpkg-deb -x "$(deb "$pkg")" "$kroot"
	kver=$(ls "$kroot/lib/modules")
	kmod=$kroot/lib/modules/$kver
	[ -f "$kroot/boot/vmlinuz-$kver" ] || die "unexpected layout in $pkg"
	cp "$kroot/boot/vmlinuz-$kver" "$stage/$file"
	"$bb" depmod -b "$kroot" "$kver"

	# The module closure, from modules.dep: "path: dep dep ..." (paths relative to $kmod).
	declare -A dep=() base=() want=()
	while IFS=: read -r p d; do
		dep[$p]=$d
		b=${p##*/}
		b=${b%%.ko*}
		base[${b//-/_}]=$p
	done <"$kmod/modules.dep"
	add() {
		[ -z "${want[$1]:-}" ] || return 0
		want[$1]=1
		local d
		for d in ${dep[$1]}; do add "$d"; done
	}
	loaded=() builtin=() absent=()
	for entry in "${modules[@]}"; do
		name=${entry%% *}
		p=${base[${name//-/_}]:-}
		if [ -n "$p" ]; then
			add "$p"
			loaded+=("$name")
			use[$entry]=1
		elif sed 's,.*/,,; s,\.ko$,,; s,-,_,g' "$kmod/modules.builtin" | grep -qx "${name//-/_}"; then
			builtin+=("$name")
		else
			absent+=("$name")
		fi
	done
	dst=$root/lib/modules/$kver
	mkdir -p "$dst"
	for p in "${!want[@]}"; do
		mkdir -p "$dst/${p%/*}"
		cp "$kmod/$p" "$dst/$p"
	done
	cp "$kmod/modules.builtin" "$kmod/modules.order" "$dst/"
	"$bb" depmod -b "$root" "$kver"
	log "$file ($kver): modules: ${loaded[*]}"
	log "$file ($kver): built in: ${builtin[*]:-none}${absent:+; absent: ${absent[*]}}"
	info+=("$file: $pkg $(dpkg-deb -f "$(deb "$pkg")" Version)"
		"  modules: ${loaded[*]}" "  built-in: ${builtin[*]:-}" "  absent: ${absent[*]:-}")
	unset dep base want
	rm -rf "$kroot"
done

for entry in "${modules[@]}"; do
	[ -z "${use[$entry]:-}" ] || echo "$entry"
done >"$root/etc/modules"
cp "$bb" "$root/bin/busybox"
ln -s busybox "$root/bin/sh"
install -m 0755 "$here/init" "$root/init"

# ---- guest agent and SSH server ---------------------------------------------------
# Debian's binaries with the shared libraries they link, at the paths ldd names: the host's,
# of the same Debian release (the QEMU packages installed most), or else those of the
# downloaded library packages.
extra=$work/extra
mkdir -p "$extra"
for p in qemu-guest-agent "${ssh_pkgs[@]}"; do
	dpkg-deb -x "$(deb "$p")" "$extra"
	info+=("$p: $(dpkg-deb -f "$(deb "$p")" Version)")
done
extralibs=$extra/usr/lib/x86_64-linux-gnu
# install_bin SRC DST: SRC at DST in the guest, with every library it links.
install_bin() {
	local src=$1 dst=$2 libs l
	[ -x "$src" ] || die "no $src"
	install -D -m 0755 "$src" "$root$dst"
	if LD_LIBRARY_PATH=$extralibs ldd "$src" | grep -q "not found"; then
		LD_LIBRARY_PATH=$extralibs ldd "$src" >&2
		die "${src##*/} needs libraries this host does not have (run 'make apt')"
	fi
	libs=$(LD_LIBRARY_PATH=$extralibs ldd "$src" | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }')
	for l in $libs; do
		case $l in
		"$extralibs"/*) install -D -m 0755 "$(readlink -f "$l")" "$root/usr/lib/x86_64-linux-gnu/${l##*/}" ;;
		*) install -D -m 0755 "$(readlink -f "$l")" "$root$l" ;;
		esac
	done
}
install_bin "$extra/usr/sbin/qemu-ga" /usr/sbin/qemu-ga
install_bin "$extra/usr/sbin/dropbear" /usr/sbin/dropbear
# Where Debian's dropbear looks for the SFTP server (OpenSSH's scp speaks SFTP).
install_bin "$extra/usr/lib/openssh/sftp-server" /usr/lib/sftp-server
chroot "$root" /usr/sbin/qemu-ga --version >/dev/null || die "qemu-ga does not run from the initramfs"
chroot "$root" /usr/sbin/dropbear -V >/dev/null 2>&1 || die "dropbear does not run from the initramfs"
# The guest's users, root and qvirt: the SSH server and the agent's authorized-keys commands
# look them up.
printf '%s\n' 'root:*:0:0:root:/root:/bin/sh' 'qvirt:*:1000:1000:qvirt:/home/qvirt:/bin/sh' >"$root/etc/passwd"
printf '%s\n' 'root:x:0:' 'qvirt:x:1000:' >"$root/etc/group"
mkdir -p "$root/home/qvirt"
echo /bin/sh >"$root/etc/shells"
mkdir -p "$root/etc/dropbear" "$root/usr/share/qvirt"
# A filesystem for the guest to mount on a loop device (hack/guest/init: /mnt/data).
mke2fs -q -F -t ext2 -L qvirt-data -E root_owner=0:0 "$root/usr/share/qvirt/data.img" 4M
chmod 700 "$root/root"
# What the agent reports as the guest's OS (guest-get-osinfo reads it).
cat >"$root/etc/os-release" <<'EOF'
NAME="qvirt tiny guest"
ID=qvirt-tiny
VERSION_ID=1
VERSION="1 (busybox)"
PRETTY_NAME="qvirt tiny guest 1"
EOF

log "packing initrd.img"
# /dev/console must exist before /init runs (the kernel opens it for init's stdio). A
# tiny archive of its own, written ahead of the main one, holds it so that building
# needs no mknod (the kernel reads concatenated cpio archives).
newc() { # newc NAME MODE RDEVMAJOR RDEVMINOR: one header + name, 4-byte aligned
	local name=$1 mode=$2 maj=$3 min=$4 ns hdr
	ns=$((${#name} + 1))
	hdr=$(printf '070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X' \
		0 "$mode" 0 0 1 0 0 0 0 "$maj" "$min" "$ns" 0)
	printf '%s%s\0' "$hdr" "$name"
	head -c $(((4 - (110 + ns) % 4) % 4)) /dev/zero
}
{
	newc dev 0x41ED 0 0
	newc dev/console 0x2180 5 1
	newc TRAILER!!! 0 0 0
	(cd "$root" && find . -mindepth 1 | LC_ALL=C sort | cpio -o -H newc -R 0:0 --reproducible --quiet)
} | gzip -9n >"$stage/initrd.img"

# ---- data disk ---------------------------------------------------------------------
log "making disk.qcow2 (ext4, label qvirt-disk)"
content=$work/disk
mkdir -p "$content"
echo qvirt-disk-content >"$content/hello.txt"
mkfs.ext4 -q -F -L qvirt-disk -U 2a1b5c1e-9a57-4c3b-8f21-5d0e6c7a9b10 -E root_owner=0:0 \
	-d "$content" "$work/disk.raw" 32M >/dev/null
qemu-img convert -f raw -O qcow2 "$work/disk.raw" "$stage/disk.qcow2"

printf '%s\n' "${info[@]}" >"$stage/build-info.txt"
mkdir -p "$out"
# initrd.img and the kernels last: they are what the up-to-date check looks at first.
for f in build-info.txt disk.qcow2 initrd.img vmlinuz-generic vmlinuz; do mv -f "$stage/$f" "$out/$f"; done
log "done: $out/{vmlinuz,vmlinuz-generic,initrd.img,disk.qcow2}"
