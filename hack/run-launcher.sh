#!/usr/bin/env bash
# Boots the example VM with a standalone virt-launcher (no cluster) and says how to reach it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
guest=${QVIRT_GUEST_DIR:-$root/_guest}
dir=$root/_local/example
mkdir -p "$dir"
sed "s|@GUEST@|$guest|g" "$root/deploy/examples/launcher-spec.json" >"$root/_local/example-spec.json"
cat <<MSG
>> starting the example VM (QEMU under emulation); logs: $dir/qemu.log
>> when it is up:
     console:  socat -,raw,echo=0,escape=0x1d UNIX-CONNECT:$dir/serial0.sock   (Ctrl+] leaves)
     boot log: cat $dir/serial0.log   (the output before it: serial0.log.1)
     VNC:      socat TCP-LISTEN:5900,bind=127.0.0.1,reuseaddr UNIX-CONNECT:$dir/vnc.sock, then a viewer on 127.0.0.1:5900
>> Ctrl-C shuts the VM down (ACPI power button, then stop).
MSG
exec "$root/bin/virt-launcher" --dir "$dir" --vmi default/example --spec "$root/_local/example-spec.json" --stop-grace-period 20s
