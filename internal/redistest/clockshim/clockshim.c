/*
 * clockshim: an LD_PRELOAD library that sets a redis-server's wall clock
 * (internal/redistest.Clock). gettimeofday, time and clock_gettime of
 * CLOCK_REALTIME read the instant (int64 Unix microseconds, host order)
 * held in the first 8 bytes of the file FREQCAP_CLOCK_FILE names, mapped
 * shared: the test writes it, every server of the clock reads it. While it
 * holds 0 (or without the file) they read the real clock. Other clocks
 * (CLOCK_MONOTONIC: the event loop's timers) stay real: read through
 * libc's own functions once the constructor has looked them up, by system
 * call before. jemalloc, which Debian's redis-server uses, reads the clock
 * while the lookup is under way (what keeps libfaketime from working with
 * it): it gets the system call.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int64_t *fake;
static int state;
static int (*real_clock_gettime)(clockid_t, struct timespec *);

__attribute__((constructor)) static void init(void) {
	void *f = dlsym(RTLD_NEXT, "clock_gettime");
	__atomic_store_n(&real_clock_gettime, f, __ATOMIC_RELEASE);
}

static int real_time(clockid_t id, struct timespec *ts) {
	int (*f)(clockid_t, struct timespec *) = __atomic_load_n(&real_clock_gettime, __ATOMIC_ACQUIRE);
	return f ? f(id, ts) : syscall(SYS_clock_gettime, id, ts);
}

static int64_t fake_us(void) {
	int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
	if (s == 0) {
		const char *p = getenv("FREQCAP_CLOCK_FILE");
		int fd = p ? open(p, O_RDONLY) : -1;
		void *m = fd >= 0 ? mmap(NULL, 8, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
		if (fd >= 0) close(fd);
		if (m != MAP_FAILED) fake = m;
		s = m != MAP_FAILED ? 1 : 2;
		__atomic_store_n(&state, s, __ATOMIC_RELEASE);
	}
	return s == 1 ? __atomic_load_n(fake, __ATOMIC_ACQUIRE) : 0;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	if (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE) {
		int64_t us = fake_us();
		if (us > 0) {
			ts->tv_sec = us / 1000000;
			ts->tv_nsec = (us % 1000000) * 1000;
			return 0;
		}
	}
	return real_time(id, ts);
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
	int64_t us = fake_us();
	if (us > 0) {
		tv->tv_sec = us / 1000000;
		tv->tv_usec = us % 1000000;
		return 0;
	}
	struct timespec ts;
	if (tz != NULL || real_time(CLOCK_REALTIME, &ts) != 0)
		return syscall(SYS_gettimeofday, tv, tz);
	tv->tv_sec = ts.tv_sec;
	tv->tv_usec = ts.tv_nsec / 1000;
	return 0;
}

time_t time(time_t *t) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (t) *t = ts.tv_sec;
	return ts.tv_sec;
}
