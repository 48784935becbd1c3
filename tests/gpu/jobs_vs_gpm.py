"""A PyTorch job of known shape against gpudash's report of it (GET /api/jobs), on a real GPU.

The job (this script with --job, started in its own session so that it leads its own process group,
which is how gpudash keys a plain process's job: "process:<pgid>"):
  phase A  GEMM_S (40) seconds of bf16 GEMMs, 8192 x 8192, synchronized at the end of the phase;
  phase B  a 4 GiB tensor allocated and held for HOLD_S (30) seconds with no kernel;
then it exits. It stamps its own times with time.time(): when its CUDA context exists (after its
first allocation), phase A's start and end, phase B's start and end; the parent stamps its exit
(when its wait returns). Meanwhile the parent reads, once a second, pynvml's GPM on the job's GPU
(SM_UTIL, ANY_TENSOR_UTIL, DRAM_BW_UTIL: the metrics tests/gpu/gpm_vs_pynvml.py compares) and the
memory NVML lists for the job's pid on every GPU. After the exit it waits (up to 30 s) for the job
in GET /api/jobs?state=ended and compares, side by side:

  gpudash's figure           the reference                                     bound (two-sided)
  held_s, gpu_s              the job's own length: context → exit              [own − 3 s, own + 3 s]
  idle_s                     phase B's length B                                [B − 8 s, B + 5 s]
  SM activity mean           pynvml GPM, time-weighted over context → exit     ±5 points
  tensor activity mean       likewise                                          ±5 points
  memory peak                the most NVML listed for the job's pid            ±64 MiB
  memory peak                torch's reserved bytes in phase B (4 GiB + the    [reserved, reserved + 1.5 GiB]
                             GEMM working set)
  outcome, runtime, key      "ended", "process", "process:<pid>"               equal
  gpus                       the GPUs NVML listed the job's pid on             equal
  verdicts                   the job held the GPU over --job-verdict-after     at least one

Why these bounds (fixed before the run; gpudash reads each GPU's processes every 2 s, its slow loop):
  held_s    a job is charged from the reading before the first that lists its process (the process
            started earlier: /proc's start is clamped to that reading) to the last that lists it, so
            each end moves by up to one reading (2 s); 1 s more for the context's creation and the
            process list's lag.
  idle_s    an interval counts idle when, at its reading, the GPU's utilization gauge and the
            process's NVML SM figure both read 0. That figure is read every other pass (3.9 s) and
            held between, so idle starts from 2 s before to 6 s after phase B begins (−6 … +2 s);
            the last reading falls up to 2 s before the exit, which is up to ~1 s after phase B's end
            (−2 … +1 s); and the job's first interval, before its GEMMs show on the gauge, may count
            idle (0 … +2 s). Sum: −8 … +5 s.
  activity  gpudash weights each GPM window's mean by the held seconds of its interval, as the
            reference weights pynvml's 1 s windows by their overlap with the job's life; the held
            span's ends differ from the life's by up to 2 s each (≤ 2 points on a ~72 s job at ~53%).
  memory    gpudash reads the same NVML figure every 2 s; the job's memory only grows, then stays
            flat for 30 s. The CUDA context and its kernels add under 1.5 GiB to torch's reserved bytes.

Every checked figure's check is also shown to catch an injected fault: the report is altered (held_s
×2, SM activity +20 points, ...) and that check must FAIL ("fault check: held_s ×2 caught").

    python3 tests/gpu/jobs_vs_gpm.py URL OUT_DIR      (gpudash on URL with --job-verdict-after 10s)

Exits 0 when every check passes and every fault is caught, 1 when one fails, 2 when the activity rows
are INCONCLUSIVE (pynvml's GPM is not supported on this GPU) and nothing failed.
"""
import copy
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pynvml

from gpm_vs_pynvml import ANY_TENSOR_UTIL, DRAM_BW_UTIL, SM_UTIL

GIB = 2**30
MIB = 2**20

