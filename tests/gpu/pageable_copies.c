// Plain CUDA driver API pageable copies in C: the reference for gpudash's pageable rows.
// Built and run by tests/gpu/pageable_copies.py on the GPU machine:
//   gcc -O2 -I/usr/local/cuda/include tests/gpu/pageable_copies.c -o /tmp/pageable_copies -l:libcuda.so.1
//   /tmp/pageable_copies DEVICE WARMUP REPETITIONS SIZE...
// What gpudash's lab does (lab/src/cuda/transfer.rs) and PyTorch's copy_ runs underneath:
// cuMemcpyHtoDAsync / cuMemcpyDtoHAsync between a page-aligned malloc'd buffer (written once) and
// device memory, one copy between two events on a non-blocking stream, no hold (the driver stages a
// pageable copy through the host inside the call: that staging is the figure). The host-side work between
// the copies is gpudash's too, so both sides leave the CPU caches and pages in the same state: before a
// size's warm-ups the source gets that size's bytes and the destination a poison (the CPU writes the host
// end, cuMemsetD8 the device end), the destination is poisoned again between the warm-ups and the timed
// copies, and after them the destination is checked. No interpreter sits
// between the events, which PyTorch's Python dispatch (15–25 µs per call) does: at 1 MiB that alone
// moved PyTorch's figure by 10–20%. Prints "h2d_pageable<TAB>bytes<TAB>median GB/s" and the d2h lines.
#include "cuda_ref.h"

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    check(cuCtxSynchronize(), "cuCtxSynchronize");
    double *rates = malloc(reps * sizeof(double));
    const char *names[2] = {"h2d_pageable", "d2h_pageable"};
    unsigned char probe[64];
    for (int dir = 0; dir < 2; dir++) {
        for (int i = 4; i < argc; i++) {
            size_t n = strtoull(argv[i], NULL, 10);
            // This size's own byte (never the poison), written to the source; the destination poisoned.
            unsigned char mark = (unsigned char)(1 + (dir * 31 + i) % 200), poison = 0xEE;
            if (dir == 0) { memset(host, mark, n); check(cuMemsetD8(dptr, poison, n), "cuMemsetD8"); }
            else { check(cuMemsetD8(dptr, mark, n), "cuMemsetD8"); memset(host, poison, n); }
            check(cuCtxSynchronize(), "cuCtxSynchronize");
            for (int r = -warmup; r < reps; r++) {
                if (r == 0) {  // the warm-ups wrote the destination: poison it again before the timed copies
                    if (dir == 0) check(cuMemsetD8(dptr, poison, n), "cuMemsetD8");
                    else memset(host, poison, n);
                    check(cuCtxSynchronize(), "cuCtxSynchronize");
                }
                float ms;
                check(cuEventRecord(start, stream), "cuEventRecord");
                if (dir == 0) check(cuMemcpyHtoDAsync(dptr, host, n, stream), "cuMemcpyHtoDAsync");
                else check(cuMemcpyDtoHAsync(host, dptr, n, stream), "cuMemcpyDtoHAsync");
                check(cuEventRecord(end, stream), "cuEventRecord");
                check(cuEventSynchronize(end), "cuEventSynchronize");
                check(cuEventElapsedTime(&ms, start, end), "cuEventElapsedTime");
                if (r >= 0) rates[r] = n / (ms * 1e-3) / 1e9;
            }
            // The timed copies arrived: 64 bytes spread over the destination (and its last byte) carry the mark.
            for (int k = 0; k < 64; k++) {
                size_t at = k == 63 ? n - 1 : (n / 63) * k;
                if (dir == 0) check(cuMemcpyDtoH(&probe[k], dptr + at, 1), "cuMemcpyDtoH");
                else probe[k] = host[at];
                if (probe[k] != mark) {
                    fprintf(stderr, "%s %zu: byte %zu is %d after the timed copies, expected %d\n", names[dir], n, at,
                            probe[k], mark);
                    return 1;
                }
            }
            printf("%s\t%zu\t%.4f\n", names[dir], n, median(rates, reps));
        }
    }
    check(cuMemFree(dptr), "cuMemFree");
    check(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");
    return 0;
}
