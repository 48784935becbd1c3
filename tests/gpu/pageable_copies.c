// Plain CUDA driver API pageable copies in C: the reference for gpudash's pageable rows.
// Built and run by tests/gpu/pageable_copies.py on the GPU machine:
//   gcc -O2 -I/usr/local/cuda/include tests/gpu/pageable_copies.c -o /tmp/pageable_copies -l:libcuda.so.1
//   /tmp/pageable_copies DEVICE WARMUP REPETITIONS SIZE...
// What gpudash's lab does (server/src/lab/cuda/transfer.rs) and PyTorch's copy_ runs underneath:
// cuMemcpyHtoDAsync / cuMemcpyDtoHAsync between a page-aligned malloc'd buffer (written once) and
// device memory, one copy between two events on a non-blocking stream, no hold (the driver stages a
// pageable copy through the host inside the call: that staging is the figure). No interpreter sits
// between the events, which PyTorch's Python dispatch (15–25 µs per call) does: at 1 MiB that alone
// moved PyTorch's figure by 10–20%. Prints "h2d_pageable<TAB>bytes<TAB>median GB/s" and the d2h lines.
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check(CUresult rc, const char *what) {
    if (rc != CUDA_SUCCESS) {
        const char *text = "";
        cuGetErrorString(rc, &text);
        fprintf(stderr, "%s failed: %d %s\n", what, (int)rc, text);
        exit(1);
    }
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, n, sizeof *v, by_value);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: pageable_copies DEVICE WARMUP REPETITIONS SIZE...\n"); return 2; }
    int device = atoi(argv[1]), warmup = atoi(argv[2]), reps = atoi(argv[3]);
    if (reps < 1 || warmup < 0) { fprintf(stderr, "REPETITIONS must be at least 1\n"); return 2; }
    size_t top = 0;
    for (int i = 4; i < argc; i++) { size_t n = strtoull(argv[i], NULL, 10); if (n > top) top = n; }
    CUdevice dev;
    CUcontext ctx;
    CUstream stream;
    CUevent start, end;
    CUdeviceptr dptr;
    check(cuInit(0), "cuInit");
    check(cuDeviceGet(&dev, device), "cuDeviceGet");
    check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    check(cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate");
    check(cuEventCreate(&end, CU_EVENT_DEFAULT), "cuEventCreate");
    check(cuMemAlloc(&dptr, top), "cuMemAlloc");
    unsigned char *host;
    if (posix_memalign((void **)&host, 4096, top) != 0) { fprintf(stderr, "posix_memalign failed\n"); return 1; }
    memset(host, 1, top);
    check(cuMemsetD8(dptr, 3, top), "cuMemsetD8");
    double *rates = malloc(reps * sizeof(double));
    const char *names[2] = {"h2d_pageable", "d2h_pageable"};
    for (int dir = 0; dir < 2; dir++) {
        for (int i = 4; i < argc; i++) {
            size_t n = strtoull(argv[i], NULL, 10);
            for (int r = -warmup; r < reps; r++) {
                float ms;
                check(cuEventRecord(start, stream), "cuEventRecord");
                if (dir == 0) check(cuMemcpyHtoDAsync(dptr, host, n, stream), "cuMemcpyHtoDAsync");
                else check(cuMemcpyDtoHAsync(host, dptr, n, stream), "cuMemcpyDtoHAsync");
                check(cuEventRecord(end, stream), "cuEventRecord");
                check(cuEventSynchronize(end), "cuEventSynchronize");
                check(cuEventElapsedTime(&ms, start, end), "cuEventElapsedTime");
                if (r >= 0) rates[r] = n / (ms * 1e-3) / 1e9;
            }
            printf("%s\t%zu\t%.4f\n", names[dir], n, median(rates, reps));
        }
    }
    // The bytes arrived: the device's copy of the host's 1s came back (d2h ran last, over the same bytes).
    for (size_t k = 0; k < top; k += 4099) {
        if (host[k] != 1) { fprintf(stderr, "byte %zu is %d after the round trip, expected 1\n", k, host[k]); return 1; }
    }
    check(cuMemFree(dptr), "cuMemFree");
    check(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");
    return 0;
}
