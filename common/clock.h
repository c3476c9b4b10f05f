/*
 * common/clock.h — the one monotonic clock: CLOCK_MONOTONIC in nanoseconds (event timestamps,
 * deadlines, latencies) and in seconds (CLI timings).
 *
 * Threading: safe from any thread.
 */
#ifndef PGD_COMMON_CLOCK_H
#define PGD_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t pgd_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline double pgd_now_s(void) {
    return (double)pgd_now_ns() * 1e-9;
}

#endif
