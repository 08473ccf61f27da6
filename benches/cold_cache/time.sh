#!/usr/bin/env bash
# The latency a policy adds to a cold launch, timed natively on this machine's CPU (no
# cache simulation): benches/cold_cache/app.c on the mock driver, `pollute()` between
# launches as a real driver's own work, each launch call timed alone with the time stamp
# counter. Alternates processes with nothing attached and with the policy, REPS times, and
# prints each run and the median of the per-pair differences (policy − nothing):
#   benches/cold_cache/time.sh [POLICY_OBJECT=tests/shim/count_launch.bpf.c] [N=100000] [REPS=5] [SHIM_DIR=target/release]
# SHIM_DIR holds `gpubpf` and `libgpubpf.so` (a GPU dist works too, so that the same
# script runs on the GPU machine, which has `cc` but no Rust toolchain: there POLICY must
# be a built object). POLLUTE_KB (default 96) and POLLUTE_STMTS (default 6000, about
# 130 KB of code) size what `pollute()` touches; larger values evict the L2 cache too.
# COLD_SET="--set VAR=VALUE…" is passed to the policy's load (e.g. trace's emit_events=false).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
SRC=${1:-tests/shim/count_launch.bpf.c}
N=${2:-100000}
REPS=${3:-5}
SHIM_DIR=${4:-target/release}
case $SHIM_DIR in /*) ;; *) SHIM_DIR=$ROOT/$SHIM_DIR ;; esac
if [ "$SHIM_DIR" = "$ROOT/target/release" ]; then
	cargo build --release --locked -q -p gpubpf-shim -p gpubpf-loader-cli
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
python3 - "$W/pollute.s" "${POLLUTE_KB:-96}" "${POLLUTE_STMTS:-6000}" <<'PY'
import sys
# pollute(seed): touches every line of a KB-sized buffer, then runs STMTS distinct
# multiply-add-compare blocks of straight-line code (about 22 bytes each). Assembly, so
# that large sizes assemble in a second.
kb, stmts = int(sys.argv[2]), int(sys.argv[3])
out = [".text", ".globl pollute", ".type pollute,@function", "pollute:",
       "  leaq buf(%rip), %rax", f"  leaq {kb * 1024}(%rax), %rcx",
       "1: addq %rdi, (%rax)", "  addq $64, %rax", "  cmpq %rcx, %rax", "  jb 1b",
       "  movq %rdi, %rax"]
for i in range(stmts):
    out += [f"  imulq ${2 * i + 3}, %rax, %rax", f"  addq ${i}, %rax", f"  cmpq ${i}, %rax",
            f"  jne 2f", "  movq %rax, sink(%rip)", "2:"]
out += ["  movq %rax, sink(%rip)", "  ret", ".size pollute, .-pollute",
        ".bss", ".p2align 6", "buf:", f"  .zero {kb * 1024}", "sink:", "  .zero 8",
        '.section .note.GNU-stack,"",@progbits']
open(sys.argv[1], "w").write("\n".join(out) + "\n")
PY
cc -c -o "$W/pollute.o" "$W/pollute.s"
G=$SHIM_DIR/gpubpf
. benches/cold_cache/probe.sh
build_probe "$W" "$G" "$SRC"
"$G" load "$W/policy.o" --name probe >/dev/null
"$G" prog unload probe >/dev/null
once() { # LOADED
	# shellcheck disable=SC2086 # COLD_SET is a list of words
	if [ "$1" = 1 ]; then "$G" load "$W/policy.o" --name probe ${COLD_SET:-} >/dev/null; fi
	LD_PRELOAD="$SHIM_DIR/libgpubpf.so" "$W/app" "$N" 1 1 1 | sed -n 's/^launch_ns //p'
	if [ "$1" = 1 ]; then "$G" prog unload probe >/dev/null; fi
}
for r in $(seq "$REPS"); do
	echo "none   $(once 0)"
	echo "policy $(once 1)"
done | tee "$W/log"
python3 - "$W/log" "$SRC" <<'PY'
import re, statistics, sys
rows = [(l.split()[0], dict(re.findall(r"(\w+)=([0-9.]+)", l))) for l in open(sys.argv[1])]
none = [r for k, r in rows if k == "none"]
pol = [r for k, r in rows if k == "policy"]
for key in ("median", "mean"):
    d = [float(p[key]) - float(n[key]) for n, p in zip(none, pol)]
    print(f"COLDTIME {sys.argv[2]} {key}: nothing {statistics.median(float(n[key]) for n in none):.1f} ns, "
          f"policy {statistics.median(float(p[key]) for p in pol):.1f} ns, added {statistics.median(d):+.1f} ns "
          f"(pairs {', '.join(f'{x:+.1f}' for x in d)})")
PY