# The job's shape.
GPU = 0                       # NVML index (the child gets CUDA_VISIBLE_DEVICES=GPU in PCI order)
GEMM_N = 8192
GEMM_S = 40.0                 # phase A
HOLD_BYTES = 4 * GIB
HOLD_S = 30.0                 # phase B
JOB_DEADLINE_S = 100.0        # launch to exit: torch's import, 70 s of phases, the exit
REPORT_DEADLINE_S = 30.0      # exit to the ended job in /api/jobs (2 readings without it, then stored)

# The bounds, two-sided (the docstring says why).
HELD_BELOW_S, HELD_ABOVE_S = 3.0, 3.0
IDLE_BELOW_S, IDLE_ABOVE_S = 8.0, 5.0
ACTIVITY_POINTS = 5.0
MEMORY_NVML_BYTES = 64 * MIB
CONTEXT_MAX_BYTES = 1.5 * GIB
MIN_COVERAGE = 0.9            # share of the job's life pynvml's GPM windows must cover


# ---------------------------------------------------------------------------------------------- the job


def job(path):
    """The scripted job: its own timings (epoch seconds) and torch's memory, written to `path`."""
    import torch

    stamps = {"pid": os.getpid(), "pgid": os.getpgid(0), "first_cuda_call": time.time()}
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    stamps["context"] = time.time()

    a = torch.randn(GEMM_N, GEMM_N, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(GEMM_N, GEMM_N, device="cuda", dtype=torch.bfloat16)
    stamps["a_start"] = time.time()
    gemms = 0
    while time.time() < stamps["a_start"] + GEMM_S:
        for _ in range(20):
            c = a @ b
        torch.cuda.synchronize()
        gemms += 20
    stamps["a_end"] = time.time()
    stamps["gemms"] = gemms
    stamps["gemm_reserved_bytes"] = torch.cuda.memory_reserved()
    del c

    held = torch.empty(HOLD_BYTES, dtype=torch.uint8, device="cuda")  # cudaMalloc only: no kernel
    torch.cuda.synchronize()
    stamps["b_start"] = time.time()
    stamps["reserved_bytes"] = torch.cuda.memory_reserved()
    stamps["allocated_bytes"] = torch.cuda.memory_allocated()
    time.sleep(HOLD_S)
    stamps["b_end"] = time.time()
    del held

    with open(path + ".tmp", "w") as f:
        json.dump(stamps, f)
    os.replace(path + ".tmp", path)


# ------------------------------------------------------------------------------------ the references


class GpmRefused(Exception):
    """GPM is supported but computed no figure for a metric."""


class Sampler(threading.Thread):
    """Once a second: a GPM window of the job's GPU (SM, tensor, DRAM activity, percent), the memory
    NVML lists for the job's pid on each GPU, and the GPU's energy counter."""

    def __init__(self, gpu):
        super().__init__(daemon=True)
        self.handle = pynvml.nvmlDeviceGetHandleByIndex(gpu)
        self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        self.unsupported = gpm_supported(self.handle)
        self.gpm = self.unsupported is None
        self.pid = None
        self.windows = []   # (t0, t1, sm %, tensor %, dram %)
        self.memory = []    # (t, {gpu index: bytes NVML lists for the pid})
        self.energy = []    # (t, mJ)
        self.error = None
        self.done = threading.Event()

    def run(self):
        try:
            self.loop()
        except (pynvml.NVMLError, GpmRefused) as e:
            self.error = f"pynvml failed while sampling: {e}"

    def loop(self):
        previous = self.sample() if self.gpm else None
        next_at = time.time()
        while True:
            next_at += 1.0
            if self.done.wait(max(0.0, next_at - time.time())):
                break
            if self.gpm:
                current = self.sample()
                self.windows.append((previous[0], current[0], *self.metrics(previous[1], current[1])))
                pynvml.nvmlGpmSampleFree(previous[1])
                previous = current
            now = time.time()
            self.energy.append((now, pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)))
            if self.pid is not None:
                seen = {}
                for i, h in enumerate(self.handles):
                    for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                        if p.pid == self.pid:
                            seen[i] = p.usedGpuMemory or 0
                self.memory.append((now, seen))
        if previous is not None:
            pynvml.nvmlGpmSampleFree(previous[1])

    def sample(self):
        s = pynvml.nvmlGpmSampleAlloc()
        pynvml.nvmlGpmSampleGet(self.handle, s)
        return time.time(), s

    @staticmethod
    def metrics(first, second):
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 3
        request.sample1, request.sample2 = first, second
        for i, metric in enumerate((SM_UTIL, ANY_TENSOR_UTIL, DRAM_BW_UTIL)):
            request.metrics[i].metricId = metric
        pynvml.nvmlGpmMetricsGet(request)
        refused = [request.metrics[i].metricId for i in range(3) if request.metrics[i].nvmlReturn != 0]
        if refused:
            raise GpmRefused(f"GPM did not compute metrics {refused}: no reference to compare with")
        return tuple(request.metrics[i].value for i in range(3))


