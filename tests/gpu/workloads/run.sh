#!/usr/bin/env bash
# Real CUDA workloads under the shim (issue #13, points 2-5), on the GPU machine. Takes the
# artefacts built on the development machine by tests/gpu/shim/build-dist.sh (DIST: gpubpf,
# libgpubpf.so, quota.o, trace.o, meminfo.o, count_launch.o) and prints one
# `PASS|FAIL|SKIP name: detail` line per check, the `FIGURE` lines of the measurements, a
# summary line, then the raw outputs of the failed checks. Never stops at a failing check;
# every step runs under `timeout`, and a section that would not fit the time budget
# (WL_BUDGET seconds, default 540: a 600 s device call) is reported as failed instead of run. WL_ONLY="WORD…"
# runs only the sections with a check whose name contains one of the words.
#
#   tests/gpu/workloads/run.sh [DIST]     (default target/gpu-dist)
#
# Each section uses a registry of its own (GPUBPF_HOME under a scratch directory): quota's
# pinned maps outlive the processes that charged them, so sections must not share one.
# The registries live in /dev/shm (WL_REG_ROOT), where gpubpf puts a user's registry by
# default: tmpfs. Until 2026-12-07 they lived in /tmp, which may be a disk filesystem (ext4 on
# the development VM; not checked on the GPU machine), whose mapped pages fault through the
# filesystem when first written and again after each writeback.
set -u
unset LD_PRELOAD
DIST=$(realpath "${1:-target/gpu-dist}")
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d /tmp/gpubpf-workloads.XXXXXX)
REG_ROOT=${WL_REG_ROOT:-/dev/shm}
[ -d "$REG_ROOT" ] || REG_ROOT=$WORK
REGS=$(mktemp -d -p "$REG_ROOT" gpubpf-workloads-reg.XXXXXX)
trap 'rm -rf "$REGS"' EXIT
G="$DIST/gpubpf"
SHIM="$DIST/libgpubpf.so"
export GPUBPF="$G"
export PYTHONDONTWRITEBYTECODE=1
START=$(date +%s)
BUDGET=${WL_BUDGET:-540}
pass=0
fail=0
skip=0
FAILED=()
FIGS=()

elapsed() { echo $(($(date +%s) - START)); }

result() { # NAME 1|0|SKIP DETAIL [RAW FILE…]
	local name=$1 st=$2 detail=$3
	shift 3
	case $st in
	1) echo "PASS $name: $detail"; pass=$((pass + 1)) ;;
	SKIP) echo "SKIP $name: $detail"; skip=$((skip + 1)) ;;
	*) echo "FAIL $name: $detail"; fail=$((fail + 1)); FAILED+=("$@") ;;
	esac
}

fail_all() { # "NAME…" DETAIL [RAW FILE…]
	local names=$1 detail=$2 n
	shift 2
	for n in $names; do result "$n" 0 "$detail" "$@"; done
}

figures() { # FILE: echo and keep its FIGURE lines
	local l
	while IFS= read -r l; do
		echo "$l"
		FIGS+=("$l")
	done < <(grep '^FIGURE ' "$1" 2>/dev/null)
}

