#!/usr/bin/env bash
# What makes a btrfs snapshot slower as a pool fills (issue 17, item 1):
# the count of snapshots of one source, or the count of subvolumes. On a
# fresh btrfs on a loop image (the mount options of stead's pool, no
# quotas), N snapshots are taken two ways, side by side:
#   one source:  every snapshot of the same template (as the spares are)
#   rebased:     from BASES reflink copies of the template, N/BASES each
# and it prints the mean wall and CPU time of a snapshot (wall/CPU, µs) at
# the start, in the middle and at the end of each. The wall time follows
# the disk behind the loop image (each commit flushes it); the CPU time is
# the commit's own work. As root:
#
#   bash bench/btrfssnap/run.sh [N] [BASES]     (defaults 1000 and 10)
#
# The template is a copy of the host's /etc (a few MB, as stead's host
# template is). Images go in /var/tmp and are removed.
set -euo pipefail
n=${1:-1000}
bases=${2:-10}
per=$(( (n + bases - 1) / bases ))

# cpu_ms PID: the CPU time (user+sys) of the finished children of shell
# PID, in ms.
cpu_ms() {
	awk '{print int(($16 + $17) * 1000 / '"$(getconf CLK_TCK)"')}' "/proc/$1/stat"
}

# snap SRC_FN FROM TO: snapshots FROM..TO, source named by SRC_FN i; prints
# the mean wall time and the mean CPU time (the commit runs in the
# ioctl's context), in microseconds.
snap() {
	local fn=$1 from=$2 to=$3 s c me=$BASHPID
	s=$(date +%s%N)
	c=$(cpu_ms "$me")
	for i in $(seq "$from" "$to"); do
		btrfs subvolume snapshot "$mnt/$($fn "$i")" "$mnt/sb/s$i" >/dev/null
	done
	echo "$(( ($(date +%s%N) - s) / 1000 / (to - from + 1) ))/$(( ($(cpu_ms "$me") - c) * 1000 / (to - from + 1) ))"
}
one() { echo tmpl; }
rebased() { echo "base$(( ($1 - 1) / per ))"; }

run() {
	local how=$1 img=/var/tmp/btrfssnap-$1.img
	mnt=/var/tmp/btrfssnap-$1
	umount "$mnt" 2>/dev/null || true
	rm -f "$img"
	truncate -s 8G "$img"
	local dev
	dev=$(losetup -f --show "$img")
	mkfs.btrfs -q "$dev" >/dev/null
	mkdir -p "$mnt"
	mount -o discard=async,space_cache=v2 "$dev" "$mnt"
	btrfs subvolume create "$mnt/tmpl" >/dev/null
	cp -a /etc "$mnt/tmpl/" 2>/dev/null || true
	mkdir -p "$mnt/sb"
	local fn=one
	if [ "$how" = rebased ]; then
		fn=rebased
		for b in $(seq 0 $((bases - 1))); do
			btrfs subvolume create "$mnt/base$b" >/dev/null
			cp -a --reflink=always "$mnt/tmpl/." "$mnt/base$b/" 2>/dev/null || true
		done
	fi
	local a b c
	a=$(snap $fn 1 20)
	b=$(snap $fn 21 $((n / 2)))
	c=$(snap $fn $((n / 2 + 1)) $((n - 20)))
	local d
	d=$(snap $fn $((n - 19)) "$n")
	printf '%-10s %10s %10s %10s %10s\n' "$how" "$a" "$b" "$c" "$d"
	umount "$mnt"
	losetup -d "$dev"
	rm -f "$img"
}

echo "btrfs snapshot, mean wall/CPU µs each, $n snapshots ($bases bases of $per for rebased), $(date -u +%FT%TZ)"
printf '%-10s %10s %10s %10s %10s\n' source "1-20" "21-$((n / 2))" "-$((n - 20))" "last 20"
run one
run rebased
