/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * RTLD_NEXT through the shim's `dlsym`: glibc resolves `dlsym(RTLD_NEXT, …)` relative to the
 * caller's return address, so the shim must forward with a tail jump. Built three ways:
 *   -DLIB_A  liba.so: `whoami` = "A" and `next_whoami`, which calls dlsym(RTLD_NEXT, "whoami")
 *   -DLIB_B  libb.so: `whoami` = "B"
 *   (none)   the program, linked against liba.so then libb.so: prints next_whoami()
 * The right answer is "B" (the definition after liba.so); a shim that forwarded with an
 * ordinary call would make glibc search after the shim and answer "A".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

#if defined(LIB_A)
const char *whoami(void)
{
	return "A";
}

const char *next_whoami(void)
{
	const char *(*f)(void) = (const char *(*)(void))dlsym(RTLD_NEXT, "whoami");
	return f ? f() : "none";
}
#elif defined(LIB_B)
const char *whoami(void)
{
	return "B";
}
#else
const char *next_whoami(void);

int main(void)
{
	printf("%s\n", next_whoami());
	return 0;
}
#endif