def gpm_supported(handle):
    """None when pynvml can read GPM on the GPU, else why not."""
    try:
        if not pynvml.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
            return "pynvml says GPM is not supported on this GPU"
    except (pynvml.NVMLError, AttributeError) as e:
        return f"pynvml cannot query GPM support: {e}"
    return None


def weighted(windows, start, end, column):
    """The mean of windows' `column` over [start, end], each weighted by its overlap, and the share
    of [start, end] the windows cover."""
    total = weight = 0.0
    for w in windows:
        overlap = min(w[1], end) - max(w[0], start)
        if overlap > 0:
            total += w[column] * overlap
            weight += overlap
    if weight <= 0:
        return None, 0.0
    return total / weight, weight / (end - start)


def interpolate(series, t):
    """A counter's value at `t`, linear between its samples (None outside them)."""
    for (t0, v0), (t1, v1) in zip(series, series[1:]):
        if t0 <= t <= t1:
            return v0 + (v1 - v0) * (t - t0) / (t1 - t0) if t1 > t0 else v0
    return None


class Reference:
    """What the job and pynvml say, to hold gpudash's report against."""

    def __init__(self, own, exited, sampler, gpu):
        self.own = own
        self.context, self.exited = own["context"], exited
        self.length = exited - own["context"]
        self.phase_b = own["b_end"] - own["b_start"]
        self.pid = own["pid"]
        self.gpm = sampler.gpm
        self.windows = sampler.windows
        life = (self.context, self.exited)
        self.sm, self.coverage = weighted(sampler.windows, *life, 2) if self.gpm else (None, 0.0)
        self.tensor = weighted(sampler.windows, *life, 3)[0] if self.gpm else None
        self.dram = weighted(sampler.windows, *life, 4)[0] if self.gpm else None
        phase_a = (own["a_start"], own["a_end"])
        self.sm_a = weighted(sampler.windows, *phase_a, 2)[0] if self.gpm else None
        self.tensor_a = weighted(sampler.windows, *phase_a, 3)[0] if self.gpm else None
        self.gpus = sorted({i for _, seen in sampler.memory for i in seen})
        self.memory_peak = max((seen.get(gpu, 0) for _, seen in sampler.memory), default=0)
        e0, e1 = interpolate(sampler.energy, self.context), interpolate(sampler.energy, self.exited)
        self.energy_j = (e1 - e0) / 1000 if e0 is not None and e1 is not None else None


# --------------------------------------------------------------------------------------- the checks


def seconds(v):
    return f"{v:.1f} s"


def points(share):
    return "n/a" if share is None else f"{share * 100:.1f}%"


def gib(v):
    return f"{v / GIB:.2f} GiB"


def within(value, low, high):
    return value is not None and low <= value <= high


