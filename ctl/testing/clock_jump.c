/* An LD_PRELOAD library that steps the wall clock of a process tree, as an
 * NTP correction or a VM migration does: CLOCK_REALTIME (and time(),
 * gettimeofday()) are shifted by the whole seconds written in the file named
 * by CLOCK_JUMP_FILE; CLOCK_MONOTONIC is left alone, as the kernel does.
 * The file is read again at most every 50 ms, so a test can move the clock
 * while the processes run. (Debian's libfaketime cannot leave the monotonic
 * clock alone here: with FAKETIME_DONT_FAKE_MONOTONIC=1, Python's
 * time.sleep fails with EINVAL.) Built by ctl.testing.clock. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static int (*real_clock_gettime)(clockid_t, struct timespec *);
static long offset_secs;
static struct timespec next_read;

static long offset(void) {
  struct timespec now;
  const char *path = getenv("CLOCK_JUMP_FILE");
  if (!path) return 0;
  real_clock_gettime(CLOCK_MONOTONIC, &now);
  if (now.tv_sec > next_read.tv_sec ||
      (now.tv_sec == next_read.tv_sec && now.tv_nsec >= next_read.tv_nsec)) {
    FILE *f = fopen(path, "r");
    long secs = 0;
    if (f) {
      if (fscanf(f, "%ld", &secs) == 1) offset_secs = secs;
      fclose(f);
    }
    next_read = now;
    next_read.tv_nsec += 50000000L;
    if (next_read.tv_nsec >= 1000000000L) {
      next_read.tv_sec += 1;
      next_read.tv_nsec -= 1000000000L;
    }
  }
  return offset_secs;
}

int clock_gettime(clockid_t clock, struct timespec *ts) {
  if (!real_clock_gettime) real_clock_gettime = dlsym(RTLD_NEXT, "clock_gettime");
  int result = real_clock_gettime(clock, ts);
  if (result == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE))
    ts->tv_sec += offset();
  return result;
}

int gettimeofday(struct timeval *tv, void *tz) {
  struct timespec ts;
  (void)tz;
  if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
  if (tv) {
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
  }
  return 0;
}

time_t time(time_t *t) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (t) *t = ts.tv_sec;
  return ts.tv_sec;
}
