// Diagnostic (session 14): where the pool-served allocation's two modes (~0.9 µs and ~2 µs) come from.
// gcc -O2 -I/usr/local/cuda/include pool_modes.c -o /tmp/pool_modes -l:libcuda.so.1 && /tmp/pool_modes 0
#include "cuda_ref.h"

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double q(double *v, int n, double p) {
    double *c = malloc(n * sizeof *c);
    for (int i = 0; i < n; i++) c[i] = v[i];
    qsort(c, n, sizeof *c, by_value);
    double r = c[(int)(p * (n - 1))];
    free(c);
    return r;
}
static CUmemoryPool pool;
static CUstream stream;
#define N 2000
#define CHUNK 100
static void summary(const char *name, double *v, int n) {
    printf("%-44s p10 %.3f p25 %.3f p50 %.3f p75 %.3f p90 %.3f | chunk medians:", name, q(v, n, .1),
           q(v, n, .25), q(v, n, .5), q(v, n, .75), q(v, n, .9));
    int slow = 0;
    for (int i = 0; i < n; i++) slow += v[i] > 1.4;
    for (int c = 0; c + CHUNK <= n; c += CHUNK) printf(" %.2f", q(v + c, CHUNK, .5));
    printf("  (slow share %.1f%%)\n", 100.0 * slow / n);
}
static CUdeviceptr alloc_sync(size_t b, double *alloc_us, double *sync_us) {
    CUdeviceptr p;
    double t0 = now_us();
    check(cuMemAllocAsync(&p, b, stream), "alloc");
    double t1 = now_us();
    check(cuStreamSynchronize(stream), "sync");
    double t2 = now_us();
    if (alloc_us) *alloc_us = t1 - t0;
    if (sync_us) *sync_us = t2 - t1;
    return p;
}
static void release(CUdeviceptr p) {
    check(cuMemFreeAsync(p, stream), "free");
    check(cuStreamSynchronize(stream), "sync");
}
int main(int argc, char **argv) {
    int device = argc > 1 ? atoi(argv[1]) : 0;
    size_t block = 256ull << 20;
    CUdevice dev;
    CUcontext ctx;
    check(cuInit(0), "init");
    check(cuDeviceGet(&dev, device), "dev");
    check(cuDevicePrimaryCtxRetain(&ctx, dev), "ctx");
    check(cuCtxSetCurrent(ctx), "set");
    check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "stream");
    check(cuDeviceGetDefaultMemPool(&pool, dev), "pool");
    cuuint64_t threshold = ~0ull;
    check(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), "thr");
    static double total[N], a[N], s[N], fresh[N];
    for (int pass = 0; pass < 2; pass++) {
        // A: the lab's pattern: trim, fresh alloc, free, pooled alloc (timed), free.
        for (int r = 0; r < N; r++) {
            check(cuMemPoolTrimTo(pool, 0), "trim");
            double t = now_us();
            CUdeviceptr p = alloc_sync(block, NULL, NULL);
            fresh[r] = now_us() - t;
            release(p);
            t = now_us();
            p = alloc_sync(block, &a[r], &s[r]);
            total[r] = now_us() - t;
            release(p);
        }
        printf("pass %d\n", pass);
        summary("A trim/fresh/free then pooled: alloc+sync", total, N);
        summary("A   of which cuMemAllocAsync", a, N);
        summary("A   of which cuStreamSynchronize", s, N);
        summary("A   fresh alloc+sync", fresh, N);
        // B: pooled only, no trim or fresh allocation between.
        CUdeviceptr w = alloc_sync(block, NULL, NULL);
        release(w);
        for (int r = 0; r < N; r++) {
            double t = now_us();
            CUdeviceptr p = alloc_sync(block, &a[r], &s[r]);
            total[r] = now_us() - t;
            release(p);
        }
        summary("B pooled only: alloc+sync", total, N);
        summary("B   of which cuMemAllocAsync", a, N);
        summary("B   of which cuStreamSynchronize", s, N);
        // C: as A, with a 5 ms idle pause before every 10th repetition (an idle GPU between bursts).
        for (int r = 0; r < N / 4; r++) {
            if (r % 10 == 0) usleep(5000);
            check(cuMemPoolTrimTo(pool, 0), "trim");
            CUdeviceptr p = alloc_sync(block, NULL, NULL);
            release(p);
            double t = now_us();
            p = alloc_sync(block, &a[r], &s[r]);
            total[r] = now_us() - t;
            release(p);
        }
        summary("C as A, 5 ms idle every 10th: alloc+sync", total, N / 4);
        // D: as A but the sync before the timed alloc is a cuCtxSynchronize (the whole GPU idle).
        for (int r = 0; r < N; r++) {
            check(cuMemPoolTrimTo(pool, 0), "trim");
            CUdeviceptr p = alloc_sync(block, NULL, NULL);
            check(cuMemFreeAsync(p, stream), "free");
            check(cuCtxSynchronize(), "ctxsync");
            double t = now_us();
            p = alloc_sync(block, &a[r], &s[r]);
            total[r] = now_us() - t;
            release(p);
        }
        summary("D as A, ctx sync before: alloc+sync", total, N);
        summary("D   of which cuStreamSynchronize", s, N);
    }
    return 0;
}