def judge(report, ref):
    """The checked rows: (figure, gpudash, reference, bound, PASS / FAIL / INCONCLUSIVE)."""
    f = report["figures"]
    rows = []

    def row(name, got, want, bound, ok, inconclusive=False):
        rows.append((name, got, want, bound, "INCONCLUSIVE" if inconclusive else "PASS" if ok else "FAIL"))

    low, high = ref.length - HELD_BELOW_S, ref.length + HELD_ABOVE_S
    for name in ("held_s", "gpu_s"):
        row(name, seconds(f[name]), f"own length {seconds(ref.length)}", f"[{low:.1f}, {high:.1f}] s",
            within(f[name], low, high))
    low, high = ref.phase_b - IDLE_BELOW_S, ref.phase_b + IDLE_ABOVE_S
    row("idle_s", seconds(f["idle_s"]), f"phase B {seconds(ref.phase_b)}", f"[{low:.1f}, {high:.1f}] s",
        within(f["idle_s"], low, high))
    for name, key, want in (("SM activity mean", "sm_active_mean", ref.sm),
                            ("tensor activity mean", "tensor_active_mean", ref.tensor)):
        got = f.get(key)
        ok = got is not None and want is not None and abs(got * 100 - want) <= ACTIVITY_POINTS
        row(name, points(got), "no GPM" if want is None else f"pynvml GPM {want:.1f}%",
            f"±{ACTIVITY_POINTS:.0f} points", ok, inconclusive=want is None)
    peak = f["memory_peak_bytes"]
    row("memory peak vs NVML", gib(peak), f"pynvml {gib(ref.memory_peak)}", f"±{MEMORY_NVML_BYTES // MIB} MiB",
        abs(peak - ref.memory_peak) <= MEMORY_NVML_BYTES)
    reserved = ref.own["reserved_bytes"]
    row("memory peak vs torch", gib(peak), f"reserved {gib(reserved)}",
        f"[{reserved / GIB:.2f}, {(reserved + CONTEXT_MAX_BYTES) / GIB:.2f}] GiB", within(peak, reserved, reserved + CONTEXT_MAX_BYTES))
    row("outcome", report["outcome"], "ended", "equal", report["outcome"] == "ended")
    row("runtime", report["runtime"], "process", "equal", report["runtime"] == "process")
    row("key", report["key"], f"process:{ref.pid}", "equal", report["key"] == f"process:{ref.pid}")
    row("gpus", str(report["gpus"]), f"NVML {ref.gpus}", "equal", report["gpus"] == ref.gpus)
    row("verdicts", str(len(report["verdicts"])), "judged", "at least 1", len(report["verdicts"]) > 0)
    return rows


