#!/usr/bin/env bash
# What a cold launch pays, rung by rung, from a policy that does nothing to trace.o: runs
# time.sh (the cold call timed natively, nothing attached vs the policy, alternating
# processes) for each rung in turn and prints one line per rung with the added time and the
# step from the rung below:
#   pass_launch      an entry program that does nothing: the shim's policed path
#   pass_pair        an entry and an exit program that do nothing: the path of both phases
#   count_launch     an entry program that updates a hash map (the launch goal's policy)
#   trace-noevents   trace.o with emit_events=false: its programs' work without the ring
#   trace            trace.o as built (its ring fills within ~2 200 launches, after which
#                    each launch's reserve fails: what the ring costs then is the attempt)
# By default pollute() evicts the L2 too (POLLUTE_KB=4096, POLLUTE_STMTS=120000: 4 MiB of
# data, ~2.6 MiB of code between launches), as a PyTorch step's own work does: on the
# development VM trace then costs a cold launch ~0.8 µs, what the H100's training step
# charged each traced launch on 2026-12-07 (docs/shim.md, "The cold path, rung by rung").
#   benches/cold_cache/ladder.sh [N=10000] [REPS=3] [SHIM_DIR=target/release]   (~5 min here)
# With a GPU dist as SHIM_DIR (tests/gpu/shim/build-dist.sh) the rungs are its built
# objects (pass_launch.o, pass_pair.o, count_launch.o, trace.o), so it runs on the GPU
# machine's host CPU as well.
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-10000}
REPS=${2:-3}
SHIM_DIR=${3:-target/release}
export POLLUTE_KB=${POLLUTE_KB:-4096} POLLUTE_STMTS=${POLLUTE_STMTS:-120000}
if [ "$SHIM_DIR" = target/release ]; then
	src() { case $1 in trace) echo policies/trace.bpf.c ;; *) echo "tests/shim/$1.bpf.c" ;; esac; }
else
	src() { echo "$SHIM_DIR/$1.o"; }
fi
echo "cold launch ladder: N=$N REPS=$REPS POLLUTE_KB=$POLLUTE_KB POLLUTE_STMTS=$POLLUTE_STMTS SHIM_DIR=$SHIM_DIR"
prev=0
for rung in pass_launch pass_pair count_launch trace-noevents trace; do
	set=
	obj=$rung
	if [ "$rung" = trace-noevents ]; then
		obj=trace
		set="--set emit_events=false"
	fi
	line=$(COLD_SET=$set benches/cold_cache/time.sh "$(src "$obj")" "$N" "$REPS" "$SHIM_DIR" 2>/dev/null |
		grep '^COLDTIME .* median:') || { echo "$rung: time.sh failed" >&2; exit 1; }
	added=$(sed -n 's/.*added \([-+0-9.]*\) ns.*/\1/p' <<<"$line")
	printf 'LADDER %-15s added %+7.1f ns (step %+7.1f ns)  %s\n' "$rung" "$added" \
		"$(python3 -c "print($added - $prev)")" "$(sed 's/.*(pairs/(pairs/' <<<"$line")"
	prev=$added
done
