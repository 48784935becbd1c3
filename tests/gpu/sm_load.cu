// A calibrated load for GPM's SM activity: exactly K of the GPU's SMs busy for DUTY of every
// PERIOD_MS, for SECONDS. Built and run by tests/gpu/gpm_calibrated.py on the GPU machine:
//   nvcc -O2 -o /tmp/sm_load tests/gpu/sm_load.cu && /tmp/sm_load K DUTY SECONDS [PERIOD_MS]
//
// One block per SM: the kernel asks for the most dynamic shared memory a block may have, so no SM
// holds two, and a grid of as many blocks as the GPU has SMs puts one on every SM at once. Each
// block takes a ticket (an atomic counter); the first K spin on %globaltimer for DUTY × PERIOD_MS
// with one warp, the rest return at once. So K distinct SMs each have a warp resident for the
// busy part of each period, and SM activity (share of time an SM has a warp, averaged over all
// SMs) should read K / SMs × DUTY. %smid is not used: its numbering need not be contiguous.
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <cuda_runtime.h>

#define CHECK(call)                                                                         \
    do {                                                                                    \
        cudaError_t rc_ = (call);                                                           \
        if (rc_ != cudaSuccess) {                                                           \
            std::fprintf(stderr, "%s failed: %s\n", #call, cudaGetErrorString(rc_));        \
            std::exit(1);                                                                   \
        }                                                                                   \
    } while (0)

__device__ unsigned long long now_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void spin(unsigned k, unsigned long long busy_ns, unsigned *tickets, unsigned *spun) {
    extern __shared__ unsigned char reserve[];  // only there to keep a second block off this SM
    __shared__ unsigned ticket;
    if (threadIdx.x == 0) {
        ticket = atomicAdd(tickets, 1u);
        reserve[0] = 0;
    }
    __syncthreads();
    if (ticket >= k) return;
    unsigned long long start = now_ns();
    while (now_ns() - start < busy_ns) {
    }
    if (threadIdx.x == 0) atomicAdd(spun, 1u);
}

static double wall_s() {
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        std::fprintf(stderr, "usage: %s K DUTY SECONDS [PERIOD_MS]\n", argv[0]);
        return 2;
    }
    unsigned k = (unsigned)std::atoi(argv[1]);
    double duty = std::atof(argv[2]), seconds = std::atof(argv[3]);
    double period_ms = argc > 4 ? std::atof(argv[4]) : 100.0;
    int sms = 0, smem = 0;
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CHECK(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    if (k == 0 || k > (unsigned)sms || duty <= 0 || duty > 1 || seconds <= 0 || period_ms < 1) {
        std::fprintf(stderr, "K must be 1..%d, DUTY in (0, 1], SECONDS > 0, PERIOD_MS >= 1\n", sms);
        return 2;
    }
    // Less than a static __shared__ word's share, but more than half of an SM's: one block per SM.
    int dynamic = smem - 1024;
    CHECK(cudaFuncSetAttribute(spin, cudaFuncAttributeMaxDynamicSharedMemorySize, dynamic));
    int per_sm = 0;
    CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, spin, 32, dynamic));
    if (per_sm != 1) {
        std::fprintf(stderr, "expected one block per SM with %d bytes of shared memory, got %d\n", dynamic, per_sm);
        return 1;
    }
    unsigned *tickets, *spun;
    CHECK(cudaMalloc(&tickets, sizeof(unsigned)));
    CHECK(cudaMalloc(&spun, sizeof(unsigned)));
    unsigned long long busy_ns = (unsigned long long)(duty * period_ms * 1e6);
    std::printf("sm_load: %u of %d SMs busy %.0f%% of each %.0f ms for %.0f s (one block per SM, %d B shared)\n", k,
                sms, duty * 100, period_ms, seconds, dynamic);
    std::fflush(stdout);
    double end = wall_s() + seconds;
    unsigned launches = 0, short_launches = 0;
    while (wall_s() < end) {
        double started = wall_s();
        CHECK(cudaMemset(tickets, 0, sizeof(unsigned)));
        CHECK(cudaMemset(spun, 0, sizeof(unsigned)));
        spin<<<sms, 32, dynamic>>>(k, busy_ns, tickets, spun);
        CHECK(cudaGetLastError());
        CHECK(cudaDeviceSynchronize());
        unsigned got = 0;
        CHECK(cudaMemcpy(&got, spun, sizeof(unsigned), cudaMemcpyDeviceToHost));
        launches++;
        short_launches += got != k;
        double idle = period_ms * 1e-3 - (wall_s() - started);
        if (idle > 0) {
            timespec t{(time_t)idle, (long)((idle - (time_t)idle) * 1e9)};
            nanosleep(&t, nullptr);
        }
    }
    std::printf("sm_load: %u launches, %u with other than %u spinning blocks\n", launches, short_launches, k);
    return short_launches ? 1 : 0;
}
