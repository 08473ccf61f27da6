/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * A mock CUDA runtime library (`libmockrt.so`) for the shim's end-to-end tests: it reaches
 * the driver as CUDA 13's libcudart does (INTERCEPTION.md §2-3) — from its own shared
 * object, not the application: `dlopen("libcuda.so.1")`, `dlsym(handle,
 * "cuGetProcAddress_v2")`, a first empty request (NULL), the self-lookup of
 * "cuGetProcAddress", then every entry point by base name, version and flags through the
 * answer of the self-lookup.
 *
 *   void *mockrt_proc(const char *base, int version, unsigned long long flags)
 *
 * returns the function the driver (or, preloaded, the shim) handed out, NULL on failure.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

typedef int CUresult;
typedef CUresult gpa_v2_ft(const char *, void **, int, uint64_t, int *);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static gpa_v2_ft *self;

static void init(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW);
	if (!h)
		return;
	gpa_v2_ft *gpa = (gpa_v2_ft *)dlsym(h, "cuGetProcAddress_v2");
	if (!gpa)
		return;
	void *p = NULL;
	int st = -1;
	/* cudart's first request: empty name, version 0 -> NULL. */
	if (gpa("", &p, 0, 0, &st) == 0 || p)
		return;
	/* Self-lookup: everything after goes through the answer. */
	if (gpa("cuGetProcAddress", &p, 12000, 0, &st) != 0 || !p)
		return;
	self = (gpa_v2_ft *)p;
}

void *mockrt_proc(const char *base, int version, unsigned long long flags)
{
	pthread_once(&once, init);
	if (!self)
		return NULL;
	void *p = NULL;
	int st = -1;
	if (self(base, &p, version, flags, &st) != 0)
		return NULL;
	return p;
}
