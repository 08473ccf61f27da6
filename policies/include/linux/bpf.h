/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * libbpf compatibility: programs written for libbpf start with
 *     #include <linux/bpf.h>
 *     #include <bpf/bpf_helpers.h>
 * With `-I <sdk>/include` those resolve here, to the gpubpf SDK, so such a program compiles
 * unchanged (only its SEC() names must become cuda/<api> or cudaret/<api>).
 */
#ifndef __GPUBPF_COMPAT_LINUX_BPF_H__
#define __GPUBPF_COMPAT_LINUX_BPF_H__
#include "../gpubpf.h"
#endif