collect() { # RC FILE "NAME…" [MORE RAW FILES…]: the RESULT lines FILE holds for NAME…
	local rc=$1 file=$2 names=$3 n line st detail why
	shift 3
	figures "$file"
	for n in $names; do
		line=$(grep -m1 "^RESULT $n " "$file" 2>/dev/null)
		if [ -z "$line" ]; then
			why="exit status $rc"
			[ "$rc" = 124 ] && why="$why: timed out"
			result "$n" 0 "no result ($why)" "$file" "$@"
			continue
		fi
		line=${line#"RESULT $n "}
		st=${line%% *}
		detail=${line#* }
		[ "$detail" = "$line" ] && detail=""
		result "$n" "$st" "$detail" "$file" "$@"
	done
}

HAVE_TORCH=0
HAVE_NVCC=0
section() { # "NAME…" SECONDS NEED…: whether a section can run (NEED: DIST files, torch,
	#          nvcc, or a built program under WORK); fails NAME… when it cannot
	local names=$1 need=$2 x miss="" want
	shift 2
	# WL_ONLY="startup dataloader …": run only the sections with a check name containing one
	# of these words (the others are not reported at all).
	if [ -n "${WL_ONLY:-}" ]; then
		want=0
		for x in $WL_ONLY; do
			case " $names " in *"$x"*) want=1 ;; esac
		done
		[ $want = 1 ] || return 1
	fi
	for x in "$@"; do
		case $x in
		torch) [ $HAVE_TORCH = 1 ] || miss="$miss torch-with-cuda" ;;
		nvcc) [ $HAVE_NVCC = 1 ] || miss="$miss nvcc" ;;
		work/*) [ -x "$WORK/${x#work/}" ] || miss="$miss ${x#work/}(not built)" ;;
		*) [ -e "$DIST/$x" ] || miss="$miss DIST/$x" ;;
		esac
	done
	if [ -n "$miss" ]; then
		fail_all "$names" "not run: missing$miss"
		return 1
	fi
	if [ $(($(elapsed) + need)) -gt "$BUDGET" ]; then
		fail_all "$names" "not run: $(elapsed) s spent, ~$need s more would pass the ${BUDGET} s budget"
		return 1
	fi
	return 0
}

reg() { export GPUBPF_HOME="$REGS/reg-$1"; }

gload() { # OUTFILE gpubpf-load-args…: load into $GPUBPF_HOME, output appended to OUTFILE
	local out=$1
	shift
	echo "+ gpubpf load $*" >>"$out"
	timeout 60 "$G" load "$@" >>"$out" 2>&1
}

wait_for() { # FILE SECONDS PID: until FILE exists (0), PID ends or time runs out (1)
	local i
	for ((i = 0; i < $2 * 20; i++)); do
		[ -e "$1" ] && return 0
		kill -0 "$3" 2>/dev/null || return 1
		sleep 0.05
	done
	return 1
}

# ---- the machine ------------------------------------------------------------------------
echo "== gpubpf workloads (issue #13) $(date -u +%Y-%m-%dT%H:%M:%SZ), work dir $WORK"
for t in nvidia-smi nvcc gcc python3 timeout realpath; do
	command -v "$t" >/dev/null || echo "note: $t not found"
done
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
nvcc --version 2>/dev/null | tail -1
command -v nvcc >/dev/null && HAVE_NVCC=1
timeout 120 python3 - >"$WORK/versions.txt" 2>&1 <<'PY'
import sys
print("python", sys.version.split()[0])
import torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
try:
    import triton
    print("triton", triton.__version__)
except Exception as e:
    print("triton: import failed:", e)
PY
cat "$WORK/versions.txt"
grep -q "available True" "$WORK/versions.txt" && HAVE_TORCH=1
ls -l "$DIST" 2>&1 | tail -n +2
for f in gpubpf libgpubpf.so; do
	[ -e "$DIST/$f" ] || echo "note: DIST lacks $f: every check below fails"
done

# ---- builds -----------------------------------------------------------------------------
if [ $HAVE_NVCC = 1 ]; then
	timeout 180 nvcc -O2 -arch=sm_90 -o "$WORK/launch_bench" "$HERE/launch_bench.cu" \
		>"$WORK/build-launch_bench.txt" 2>&1 || cat "$WORK/build-launch_bench.txt"
	CUDA_ROOT=$(dirname "$(dirname "$(command -v nvcc)")")
	timeout 60 gcc -O2 -I"$CUDA_ROOT/include" -I"$CUDA_ROOT/targets/x86_64-linux/include" -o "$WORK/startup" "$HERE/startup.c" -lcuda \
		>"$WORK/build-startup.txt" 2>&1 ||
		timeout 60 gcc -O2 -I"$CUDA_ROOT/include" -I"$CUDA_ROOT/targets/x86_64-linux/include" -o "$WORK/startup" "$HERE/startup.c" \
			-L"$CUDA_ROOT/lib64/stubs" -L"$CUDA_ROOT/targets/x86_64-linux/lib/stubs" -lcuda \
			>>"$WORK/build-startup.txt" 2>&1 || cat "$WORK/build-startup.txt"
fi
echo "== built in $(elapsed) s"

# ---- 2. expandable segments: the cuMemCreate family under quota (1 GiB) -----------------
N_EXP="expandable-usage-tracks-reserved expandable-cumemcreate-policed expandable-frees-credited expandable-works-after-free"
if section "$N_EXP" 40 torch quota.o; then
	reg expandable
	out=$WORK/expandable.txt
	: >"$out"
	if gload "$out" "$DIST/quota.o" --name quota --set limit_bytes=1GiB; then
		PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True LD_PRELOAD="$SHIM" \
			timeout 120 python3 "$HERE/torch_expandable.py" $((1 << 30)) >>"$out" 2>&1
		rc=$?
		timeout 30 "$G" -j maps dump proc_usage >>"$out" 2>&1
		collect $rc "$out" "$N_EXP"
	else
		fail_all "$N_EXP" "gpubpf load quota.o failed" "$out"
	fi
fi

# ---- 2. meminfo: mem_get_info() under quota (2 GiB) + meminfo ---------------------------
N_MEM="meminfo-total-is-quota meminfo-free-is-quota-minus-usage"
if section "$N_MEM" 40 torch quota.o meminfo.o; then
	reg meminfo
	out=$WORK/meminfo.txt
	: >"$out"
	if gload "$out" "$DIST/quota.o" --name quota --set limit_bytes=2GiB &&
		gload "$out" "$DIST/meminfo.o" --name meminfo; then
		LD_PRELOAD="$SHIM" timeout 120 python3 "$HERE/torch_meminfo.py" $((2 << 30)) >>"$out" 2>&1
		collect $? "$out" "$N_MEM"
	else
		fail_all "$N_MEM" "gpubpf load quota.o/meminfo.o failed" "$out"
	fi
fi

# ---- 3. cuBLAS / cuBLASLt / Triton launches: policy count = torch.profiler's kernels -----
N_LAU="launches-cublas-fp32 launches-cublas-bf16 launches-cublas-bf16-bmm launches-cublaslt-fp32 launches-cublaslt-bf16-bias launches-mlp-train triton-launches-counted"
if section "$N_LAU" 100 torch count_launch.o trace.o; then
	reg launches
	out=$WORK/launches.txt
	: >"$out"
	if gload "$out" "$DIST/count_launch.o" --name launches --attach cuLaunchKernel,cuLaunchKernelEx &&
		gload "$out" "$DIST/trace.o" --name trace --set emit_events=0; then
		# Diagnostic only: makes `gpubpf ps` count the other launch APIs too.
		gload "$out" "$DIST/count_launch.o" --name other --attach cuLaunchCooperativeKernel,cuGraphLaunch
		TRITON_CACHE_DIR="$WORK/triton-cache" LD_PRELOAD="$SHIM" \
			timeout 240 python3 "$HERE/torch_launches.py" >>"$out" 2>&1
		collect $? "$out" "$N_LAU"
	else
		fail_all "$N_LAU" "gpubpf load count_launch.o/trace.o failed" "$out"
	fi
fi

# ---- 4. two processes of one user share user_limit_bytes=1GiB ---------------------------
N_USR="user-quota-shared user-quota-credited-across"
if section "$N_USR" 60 torch quota.o; then
	reg userquota
	out=$WORK/userquota-asker.txt
	hold=$WORK/userquota-holder.txt
	: >"$out"
	d=$WORK/userquota
	mkdir -p "$d"
	if gload "$out" "$DIST/quota.o" --name quota --set limit_bytes=0 --set user_limit_bytes=1GiB; then
		LD_PRELOAD="$SHIM" timeout 150 python3 "$HERE/torch_user_quota.py" holder "$d" >"$hold" 2>&1 &
		hp=$!
		LD_PRELOAD="$SHIM" timeout 150 python3 "$HERE/torch_user_quota.py" asker "$d" >>"$out" 2>&1
		rc=$?
		touch "$d/done"
		wait $hp
		echo "holder exit status $?" >>"$hold"
		timeout 30 "$G" -j maps dump user_usage >>"$out" 2>&1
		collect $rc "$out" "$N_USR" "$hold"
	else
		fail_all "$N_USR" "gpubpf load quota.o failed" "$out"
	fi
fi

# ---- 4. a DataLoader with two forked workers under `gpubpf run` (quota + trace) ----------
N_DL="dataloader-forked-workers"
if section "$N_DL" 60 torch quota.o trace.o; then
	reg dataloader
	out=$WORK/dataloader.txt
	timeout 150 "$G" run --policy "$DIST/quota.o" --policy "$DIST/trace.o" -- \
		python3 "$HERE/torch_dataloader.py" >"$out" 2>&1
	collect $? "$out" "$N_DL"
fi

# ---- 4. a policy loaded into a running training loop with --wait ------------------------
N_HOT="hotload-within-100ms hotload-ps-up-to-date"
if section "$N_HOT" 60 torch quota.o trace.o; then
	reg hotload
	out=$WORK/hotload.txt
	: >"$out"
	d=$WORK/hotload
	mkdir -p "$d"
	# The registry must exist before the process starts (the shim never creates one).
	if gload "$out" "$DIST/trace.o" --name trace --set emit_events=0; then
		LD_PRELOAD="$SHIM" timeout 150 python3 "$HERE/torch_hotload.py" "$d" >>"$out" 2>&1 &
		hp=$!
		if wait_for "$d/ready" 120 $hp; then
			sleep 0.3
			date +%s.%N >"$d/load_start"
			timeout 30 "$G" -j load "$DIST/quota.o" --name quota --set limit_bytes=128MiB --set log_denials=0 \
				--wait=5s >"$d/load.json" 2>>"$out"
			lrc=$?
			date +%s.%N >"$d/load_return"
			echo "+ gpubpf -j load quota.o --wait=5s: exit $lrc: $(cat "$d/load.json")" >>"$out"
			sleep 0.5
		else
			echo "the training process never wrote $d/ready" >>"$out"
		fi
		touch "$d/stop"
		wait $hp
		collect $? "$out" "$N_HOT"
	else
		fail_all "$N_HOT" "gpubpf load trace.o failed" "$out"
	fi
fi

# ---- 5. overhead: empty-kernel launches, interleaved ------------------------------------
N_LO="launch-overhead-measured launch-overhead-under-1pct launch-count-exact"
if section "$N_LO" 180 count_launch.o trace.o work/launch_bench; then
	out=$WORK/launch-setup.txt
	: >"$out"
	reg launch-nopol
	gload "$out" "$DIST/count_launch.o" --name scratch &&
		timeout 30 "$G" prog unload scratch >>"$out" 2>&1
	H_NOPOL=$GPUBPF_HOME
	reg launch-count
	gload "$out" "$DIST/count_launch.o" --name count_launch
	H_COUNT=$GPUBPF_HOME
	for r in $(seq "${WL_ROUNDS:-3}"); do
		timeout 60 "$WORK/launch_bench" >"$WORK/launch-A-$r.txt" 2>&1
		GPUBPF_HOME=$H_NOPOL LD_PRELOAD="$SHIM" timeout 60 "$WORK/launch_bench" >"$WORK/launch-B-$r.txt" 2>&1
		GPUBPF_HOME=$H_COUNT LD_PRELOAD="$SHIM" timeout 60 "$WORK/launch_bench" >"$WORK/launch-C-$r.txt" 2>&1
	done
	GPUBPF_HOME=$H_COUNT timeout 30 "$G" -j maps dump count_launch.launches >"$WORK/launch-count.json" 2>>"$out"
	# The goal's measurement: one process, batches through the driver's own cuLaunchKernel
	# and through the shim's alternating (launch_interleave.sh: without the shim, under it
	# with nothing attached, under it with count_launch.o; with trace.o too, its ring full and
	# drained by a reader, for the step's figure derived from its policed calls).
	INTERLEAVE_POLICIES="count_launch trace trace+reader" timeout 200 "$HERE/launch_interleave.sh" "$DIST" \
		"${WL_INTERLEAVE_REPS:-1}" 1000 2000 \
		>"$WORK/launch-interleave.txt" 2>&1
	cat "$WORK"/launch-[ABC]-*.txt "$WORK/launch-count.json" "$WORK/launch-interleave.txt" >>"$out"
	timeout 30 python3 "$HERE/summarize.py" launch "$WORK" >"$WORK/launch-summary.txt" 2>&1
	collect $? "$WORK/launch-summary.txt" "$N_LO" "$out"
fi

# ---- 5. overhead: a PyTorch training step, interleaved ----------------------------------
N_SO="torch-step-overhead-measured torch-step-overhead-under-1pct"
if section "$N_SO" 150 torch quota.o trace.o; then
	out=$WORK/step-setup.txt
	: >"$out"
	reg step-nopol
	gload "$out" "$DIST/trace.o" --name scratch && timeout 30 "$G" prog unload scratch >>"$out" 2>&1
	H_NOPOL=$GPUBPF_HOME
	reg step-policies
	gload "$out" "$DIST/quota.o" --name quota --set limit_bytes=8GiB
	gload "$out" "$DIST/trace.o" --name trace
	H_POL=$GPUBPF_HOME
	for r in $(seq "${WL_ROUNDS:-3}"); do
		timeout 90 python3 "$HERE/torch_step_bench.py" >"$WORK/step-A-$r.txt" 2>&1
		GPUBPF_HOME=$H_NOPOL LD_PRELOAD="$SHIM" timeout 90 python3 "$HERE/torch_step_bench.py" >"$WORK/step-B-$r.txt" 2>&1
		GPUBPF_HOME=$H_POL LD_PRELOAD="$SHIM" timeout 90 python3 "$HERE/torch_step_bench.py" >"$WORK/step-C-$r.txt" 2>&1
	done
	# The goal's measurement: one process, quota + trace loaded and unloaded between blocks.
	# 400 blocks of 30 steps: the machine's speed drifts over seconds, and with nothing
	# toggled blocks of 300 read +3.95 ± 2.4 % once, 160 blocks of 75 ±1.5–2 % on a noisy
	# day, 400 of 30 −0.53 % ± 0.39 that day (step_noise.sh, docs/gpu-runs.md 2026-12-07),
	# and −0.96 % ± 0.39 on a later call: alternated, the odd blocks ran faster with nothing
	# toggled, so the blocks now come in ABBA order (step_toggle.py's default).
	# Every timed step of a block runs with trace's ring still filling (a new ring per
	# load, which 50 steps never fill), so every launch writes its event: the cost a user
	# with a consumer pays.
	reg step-toggle
	gload "$out" "$DIST/trace.o" --name scratch && timeout 30 "$G" prog unload scratch >>"$out" 2>&1
	LD_PRELOAD="$SHIM" timeout 150 python3 "$HERE/step_toggle.py" "$DIST" "${WL_TOGGLE_BLOCKS:-400}" \
		"${WL_TOGGLE_STEPS:-30}" \
		>"$WORK/step-toggle.txt" 2>&1
	cat "$WORK"/step-[ABC]-*.txt "$WORK/step-toggle.txt" >>"$out"
	timeout 30 python3 "$HERE/summarize.py" step "$WORK" >"$WORK/step-summary.txt" 2>&1
	collect $? "$WORK/step-summary.txt" "$N_SO" "$out"
fi

# ---- 4. 200 processes started at once, with and without the shim (quota + trace) ---------
N_ST="startup-200-all-finish startup-200-not-serialised startup-200-policed"
if section "$N_ST" 90 quota.o trace.o work/startup; then
	out=$WORK/startup-setup.txt
	: >"$out"
	reg startup
	gload "$out" "$DIST/quota.o" --name quota --set limit_bytes=1GiB
	gload "$out" "$DIST/trace.o" --name trace
	gload "$out" "$DIST/count_launch.o" --name calls --attach cuDeviceTotalMem
	S="$HERE/spawn.py"
	NP=${WL_STARTUP_N:-200}
	# At once without a context (200 primary contexts do not fit on one GPU: creating them
	# fails with out-of-memory with or without the shim): cuInit and one policed call.
	timeout 120 python3 "$S" parallel "$NP" --deadline 90 -- "$WORK/startup" noctx >"$WORK/startup-base.txt" 2>&1
	timeout 120 python3 "$S" parallel "$NP" --deadline 90 --preload "$SHIM" -- "$WORK/startup" noctx >"$WORK/startup-shim.txt" 2>&1
	timeout 30 "$G" -j maps dump calls.launches >"$WORK/startup-calls.json" 2>>"$out"
	for r in 1 2; do
		timeout 45 python3 "$S" serial 10 --deadline 30 -- "$WORK/startup" >"$WORK/startup-serial-base-$r.txt" 2>&1
		timeout 45 python3 "$S" serial 10 --deadline 30 --preload "$SHIM" -- "$WORK/startup" >"$WORK/startup-serial-shim-$r.txt" 2>&1
	done
	# One at a time without a context, alternating: what the shim's initialisation adds to a
	# process (the first driver call initialises it: registry, process table, re-verifying
	# every program) without the context's ~350 ms of noise.
	for r in 1 2 3 4; do
		timeout 45 python3 "$S" serial 10 --deadline 30 -- "$WORK/startup" noctx >"$WORK/startup-noctx-base-$r.txt" 2>&1
		timeout 45 python3 "$S" serial 10 --deadline 30 --preload "$SHIM" -- "$WORK/startup" noctx >"$WORK/startup-noctx-shim-$r.txt" 2>&1
	done
	timeout 30 "$G" -j maps dump proc_usage >"$WORK/startup-proc_usage.json" 2>>"$out"
	cat "$WORK"/startup-base.txt "$WORK"/startup-shim.txt "$WORK"/startup-serial-*.txt "$WORK"/startup-noctx-*.txt >>"$out"
	timeout 30 python3 "$HERE/summarize.py" startup "$WORK" >"$WORK/startup-summary.txt" 2>&1
	collect $? "$WORK/startup-summary.txt" "$N_ST" "$out"
fi

# ---- summary and raw outputs -------------------------------------------------------------
echo "== $pass passed, $fail failed, $skip skipped in $(elapsed) s"
for l in ${FIGS[@]+"${FIGS[@]}"}; do echo "$l"; done
declare -A shown=()
for f in ${FAILED[@]+"${FAILED[@]}"}; do
	[ -n "${shown[$f]:-}" ] && continue
	shown[$f]=1
	echo "--- $f"
	tail -c 6000 "$f" 2>/dev/null
	echo
done
[ -n "${OUT:-}" ] && cp -r "$WORK"/*.txt "$WORK"/*.json "$OUT/" 2>/dev/null
exit $((fail != 0))
