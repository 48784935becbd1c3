// What the plain-C references of tests/gpu/ share (cuda_latency.c, memory_pool.c, pageable_copies.c,
// pool_modes.c): stop on a driver error with its text, a monotonic clock in µs, and a median.
// Included as "cuda_ref.h" from the source's own folder; every helper is static inline, so a program
// that uses only some of them builds without -Wall warnings.
#ifndef GPUDASH_CUDA_REF_H
#define GPUDASH_CUDA_REF_H

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline void check(CUresult rc, const char *what) {
    if (rc != CUDA_SUCCESS) {
        const char *text = "";
        cuGetErrorString(rc, &text);
        fprintf(stderr, "%s failed: %d %s\n", what, (int)rc, text);
        exit(1);
    }
}

static inline double now_us(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static inline int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

// Sorts v in place.
static inline double median(double *v, int n) {
    qsort(v, n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

#endif
