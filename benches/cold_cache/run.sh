#!/usr/bin/env bash
# Cache lines a policed call misses when the caches are cold, as they are in a real CUDA
# application (the driver's own work between two calls evicts most of what the shim touched
# at the previous one). Neither the development VM nor the H200 machine exposes hardware
# counters, so this counts them deterministically with cachegrind's cache simulation
# (valgrind, from Debian's packages): app.c launches on the mock driver with a polluting
# function between launches, under the release shim, with and without a policy loaded; the
# difference of a 2N and an N launch run, per launch, with minus without, is what running
# the policy costs a cold launch: instructions, I1 misses (code lines), D1 misses (data
# lines). `--annotate` also prints the per-function split of the run with the policy.
#   benches/cold_cache/run.sh [POLICY_OBJECT=tests/shim/count_launch.bpf.c] [N=2000] [--annotate]
# COLD_SET="--set VAR=VALUE…" is passed to the policy's load (e.g. trace's emit_events=false).
# SHIM_SO (default target/release/libgpubpf.so) measures another build of the shim, e.g.
# benches/pgo/build.sh's `SHIM_SO=target/pgo/libgpubpf.so`.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
SRC=${1:-tests/shim/count_launch.bpf.c}
N=${2:-2000}
ANNOTATE=${3:-}
SHIM_SO=$(realpath "${SHIM_SO:-target/release/libgpubpf.so}")
command -v valgrind >/dev/null || { echo "valgrind not found (apt-get install valgrind)" >&2; exit 1; }
cargo build --release --locked -q -p gpubpf-shim -p gpubpf-loader-cli
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
python3 - "$W/pollute.c" <<'PY'
import sys
out = ["#include <stdint.h>", "static volatile uint64_t sink;", "static uint64_t buf[96 * 1024 / 8];",
       "__attribute__((noinline)) void pollute(uint64_t s) {",
       "  for (unsigned i = 0; i < sizeof(buf) / 8; i += 8) buf[i] += s;", "  uint64_t x = s;"]
out += [f"  x = x * {2 * i + 3}u + {i}u; if (x == {i}u) sink = x;" for i in range(6000)]
out.append("  sink = x;\n}")
open(sys.argv[1], "w").write("\n".join(out) + "\n")
PY
cc -O1 -c -o "$W/pollute.o" "$W/pollute.c"
G=$ROOT/target/release/gpubpf
. benches/cold_cache/probe.sh
build_probe "$W" "$G" "$SRC"
run() { # NAME LAUNCHES
	valgrind --tool=cachegrind --trace-children=yes --cache-sim=yes --I1=32768,8,64 \
		--D1=49152,12,64 --LL=33554432,16,64 --cachegrind-out-file="$W/cg.$1.$2" \
		env LD_PRELOAD="$SHIM_SO" "$W/app" "$2" 1 4 >"$W/vg.$1.$2" 2>&1 ||
		{ cat "$W/vg.$1.$2" >&2; exit 1; }
}
totals() { cg_annotate --show=Ir,I1mr,D1mr,D1mw "$W/cg.$1" | grep "PROGRAM TOTALS" | tr -d ',' | awk '{print $1, $3, $5, $7}'; }
# shellcheck disable=SC2086 # COLD_SET is a list of words
"$G" load "$W/policy.o" --name probe ${COLD_SET:-} >/dev/null
run pol "$N"
run pol $((2 * N))
"$G" prog unload probe >/dev/null
run none "$N"
run none $((2 * N))
python3 - "$N" "$SRC" "$(totals pol.$N)" "$(totals pol.$((2 * N)))" "$(totals none.$N)" "$(totals none.$((2 * N)))" <<'PY'
import sys
n = int(sys.argv[1])
a, b, c, d = ([int(x) for x in s.split()] for s in sys.argv[3:7])
names = ["instructions", "I1 misses", "D1 read misses", "D1 write misses"]
added = [((y - x) - (w - v)) / n for x, y, v, w in zip(a, b, c, d)]
print(f"COLD {sys.argv[2]}: per cold launch, policy vs nothing attached: "
      + ", ".join(f"{k} {v:+.1f}" for k, v in zip(names, added)))
PY
if [ "$ANNOTATE" = --annotate ]; then
	echo "by function, for $N launches with the policy (Ir I1mr D1mr D1mw; the mock's and app's own rows too):"
	cg_diff "$W/cg.pol.$N" "$W/cg.pol.$((2 * N))" >"$W/diff" 2>/dev/null
	cg_annotate --show=Ir,I1mr,D1mr,D1mw --sort=I1mr --threshold=0 --auto=no "$W/diff" |
		grep -v 'pollute' | awk 'NR > 20 && $1 != "0"' | sed 's/([^)]*%)//g' | head -40
fi
