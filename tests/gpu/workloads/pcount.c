// Counts user-space hardware events of a command and every thread it starts (for machines
// without `perf`; perf_event_paranoid <= 2 suffices): `pcount OUT CMD ARGS…` runs CMD and
// writes `event value` lines to OUT. Events the CPU (or hypervisor) does not offer read
// `n/a`. Used by launch_perf.sh.
#define _GNU_SOURCE
#include <linux/perf_event.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define CACHE(c, op, r) (PERF_COUNT_HW_CACHE_##c | (PERF_COUNT_HW_CACHE_OP_##op << 8) | \
			 (PERF_COUNT_HW_CACHE_RESULT_##r << 16))

static const struct {
	const char *name;
	uint32_t type;
	uint64_t config;
} EVENTS[] = {
	{"task-clock-ns", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_TASK_CLOCK},
	{"page-faults", PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS},
	{"cycles", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES},
	{"instructions", PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS},
	{"cache-references", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_REFERENCES},
	{"cache-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_CACHE_MISSES},
	{"branch-misses", PERF_TYPE_HARDWARE, PERF_COUNT_HW_BRANCH_MISSES},
	{"L1-dcache-load-misses", PERF_TYPE_HW_CACHE, CACHE(L1D, READ, MISS)},
	{"L1-icache-load-misses", PERF_TYPE_HW_CACHE, CACHE(L1I, READ, MISS)},
	{"dTLB-load-misses", PERF_TYPE_HW_CACHE, CACHE(DTLB, READ, MISS)},
	{"iTLB-load-misses", PERF_TYPE_HW_CACHE, CACHE(ITLB, READ, MISS)},
};
#define N_EVENTS (sizeof(EVENTS) / sizeof(EVENTS[0]))

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: pcount OUT CMD [ARGS...]\n");
		return 2;
	}
	int go[2];
	if (pipe(go) != 0) {
		perror("pipe");
		return 1;
	}
	pid_t child = fork();
	if (child < 0) {
		perror("fork");
		return 1;
	}
	if (child == 0) {
		char c;
		close(go[1]);
		if (read(go[0], &c, 1) != 1)
			_exit(127);
		execvp(argv[2], argv + 2);
		perror("execvp");
		_exit(127);
	}
	close(go[0]);
	int fds[N_EVENTS];
	for (size_t i = 0; i < N_EVENTS; i++) {
		struct perf_event_attr a;
		memset(&a, 0, sizeof(a));
		a.size = sizeof(a);
		a.type = EVENTS[i].type;
		a.config = EVENTS[i].config;
		a.disabled = 1;
		a.enable_on_exec = 1;
		a.inherit = 1;
		a.exclude_kernel = 1;
		a.exclude_hv = 1;
		fds[i] = (int)syscall(SYS_perf_event_open, &a, child, -1, -1, 0);
	}
	if (write(go[1], "x", 1) != 1)
		perror("write");
	close(go[1]);
	int status = 0;
	waitpid(child, &status, 0);
	FILE *out = fopen(argv[1], "w");
	if (!out) {
		perror(argv[1]);
		return 1;
	}
	for (size_t i = 0; i < N_EVENTS; i++) {
		uint64_t v = 0;
		if (fds[i] >= 0 && read(fds[i], &v, sizeof(v)) == sizeof(v))
			fprintf(out, "%s %llu\n", EVENTS[i].name, (unsigned long long)v);
		else
			fprintf(out, "%s n/a\n", EVENTS[i].name);
	}
	fclose(out);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