# Each fault alters one figure of the report; the check of that row must then FAIL.
FAULTS = [
    ("held_s ×2", "held_s", lambda r: r["figures"].update(held_s=r["figures"]["held_s"] * 2)),
    ("gpu_s ×2", "gpu_s", lambda r: r["figures"].update(gpu_s=r["figures"]["gpu_s"] * 2)),
    ("idle_s ×2", "idle_s", lambda r: r["figures"].update(idle_s=r["figures"]["idle_s"] * 2)),
    ("SM activity +20 points", "SM activity mean",
     lambda r: r["figures"].update(sm_active_mean=(r["figures"]["sm_active_mean"] or 0) + 0.2)),
    ("tensor activity +20 points", "tensor activity mean",
     lambda r: r["figures"].update(tensor_active_mean=(r["figures"]["tensor_active_mean"] or 0) + 0.2)),
    ("memory peak +1 GiB", "memory peak vs NVML",
     lambda r: r["figures"].update(memory_peak_bytes=r["figures"]["memory_peak_bytes"] + GIB)),
    ("memory peak ÷2", "memory peak vs torch",
     lambda r: r["figures"].update(memory_peak_bytes=r["figures"]["memory_peak_bytes"] // 2)),
    ("outcome killed", "outcome", lambda r: r.update(outcome="killed")),
    ("runtime container", "runtime", lambda r: r.update(runtime="container")),
    ("key of the parent's group", "key", lambda r: r.update(key=f"process:{os.getpgid(0)}")),
    ("gpus + another", "gpus", lambda r: r.update(gpus=r["gpus"] + [max(r["gpus"] + [0]) + 1])),
    ("no verdicts", "verdicts", lambda r: r.update(verdicts=[])),
]


def fault_checks(report, ref, rows):
    """Runs every fault; returns how many were caught and how many were not."""
    status = {name: verdict for name, *_, verdict in rows}
    caught = missed = 0
    for fault, name, alter in FAULTS:
        if status[name] == "INCONCLUSIVE":
            print(f"fault check: {fault} not run ({name} has no reference)")
            continue
        wrong = copy.deepcopy(report)
        alter(wrong)
        verdict = {n: v for n, *_, v in judge(wrong, ref)}[name]
        if verdict == "FAIL":
            print(f"fault check: {fault} caught")
            caught += 1
        else:
            print(f"fault check: {fault} NOT caught ({name} gave {verdict} on a wrong figure)")
            missed += 1
    return caught, missed


# ------------------------------------------------------------------------------------------ the run


def get(url, path):
    with urllib.request.urlopen(f"{url}{path}", timeout=5) as response:
        return json.load(response)


def ended_report(url, pid, out):
    """The ended job whose pids hold `pid`, polled until REPORT_DEADLINE_S; None when it never came."""
    deadline = time.time() + REPORT_DEADLINE_S
    while True:
        body = get(url, "/api/jobs?state=ended&limit=20")
        found = [j for j in body["jobs"] if pid in j.get("pids", [])]
        if found:
            with open(os.path.join(out, "report.json"), "w") as f:
                json.dump(found[0], f, indent=1)
            return found[0]
        if time.time() >= deadline:
            with open(os.path.join(out, "jobs.json"), "w") as f:
                json.dump(get(url, "/api/jobs?limit=20"), f, indent=1)
            return None
        time.sleep(0.5)


def run_job(out, sampler):
    """Starts the job in its own session, waits for it; returns (its own stamps, its exit time)."""
    path = os.path.join(out, "job.json")
    env = dict(os.environ, CUDA_DEVICE_ORDER="PCI_BUS_ID", CUDA_VISIBLE_DEVICES=str(GPU), PYTHONUNBUFFERED="1")
    with open(os.path.join(out, "job.log"), "w") as log:
        launched = time.time()
        child = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--job", path], env=env,
                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    with open(os.path.join(out, "job.pid"), "w") as f:
        f.write(str(child.pid))
    sampler.pid = child.pid
    try:
        rc = child.wait(timeout=JOB_DEADLINE_S)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"FAIL: the job ran past {JOB_DEADLINE_S:.0f} s (see {out}/job.log)")
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        os.remove(os.path.join(out, "job.pid"))  # reaped: jobs.sh's backstop must not kill a reused group
    exited = time.time()
    if rc != 0 or not os.path.exists(path):
        raise SystemExit(f"FAIL: the job exited {rc} without its timings (see {out}/job.log)")
    with open(path) as f:
        own = json.load(f)
    own["launched"] = launched
    if own["pgid"] != child.pid:
        raise SystemExit(f"FAIL: the job's process group is {own['pgid']}, not its pid {child.pid}")
    return own, exited


def main():
    url, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    # The part's timeout sends SIGTERM: end by SystemExit so that the job's group is killed on the way out.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    pynvml.nvmlInit()
    sampler = Sampler(GPU)
    unsupported = sampler.unsupported
    name = pynvml.nvmlDeviceGetName(sampler.handle)
    print(f"GPU {GPU}: {name.decode() if isinstance(name, bytes) else name}; GPM through pynvml: "
          f"{'yes' if unsupported is None else unsupported}")
    print(f"== the job: {GEMM_S:.0f} s of bf16 GEMMs {GEMM_N}x{GEMM_N}, then {HOLD_BYTES // GIB} GiB held "
          f"{HOLD_S:.0f} s with no kernel")
    sampler.start()
    try:
        own, exited = run_job(out, sampler)
    finally:
        time.sleep(1.1)  # one more window past the exit
        sampler.done.set()
        sampler.join()
    if sampler.error:
        raise SystemExit(f"FAIL: {sampler.error}")
    ref = Reference(own, exited, sampler, GPU)
    print(f"  pid {ref.pid} (its own process group); {own['gemms']} GEMMs; first CUDA call → context "
          f"{own['context'] - own['first_cuda_call']:.2f} s; launch → context {own['context'] - own['launched']:.1f} s")
    print(f"  own length (context → exit) {seconds(ref.length)}: setup {seconds(own['a_start'] - own['context'])}, "
          f"phase A {seconds(own['a_end'] - own['a_start'])}, phase B {seconds(ref.phase_b)}, "
          f"exit {seconds(exited - own['b_end'])}")
    if ref.gpm:
        print(f"  pynvml GPM over phase A: SM {ref.sm_a:.1f}%, tensor {ref.tensor_a:.1f}%; over the job's life: "
              f"SM {ref.sm:.1f}%, tensor {ref.tensor:.1f}%, DRAM {ref.dram:.1f}% ({len(ref.windows)} windows, "
              f"{ref.coverage * 100:.0f}% of the life covered)")
        if ref.coverage < MIN_COVERAGE:
            raise SystemExit(f"FAIL: pynvml's GPM windows cover only {ref.coverage * 100:.0f}% of the job's life")

    report = ended_report(url, ref.pid, out)
    if report is None:
        raise SystemExit(f"FAIL: no ended job with pid {ref.pid} in /api/jobs within {REPORT_DEADLINE_S:.0f} s "
                         f"of its exit (see {out}/jobs.json)")
    f = report["figures"]

    print(f"\n== job {report['id']} \"{report['name']}\" of {report['owner']}: gpudash vs the job and pynvml")
    rows = judge(report, ref)
    print(f"  {'figure':<22} {'gpudash':>16} {'reference':>26} {'bound':>26}  verdict")
    for name, got, want, bound, verdict in rows:
        print(f"  {name:<22} {got:>16} {want:>26} {bound:>26}  {verdict}")

    print("\n  context (not checked):")
    print(f"    activity_s {seconds(f['activity_s'])}, shared_s {seconds(f['shared_s'])}, "
          f"SM p95 {points(f['sm_active_p95'])}, DRAM mean {points(f['dram_active_mean'])}"
          + (f" (pynvml {ref.dram:.1f}%)" if ref.dram is not None else ""))
    span = (report["watched_from_ms"] / 1000 - 2.0, report["ended_ms"] / 1000)
    if ref.gpm:
        sm_span, tensor_span = weighted(ref.windows, *span, 2)[0], weighted(ref.windows, *span, 3)[0]
        print(f"    pynvml GPM over gpudash's held span (first reading − 2 s → last): SM {sm_span:.1f}%, "
              f"tensor {tensor_span:.1f}%")
    print(f"    started_ms − launch {report['started_ms'] / 1000 - own['launched']:+.2f} s (/proc's start); "
          f"ended_ms − exit {report['ended_ms'] / 1000 - exited:+.2f} s (the last reading listing it)")
    print(f"    memory: peak {gib(f['memory_peak_bytes'])} of {gib(f['memory_capacity_bytes'])}, mean "
          f"{gib(f['memory_mean_bytes'])}; torch in phase B: reserved {gib(own['reserved_bytes'])} = "
          f"{HOLD_BYTES // GIB} GiB + GEMM working set {gib(own['reserved_bytes'] - HOLD_BYTES)}, allocated "
          f"{gib(own['allocated_bytes'])}; CUDA context and kernels {gib(ref.memory_peak - own['reserved_bytes'])}")
    energy = f"{ref.energy_j / 1000:.2f} kJ" if ref.energy_j is not None else "n/a"
    print(f"    energy: gpudash {f['energy_j'] / 1000:.2f} kJ ({report['energy_kwh']:.5f} kWh); NVML's counter over "
          f"the job's life {energy}")
    print(f"    grade {report['grade']}; verdicts:")
    for v in report["verdicts"]:
        evidence = ", ".join(f"{e['name']} {e['value']}" for e in v["evidence"])
        print(f"      {v['rule']} ({v['grade']}): {v['words']}" + (f"  [{evidence}]" if evidence else ""))

    print()
    caught, missed = fault_checks(report, ref, rows)
    failed = sum(1 for *_, verdict in rows if verdict == "FAIL")
    inconclusive = sum(1 for *_, verdict in rows if verdict == "INCONCLUSIVE")
    print(f"\njobs: {len(rows) - failed - inconclusive} PASS, {failed} FAIL, {inconclusive} INCONCLUSIVE; "
          f"{caught} injected faults caught, {missed} missed, {len(FAULTS) - caught - missed} not run")
    if inconclusive:
        print(f"INCONCLUSIVE: {unsupported or 'no GPM reference'}: SM and tensor activity not compared")
    if failed or missed:
        return 1
    return 2 if inconclusive else 0


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--job":
        job(sys.argv[2])
    elif len(sys.argv) == 3:
        sys.exit(main())
    else:
        sys.exit(__doc__)
