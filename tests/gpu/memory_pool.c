// Plain CUDA driver API stream-ordered pool in C: the reference for gpudash's memory experiment.
// Built and run by tests/gpu/cuda_latency.py (`memory_pool`) on the GPU machine:
//   /tmp/memory_pool DEVICE BLOCK_BYTES BLOCKS FREE_EVERY REPETITIONS
// The steps of lab/src/cuda/memory.rs on the device's default pool (release threshold at the
// maximum, so freed blocks stay reserved): trim to 0; allocate BLOCKS blocks (cuMemAllocAsync and a
// stream synchronize), reading the pool's used and reserved bytes after each; free every FREE_EVERY-th
// block; then REPETITIONS times: trim, time a fresh allocation, free it, time an allocation the pool
// serves from its cache, free it (host clock around cuMemAllocAsync + cuStreamSynchronize, as gpudash).
// Prints "step<TAB>label<TAB>used<TAB>reserved" lines, then "pooled_us<TAB>median" and "fresh_us<TAB>median".
#include "cuda_ref.h"

#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static CUmemoryPool pool;
static CUstream stream;

static void reading(const char *label) {
    cuuint64_t used = 0, reserved = 0;
    check(cuStreamSynchronize(stream), "cuStreamSynchronize");
    check(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used), "cuMemPoolGetAttribute");
    check(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved), "cuMemPoolGetAttribute");
    printf("step\t%s\t%llu\t%llu\n", label, (unsigned long long)used, (unsigned long long)reserved);
}

static CUdeviceptr alloc(size_t bytes) {
    CUdeviceptr p;
    check(cuMemAllocAsync(&p, bytes, stream), "cuMemAllocAsync");
    check(cuStreamSynchronize(stream), "cuStreamSynchronize");
    return p;
}

static void release(CUdeviceptr p) {
    check(cuMemFreeAsync(p, stream), "cuMemFreeAsync");
    check(cuStreamSynchronize(stream), "cuStreamSynchronize");
}

int main(int argc, char **argv) {
    if (argc != 6) { fprintf(stderr, "usage: memory_pool DEVICE BLOCK_BYTES BLOCKS FREE_EVERY REPETITIONS\n"); return 2; }
    int device = atoi(argv[1]), blocks = atoi(argv[3]), every = atoi(argv[4]), reps = atoi(argv[5]);
    size_t block = strtoull(argv[2], NULL, 10);
    if (blocks < 1 || blocks > 64 || every < 1 || reps < 1) { fprintf(stderr, "out of range\n"); return 2; }
    CUdevice dev;
    CUcontext ctx;
    check(cuInit(0), "cuInit");
    check(cuDeviceGet(&dev, device), "cuDeviceGet");
    check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    check(cuDeviceGetDefaultMemPool(&pool, dev), "cuDeviceGetDefaultMemPool");
    cuuint64_t threshold = UINT64_MAX;
    check(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold), "cuMemPoolSetAttribute");
    check(cuMemPoolTrimTo(pool, 0), "cuMemPoolTrimTo");
    reading("start");
    CUdeviceptr held[64];
    int live[64];
    char label[64];
    for (int i = 0; i < blocks; i++) {
        held[i] = alloc(block);
        live[i] = 1;
        snprintf(label, sizeof label, "alloc block %d", i + 1);
        reading(label);
    }
    int freed = 0;
    for (int i = 0; i < blocks; i++) {
        if (i % every == every - 1) { release(held[i]); live[i] = 0; freed++; }
    }
    snprintf(label, sizeof label, "free %d blocks", freed);
    reading(label);
    double *pooled = malloc(reps * sizeof(double)), *fresh = malloc(reps * sizeof(double));
    for (int r = 0; r < reps; r++) {
        check(cuStreamSynchronize(stream), "cuStreamSynchronize");
        check(cuMemPoolTrimTo(pool, 0), "cuMemPoolTrimTo");
        double t = now_us();
        CUdeviceptr p = alloc(block);
        fresh[r] = now_us() - t;
        release(p);
        t = now_us();
        p = alloc(block);
        pooled[r] = now_us() - t;
        release(p);
    }
    for (int i = 0; i < blocks; i++) if (live[i]) release(held[i]);
    reading("free all");
    check(cuMemPoolTrimTo(pool, 0), "cuMemPoolTrimTo");
    reading("empty_cache");
    printf("pooled_us\t%.4f\n", median(pooled, reps));
    printf("fresh_us\t%.4f\n", median(fresh, reps));
    check(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");
    return 0;
}
