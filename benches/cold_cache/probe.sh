# Sourced by run.sh and time.sh (from the repository root): build_probe W G SRC builds,
# in W, the mock driver, the probe application linked with W/pollute.o (which the caller
# has built) and the policy object (SRC, a C source built with the `gpubpf` binary G, or
# an object copied as it is), and points the shim at them (GPUBPF_HOME, GPUBPF_CUDA_LIBRARY).
# build_mock W builds the mock driver alone, as W/libcuda.so.1 (also used, with build_loop,
# by benches/instructions/run.sh and time_alloc.sh and benches/pgo/build.sh).
build_mock() {
	cc -O2 -shared -fPIC -Wl,-Bsymbolic -Wl,-soname,libcuda.so.1 -o "$1/libcuda.so.1" tests/shim/mock_cuda.c
}
# build_loop W builds benches/instructions/loop.c as W/loop against W's mock (build_mock
# first). DT_RPATH (--disable-new-dtags): the loader reads it before LD_LIBRARY_PATH, which
# on a GPU machine names the real driver.
build_loop() {
	cc -O2 -o "$1/loop" benches/instructions/loop.c -L"$1" -l:libcuda.so.1 -Wl,--disable-new-dtags,-rpath,"$1"
}
build_probe() {
	local w=$1 g=$2 src=$3
	build_mock "$w"
	cc -O2 -o "$w/app" benches/cold_cache/app.c "$w/pollute.o" -L"$w" -l:libcuda.so.1 -Wl,--disable-new-dtags,-rpath,"$w"
	case $src in
	*.c) "$g" build "$src" -o "$w/policy.o" >/dev/null ;;
	*) cp "$src" "$w/policy.o" ;;
	esac
	export GPUBPF_HOME=$w/reg GPUBPF_CUDA_LIBRARY=$w/libcuda.so.1
}
