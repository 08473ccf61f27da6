#!/usr/bin/env bash
# Two shim builds, or two policies, side by side on the launch goal (issue #13 point 5):
# runs launch_toggle.sh (one process, the policy loaded and unloaded between loops) for A
# and B alternately, REPS times each, so that both meet the same machine state. A and B
# are each DIST or DIST:POLICY (an object of DIST, default count_launch). Prints each
# toggle's line prefixed with its name, then one `AB` line per side with the median of
# its runs' paired figures (launch_toggle.sh).
#   tests/gpu/workloads/launch_ab.sh A B LAUNCH_BENCH [REPS=3] [ROUNDS=40] [N=100000]
set -u
HERE=$(dirname "$0")
A=$1 B=$2 BENCH=$3
REPS=${4:-3} ROUNDS=${5:-40} N=${6:-100000}
LOG=$(mktemp)
dist_of() { echo "${1%%:*}"; }
policy_of() { case $1 in *:*) echo "${1#*:}" ;; *) echo count_launch ;; esac; }
name_of() { echo "$(basename "$(dist_of "$1")"):$(policy_of "$1")"; }
for r in $(seq "$REPS"); do
	for side in "$A" "$B"; do
		line=$(TOGGLE_POLICY=$(policy_of "$side") "$HERE/launch_toggle.sh" "$(dist_of "$side")" \
			"$BENCH" "$ROUNDS" "$N" | grep '^TOGGLE')
		echo "$(name_of "$side") rep=$r $line" | tee -a "$LOG"
	done
done
PYTHONPATH=$HERE python3 -c 'import sys; from common import ab_summary; ab_summary(*sys.argv[1:4], "ns")' \
	"$LOG" "$(name_of "$A")" "$(name_of "$B")"
