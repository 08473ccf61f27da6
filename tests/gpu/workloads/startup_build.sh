#!/usr/bin/env bash
# The shim's first build in a process on the GPU machine, with and without the user
# registry's verification cache (issue #12's start-up point): N processes of
# workloads/startup.c (cuInit + cuDeviceTotalMem, no context) each way, alternating, with
# quota.o and trace.o loaded and GPUBPF_LOG=info; prints the median and quartiles of the
# `policies published … micros=` figure (re-verification or the cache, preparation and
# publication of the 33 programs, on the application's first driver call) and of cuInit as
# the process timed it (the shim's whole initialisation runs inside it).
#
#   tests/gpu/workloads/startup_build.sh [DIST] [N]     (defaults target/gpu-dist, 20)
set -euo pipefail
unset LD_PRELOAD
DIST=$(realpath "${1:-target/gpu-dist}")
N=${2:-20}
HERE=$(cd "$(dirname "$0")" && pwd)
W=$(mktemp -d /tmp/gpubpf-startup-build.XXXXXX)
trap 'rm -rf "$W"' EXIT
CUDA_ROOT=$(dirname "$(dirname "$(command -v nvcc)")")
gcc -O2 -I"$CUDA_ROOT/include" -I"$CUDA_ROOT/targets/x86_64-linux/include" -o "$W/startup" \
	"$HERE/startup.c" -lcuda 2>/dev/null ||
	gcc -O2 -I"$CUDA_ROOT/include" -I"$CUDA_ROOT/targets/x86_64-linux/include" -o "$W/startup" \
		"$HERE/startup.c" -L"$CUDA_ROOT/lib64/stubs" -L"$CUDA_ROOT/targets/x86_64-linux/lib/stubs" -lcuda
export GPUBPF_HOME=$W/reg
"$DIST/gpubpf" load "$DIST/quota.o" --set limit_bytes=1TiB --set log_denials=0 >/dev/null
"$DIST/gpubpf" load "$DIST/trace.o" >/dev/null
echo "cache entries after load: $(ls "$GPUBPF_HOME/verified" | wc -l)"
for ((i = 0; i < N; i++)); do
	for mode in on off; do
		GPUBPF_VERIFY_CACHE=$mode GPUBPF_LOG=info LD_PRELOAD="$DIST/libgpubpf.so" \
			"$W/startup" noctx >"$W/out" 2>"$W/err"
		m=$(grep -o 'policies published.*micros=[0-9]*' "$W/err" | grep -o 'micros=[0-9]*' | cut -d= -f2)
		c=$(grep -o 'cached=[0-9]*' "$W/err" || true)
		init=$(grep -o 'init_ms=[0-9.]*' "$W/out" | cut -d= -f2)
		echo "$mode $m $init $c" >>"$W/runs"
	done
done
python3 - "$W/runs" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for mode in ("on", "off"):
    b = sorted(int(r[1]) for r in rows if r[0] == mode)
    i = sorted(float(r[2]) for r in rows if r[0] == mode)
    cached = sorted({r[3] for r in rows if r[0] == mode and len(r) > 3})
    q = statistics.quantiles(b, n=4)
    print(f"FIGURE startup-build cache {mode}: first build {statistics.median(b) / 1e3:.2f} ms "
          f"(quartiles {q[0] / 1e3:.2f}-{q[2] / 1e3:.2f}, n={len(b)}), cuInit median "
          f"{statistics.median(i):.1f} ms; {' '.join(cached) or 'no cache'}")
PY
