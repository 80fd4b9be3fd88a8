#!/usr/bin/env bash
# Times `make up` (until the example VM is Running) and `make down`, in seconds:
#   cold: after `rm -rf _local`; warm: the second of two runs right after it.
# Every run starts a fresh registry and pushes every image into it, and nodes with empty
# containerd stores, so cold and warm differ only in what stays outside _local: the Go build cache,
# the built _tools and _guest, the page cache. What a fully cold machine adds (building Kubernetes,
# containerd, the registry) shows in make's ">> built ... in N s" lines, printed when they occur.
# The machine is shared: run it as `flock /tmp/qvirt-heavy.lock hack/bench-make-run.sh`.
set -euo pipefail
cd "$(dirname "$0")/.."

log=$(mktemp)
trap 'rm -f "$log"' EXIT

# once times one `make up` and `make down` and prints: <label> up <s> down <s>, then the steps'
# own timings.
once() {
	local label=$1 t0 t1 t2
	t0=$(date +%s.%N)
	if ! make up >"$log" 2>&1; then
		cat "$log"
		make down >/dev/null 2>&1 || true
		echo "$label: make up failed" >&2
		exit 1
	fi
	t1=$(date +%s.%N)
	make down >>"$log" 2>&1
	t2=$(date +%s.%N)
	awk -v l="$label" -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { printf "%s up %.1f down %.1f\n", l, b - a, c - b }'
	grep -h '>> built' "$log" || true
	grep -h '^>> cluster ready in' _local/qvirt-local.log | sed "s/^>>/  $label:/" || true
}

make down >/dev/null 2>&1 || true
rm -rf _local
once cold
once warm-1
once warm-2
