// Plain CUDA driver API latency in C: the reference for gpudash's latency experiment (host-side calls).
// Built and run by tests/gpu/cuda_latency.py on the GPU machine:
//   gcc -O2 -I/usr/local/cuda/include tests/gpu/cuda_latency.c -o /tmp/cuda_latency -l:libcuda.so.1
//   /tmp/cuda_latency DEVICE REPETITIONS WARMUP
// Times each call with CLOCK_MONOTONIC, as gpudash's lab does with std::time::Instant, in the same order
// and with the same batching (a synchronize every 256 launches or records), on a non-blocking stream
// with an empty kernel JIT-compiled from PTX. Prints one "name<TAB>median µs" line per figure.
// The two GPU-side figures follow lab/src/cuda/latency.rs: events around QUEUED empty kernels
// launched back to back (per kernel), and events around one launch of a graph of GRAPH captured empty
// kernels (per kernel), each the median over max(REPETITIONS / 100, 10) samples.
#include "cuda_ref.h"

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static const char PTX[] =
    ".version 7.8\n.target sm_90\n.address_size 64\n.visible .entry empty_kernel()\n{\n    ret;\n}\n";
enum { BATCH = 256, QUEUED = 100, GRAPH = 1000, SLICES = 10 };

int main(int argc, char **argv) {
    int device = argc > 1 ? atoi(argv[1]) : 0;
    int reps = argc > 2 ? atoi(argv[2]) : 2000;
    int warmup = argc > 3 ? atoi(argv[3]) : 100;
    if (reps < 1 || warmup < 0) { fprintf(stderr, "usage: cuda_latency DEVICE REPETITIONS WARMUP\n"); return 2; }
    CUdevice dev;
    CUcontext ctx;
    CUmodule module;
    CUfunction f;
    CUstream stream;
    CUevent event;
    check(cuInit(0), "cuInit");
    check(cuDeviceGet(&dev, device), "cuDeviceGet");
    check(cuDevicePrimaryCtxRetain(&ctx, dev), "cuDevicePrimaryCtxRetain");
    check(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    check(cuModuleLoadData(&module, PTX), "cuModuleLoadData");
    check(cuModuleGetFunction(&f, module, "empty_kernel"), "cuModuleGetFunction");
    check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    check(cuEventCreate(&event, CU_EVENT_DEFAULT), "cuEventCreate");
#define LAUNCH() check(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL), "cuLaunchKernel")
#define SYNC() check(cuStreamSynchronize(stream), "cuStreamSynchronize")
    for (int i = 0; i < warmup; i++) LAUNCH();
    SYNC();
    int per = reps / SLICES > 0 ? reps / SLICES : 1, timed = per * SLICES;  // host samples: SLICES slices of per
    double *launches = malloc(timed * sizeof(double)), *records = malloc(timed * sizeof(double));
    double *idle = malloc(timed * sizeof(double)), *round_trips = malloc(timed * sizeof(double));
    // In SLICES slices, each timing every host figure in turn, so each figure's samples spread over the whole
    // run, as gpudash's latency.rs takes them (a VM's core changes speed for milliseconds at a time).
    for (int slice = 0, n = 0; slice < SLICES; slice++, n += per) {
        for (int i = 0; i < per; i++) {
            double t = now_us();
            LAUNCH();
            launches[n + i] = now_us() - t;
            if (i % BATCH == BATCH - 1) SYNC();
        }
        SYNC();
        for (int i = 0; i < per; i++) {
            double t = now_us();
            check(cuEventRecord(event, stream), "cuEventRecord");
            records[n + i] = now_us() - t;
            if (i % BATCH == BATCH - 1) SYNC();
        }
        SYNC();
        for (int i = 0; i < per; i++) {
            double t = now_us();
            SYNC();
            idle[n + i] = now_us() - t;
            t = now_us();
            LAUNCH();
            SYNC();
            round_trips[n + i] = now_us() - t;
        }
    }
    int samples = reps / 100 > 10 ? reps / 100 : 10;
    double *graphed = malloc(samples * sizeof(double));
    CUevent start, end;
    float ms;
    check(cuEventCreate(&start, CU_EVENT_DEFAULT), "cuEventCreate");
    check(cuEventCreate(&end, CU_EVENT_DEFAULT), "cuEventCreate");
    int batches = reps / QUEUED > 10 ? reps / QUEUED : 10;
    double *queued_all = malloc(batches * sizeof(double));
    for (int b = 0; b < batches; b++) {
        check(cuEventRecord(start, stream), "cuEventRecord");
        for (int i = 0; i < QUEUED; i++) LAUNCH();
        check(cuEventRecord(end, stream), "cuEventRecord");
        check(cuEventSynchronize(end), "cuEventSynchronize");
        check(cuEventElapsedTime(&ms, start, end), "cuEventElapsedTime");
        queued_all[b] = ms * 1e3 / QUEUED;
    }
    SYNC();
    CUgraph graph;
    CUgraphExec exec;
    check(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture");
    for (int i = 0; i < GRAPH; i++) LAUNCH();
    check(cuStreamEndCapture(stream, &graph), "cuStreamEndCapture");
    size_t nodes = 0;
    check(cuGraphGetNodes(graph, NULL, &nodes), "cuGraphGetNodes");
    if (nodes != GRAPH) { fprintf(stderr, "the graph holds %zu nodes, expected %d\n", nodes, GRAPH); return 1; }
    check(cuGraphInstantiate(&exec, graph, 0), "cuGraphInstantiate");
    check(cuGraphUpload(exec, stream), "cuGraphUpload");
    check(cuGraphLaunch(exec, stream), "cuGraphLaunch");  // untimed: the first launch sets the graph up
    SYNC();
    for (int i = 0; i < samples; i++) {
        check(cuEventRecord(start, stream), "cuEventRecord");
        check(cuGraphLaunch(exec, stream), "cuGraphLaunch");
        check(cuEventRecord(end, stream), "cuEventRecord");
        check(cuEventSynchronize(end), "cuEventSynchronize");
        check(cuEventElapsedTime(&ms, start, end), "cuEventElapsedTime");
        graphed[i] = ms * 1e3 / GRAPH;
    }
    printf("kernel launch (host)\t%.4f\n", median(launches, timed));
    printf("event record (host)\t%.4f\n", median(records, timed));
    printf("synchronize, idle stream (host)\t%.4f\n", median(idle, timed));
    printf("launch + synchronize (host)\t%.4f\n", median(round_trips, timed));
    printf("queued empty kernels, per launch (GPU events; launch-rate bound)\t%.4f\n", median(queued_all, batches));
    printf("CUDA graph of empty kernels, per kernel (GPU events)\t%.4f\n", median(graphed, samples));
    check(cuGraphExecDestroy(exec), "cuGraphExecDestroy");
    check(cuGraphDestroy(graph), "cuGraphDestroy");
    check(cuEventDestroy(start), "cuEventDestroy");
    check(cuEventDestroy(end), "cuEventDestroy");
    check(cuEventDestroy(event), "cuEventDestroy");
    check(cuStreamDestroy(stream), "cuStreamDestroy");
    check(cuModuleUnload(module), "cuModuleUnload");
    check(cuDevicePrimaryCtxRelease(dev), "cuDevicePrimaryCtxRelease");
    return 0;
}
