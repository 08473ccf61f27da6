/* Globals of mixed sizes in .rodata, .data and .bss, for `gpubpf maps dump/lookup/update`
 * (tests/cli_maps_globals.rs), and a hash map
 * of structs for updates by field name. clang leaves the DATASEC variable offsets in BTF at 0; the
 * symbol table has the real ones, so a u64 followed by a bool, a u32 and a struct catches a
 * typed description that reads them from BTF. */
#include "gpubpf.h"

struct pair {
	__u32 lo;
	__u16 hi;
};

const volatile __u64 r_big = 0x1122334455667788ULL;
const volatile bool r_flag = true;
const volatile __u32 r_mid = 33;
const volatile struct pair r_pair = { .lo = 44, .hi = 45 };

struct usage {
	__u64 bytes;
	__u32 allocs;
	__u32 denied;
	char comm[8];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct usage);
} usage SEC(".maps");

__u64 d_big = 1000;
__u8 d_small = 11;
__u32 d_mid = 12;
struct pair d_pair = { .lo = 13, .hi = 14 };

__u64 b_big;
bool b_flag;
__u32 b_mid;
struct pair b_pair;

GPUBPF_ENTRY(cuMemAlloc, use_globals)
{
	__u64 sum = r_big + r_flag + r_mid + r_pair.lo + r_pair.hi;

	sum += d_big + d_small + d_mid + d_pair.lo + d_pair.hi;
	sum += b_big + b_flag + b_mid + b_pair.lo + b_pair.hi;
	__sync_fetch_and_add(&b_big, sum);
	__u32 pid = ctx->hdr.pid;
	struct usage *u = bpf_map_lookup_elem(&usage, &pid);
	if (u)
		__sync_fetch_and_add(&u->allocs, 1);
	return 0;
}

char LICENSE[] SEC("license") = "MIT";
