/*
 * procaddr: what does the real driver return for each cuGetProcAddress request?
 *
 * Reads "<base name> <cuda version> <flags> <expected symbol>" lines (one per variant of the
 * catalog, see README.md) and prints
 * "<name>\t<version>\t<flags>\t<expected>\t<CUresult>\t<query result>\t<resolved symbol>",
 * where the resolved symbol is the exported name dladdr() finds for the returned pointer.
 * Build: gcc -I$CUDA/include procaddr.c -L$CUDA/lib64/stubs -lcuda -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

#include <cuda.h>

int main(void)
{
	char name[128], expected[128];
	int version, flags;

	cuInit(0);
	while (scanf("%127s %d %d %127s", name, &version, &flags, expected) == 4) {
		void *p = NULL;
		CUdriverProcAddressQueryResult q;
		CUresult r = cuGetProcAddress(name, &p, version, (cuuint64_t)flags, &q);
		Dl_info info;
		const char *sym = (p && dladdr(p, &info) && info.dli_sname) ? info.dli_sname : "NULL";
		printf("%s\t%d\t%d\t%s\t%d\t%d\t%s\n", name, version, flags, expected, (int)r, (int)q,
		       sym);
	}
	return 0;
}
