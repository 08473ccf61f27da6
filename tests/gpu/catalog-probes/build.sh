#!/bin/sh
# Builds the alias probe against pip wheels (no CUDA toolkit needed): nvidia-cuda-runtime,
# nvidia-cuda-crt and nvidia-cuda-cupti of the CUDA version to probe (the driver must support
# it). Output: .probe/probe_static (static cudart, like nvcc's default), .probe/probe_shared,
# and the two shared libraries they load.
set -eu
version=${1:-13.0.*}
work=$(mktemp -d)
python3 -m pip download --no-deps -d "$work" "nvidia-cuda-runtime==$version" \
	"nvidia-cuda-crt==$version" "nvidia-cuda-cupti==$version"
for w in "$work"/*.whl; do (cd "$work" && python3 -m zipfile -e "$w" x); done
x="$work/x/nvidia/cu13"
mkdir -p .probe
src=tests/gpu/catalog-probes/alias_probe.c
gcc -O1 -Wall -I"$x/include" "$src" -o .probe/probe_static "$x/lib/libcudart_static.a" \
	-L"$x/lib" -l:libcupti.so.13 -ldl -lpthread -lrt -Wl,-rpath,'$ORIGIN'
gcc -O1 -Wall -I"$x/include" "$src" -o .probe/probe_shared -L"$x/lib" -l:libcudart.so.13 \
	-l:libcupti.so.13 -Wl,-rpath,'$ORIGIN'
cp "$x/lib/libcupti.so.13" "$x/lib/libcudart.so.13" .probe/
rm -rf "$work"
