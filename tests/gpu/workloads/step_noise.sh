#!/usr/bin/env bash
# The step goal's instrument against the machine's noise (issue #13 point 5): step_toggle.py
# with nothing toggled (every block alike: the toggle's zero and its spread), unpinned and
# pinned to four cores; quota + trace toggled, pinned, in blocks of 300 and of 75 steps, and
# with trace's events off in blocks of 75; and
# quota alone (its points are not called in a step: a control that must read zero). Each
# run's output is appended to OUTDIR/noise.log and its per-step durations go to
# OUTDIR/noise-NAME.csv (STEP_DUMP; seven files in all, within what a device call returns) for offline analysis
# (step_noise.py: how the paired figure's spread changes with the block length); prints each
# TOGGLE line, then step_noise.py's table for the runs where nothing was toggled.
# NOISE_RUNS="NAME…" runs only those (e.g. the blocks of 30 steps: "aa-pinned-30
# qt-pinned-30": each load makes trace a fresh ring, which 50 steps never fill, so every
# timed launch writes its event, as when someone reads them; "cl-pinned-30",
# "tr-pinned-30", "trn-pinned-30" and "quota-pinned-30" toggle count_launch, trace, trace
# without events and quota alone in the same blocks).
# The blocks come in step_toggle.py's order: ABBA since 2026-12-07 (STEP_ORDER=abab
# alternates them, as before, e.g. to see the parity effect an aa run showed that day).
# Registries go under NOISE_REG_ROOT (default /dev/shm, where gpubpf puts a user's registry
# by default: tmpfs; /tmp may be a disk filesystem, whose mapped pages fault through the
# filesystem when first written and again after each writeback).
#   tests/gpu/workloads/step_noise.sh DIST OUTDIR [CORES=8-11]
set -u
unset LD_PRELOAD
DIST=$(realpath "$1")
OUTDIR=$2
CORES=${3:-8-11}
HERE=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$OUTDIR"
REG_ROOT=${NOISE_REG_ROOT:-/dev/shm}
[ -d "$REG_ROOT" ] || REG_ROOT=${TMPDIR:-/tmp}
echo "registries under $REG_ROOT: $(stat -f -c %T "$REG_ROOT")" | tee -a "$OUTDIR/noise.log"
run() { # NAME PIN(0|1) POLICIES BLOCKS STEPS
	local name=$1 pin=$2 pol=$3 blocks=$4 steps=$5 pre=()
	if [ -n "${NOISE_RUNS:-}" ] && [[ " $NOISE_RUNS " != *" $name "* ]]; then
		return
	fi
	[ "$pin" = 1 ] && pre=(taskset -c "$CORES")
	# A registry must exist when the process starts, or the shim leaves it unpoliced
	# (run.sh's sections make theirs the same way): a load and an unload create it.
	export GPUBPF_HOME
	GPUBPF_HOME=$(mktemp -d -p "$REG_ROOT")
	"$DIST/gpubpf" load "$DIST/trace.o" --name scratch >/dev/null &&
		"$DIST/gpubpf" prog unload scratch >/dev/null || return
	STEP_POLICIES=$pol STEP_DUMP="$OUTDIR/noise-$name.csv" \
		LD_PRELOAD="$DIST/libgpubpf.so" timeout 120 "${pre[@]}" python3 "$HERE/step_toggle.py" \
		"$DIST" "$blocks" "$steps" >"$OUTDIR/run.txt" 2>&1
	{ echo "== $name (pinned=$pin)"; cat "$OUTDIR/run.txt"; } >>"$OUTDIR/noise.log"
	echo "$name (pinned=$pin): $(grep -h '^TOGGLE\|^policed' "$OUTDIR/run.txt" | tr '\n' ' ')"
	rm -f "$OUTDIR/run.txt"
	rm -rf "$GPUBPF_HOME"
}
run aa-free 0 none 40 300
run aa-pinned 1 none 40 300
run qt-pinned 1 "quota trace" 40 300
run qt-pinned-short 1 "quota trace" 160 75
STEP_TRACE_SET="emit_events=false" run qt-noevents-pinned-short 1 "quota trace" 160 75
run quota-pinned 1 quota 40 300
# Shorter blocks (the zero's spread falls with the block: ±0.3–0.6 % for 30 steps on
# 2026-12-07), more of them; only with NOISE_RUNS naming them.
[ -n "${NOISE_RUNS:-}" ] || NOISE_RUNS=none
run aa-pinned-30 1 none 400 30
run qt-pinned-30 1 "quota trace" 400 30
# count_launch alone: 25 launches × its per-call cost predict ~0.1 % of a step; more is the
# policies' indirect cost (what the step's own work then misses in the caches).
run cl-pinned-30 1 count_launch 400 30
# quota + trace's parts apart (2026-12-07 on an H100: qt +2.30 % ± 0.10, count_launch +0.40 %
# ± 0.12): trace alone, with and without its events, and quota alone (its points are not
# called in a step: a control that must read zero).
run tr-pinned-30 1 trace 400 30
STEP_TRACE_SET="emit_events=false" run trn-pinned-30 1 trace 400 30
run quota-pinned-30 1 quota 400 30
for f in "$OUTDIR"/noise-aa-*.csv; do
	python3 "$HERE/step_noise.py" "$f"
done
