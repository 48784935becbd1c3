#!/usr/bin/env python3
"""Does the lab's CUDA context really go when the lab releases it, once cuBLAS has run in it?

Usage: python3 tests/gpu/ctx_release.py

The lab opens the primary context (cuDevicePrimaryCtxRetain, as cudarc's CudaContext::new), creates a
cuBLAS handle in it, and at idle destroys the handle and releases the context. cuBLAS carries the CUDA
runtime inside, which retains the primary context for itself, so the release may leave it alive: the
device memory it holds stays listed under the process in nvidia-smi. This prints the primary context's
state and nvidia-smi's line for this process after each step, then tries cuDevicePrimaryCtxReset_v2
and a second round (retain, cuBLAS handle, a small SGEMM, checked) to show that work still runs after a reset.
Exits 1 when a step fails.
"""
import ctypes
import os
import subprocess
import sys


def listed():
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader"],
                         capture_output=True, text=True).stdout
    mine = [l.strip() for l in out.splitlines() if l.split(",")[0].strip() == str(os.getpid())]
    return mine[0] if mine else "not listed"


def main():
    cuda = ctypes.CDLL("libcuda.so.1")
    blas = ctypes.CDLL("libcublas.so.13")
    assert cuda.cuInit(0) == 0
    dev = ctypes.c_int()
    cuda.cuDeviceGet(ctypes.byref(dev), 0)

    def state(step):
        flags, active = ctypes.c_uint(), ctypes.c_int()
        cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active))
        print(f"{step:<58} primary context active={active.value}  nvidia-smi: {listed()}", flush=True)
        return active.value

    def round_(n):
        ctx = ctypes.c_void_p()
        assert cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev) == 0
        assert cuda.cuCtxSetCurrent(ctx) == 0
        handle = ctypes.c_void_p()
        rc = blas.cublasCreate_v2(ctypes.byref(handle))
        # A 64×64 SGEMM of ones: every element of C is 64.
        n_el, size = 64 * 64, 64 * 64 * 4
        a, c = ctypes.c_uint64(), ctypes.c_uint64()
        cuda.cuMemAlloc_v2(ctypes.byref(a), size)
        cuda.cuMemAlloc_v2(ctypes.byref(c), size)
        ones = (ctypes.c_float * n_el)(*([1.0] * n_el))
        cuda.cuMemcpyHtoD_v2(a, ones, size)
        one, zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
        rc_gemm = blas.cublasSgemm_v2(handle, 0, 0, 64, 64, 64, ctypes.byref(one), ctypes.c_void_p(a.value), 64,
                                      ctypes.c_void_p(a.value), 64, ctypes.byref(zero), ctypes.c_void_p(c.value), 64)
        out = (ctypes.c_float * n_el)()
        rc_copy = cuda.cuMemcpyDtoH_v2(out, c, size)
        ok = rc == 0 and rc_gemm == 0 and rc_copy == 0 and all(x == 64.0 for x in out)
        state(f"round {n}: context, cuBLAS handle, SGEMM (create {rc}, gemm {rc_gemm}, copy {rc_copy}, C ok {ok})")
        cuda.cuMemFree_v2(a)
        cuda.cuMemFree_v2(c)
        blas.cublasDestroy_v2(handle)
        state(f"round {n}: buffers freed, cuBLAS handle destroyed")
        cuda.cuDevicePrimaryCtxRelease_v2(dev)
        return ok

    state("cuInit")
    ok1 = round_(1)
    left = state("round 1: primary context released (the lab's idle release)")
    rc = cuda.cuDevicePrimaryCtxReset_v2(dev)
    gone = state(f"cuDevicePrimaryCtxReset_v2 = {rc}") == 0
    ok2 = round_(2)
    state("round 2: primary context released")
    cuda.cuDevicePrimaryCtxReset_v2(dev)
    state("cuDevicePrimaryCtxReset_v2 again")
    print(f"release alone left the context {'alive' if left else 'gone'}; reset: {'gone' if gone else 'still alive'}; "
          f"work after the reset: {'ok' if ok2 else 'FAILED'}")
    return 0 if ok1 and ok2 and gone else 1


if __name__ == "__main__":
    sys.exit(main())
