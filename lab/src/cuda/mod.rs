//! The real executor: experiments through cudarc (driver API, cuBLAS, NVRTC),
//! loaded at run time so the same binary starts without CUDA.
//!
//! One [`Session`] (context, stream, the device's stream-ordered pool, cuBLAS,
//! NVRTC kernels) is opened at the first run and released when the lab idles.
//! cudarc's per-buffer event tracking is turned off: every experiment
//! synchronizes explicitly, and the extra event records would sit inside the
//! timed regions.
#![allow(unsafe_code)]

mod copy_kernel;
mod fault;
mod probe;
// Each kind's CUDA run, called by its `Experiment::run_cuda` (`lab/experiments/<kind>/`).
pub(crate) mod collectives;
mod ddp;
pub(crate) mod latency;
pub(crate) mod memory;
pub mod nccl;
pub(crate) mod p2p;
pub(crate) mod precision;
pub(crate) mod streams;
pub(crate) mod transfer;
mod verify;

use std::sync::Arc;

use cudarc::cublas::CudaBlas;
use cudarc::driver::sys::{self, CUdevice_attribute, CUevent_flags, CUmemPool_attribute};
use cudarc::driver::{
    CudaContext, CudaEvent, CudaFunction, CudaModule, CudaStream, DriverError, PushKernelArg, result,
};
use shared::lab::{ExperimentParams, RunResult};

pub use self::fault::{FAULT_VAR, Fault};
pub use self::probe::{MissingLibraries, answer_probe, availability};
use super::executor::{Executor, ExperimentError, PoolUsage, RunContext};

/// Kernels the experiments launch, compiled by NVRTC for the device at hand.
const KERNELS: &str = r#"
extern "C" __global__ void empty_kernel() {}
extern "C" __global__ void hold_kernel(long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
}
extern "C" __global__ void spin_kernel(long long cycles, unsigned long long* spun, unsigned int slot,
                                       unsigned int slots) {
    long long start = clock64();
    long long now = start;
    while (now - start < cycles) { now = clock64(); }
    if (threadIdx.x == 0 && slot < slots) { spun[slot] = (unsigned long long)(now - start); }
}
"#;

/// How long [`Session::hold`] spins: ~100 µs at an H200's 1.98 GHz, far more than submitting an event and a
/// copy takes the host (a few µs), far less than the runs' other costs.
const HOLD_CYCLES: i64 = 200_000;

/// A CUDA error as an experiment error naming the step.
pub(crate) fn cuda_err(what: &str) -> impl Fn(DriverError) -> ExperimentError + '_ {
    move |e| ExperimentError::Cuda(format!("{what}: {e}"))
}

/// Any displayable error from cuBLAS or NVRTC, naming the step.
pub(crate) fn lib_err<E: std::fmt::Debug>(what: &str) -> impl Fn(E) -> ExperimentError + '_ {
    move |e| ExperimentError::Cuda(format!("{what}: {e:?}"))
}

/// Everything the lab holds on one GPU while experiments run.
pub(crate) struct Session {
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    pub pool: sys::CUmemoryPool,
    module: Option<Arc<CudaModule>>,
    blas: Option<Arc<CudaBlas>>,
    /// A fault to inject (`gpudash bench` with [`FAULT_VAR`] only).
    pub fault: Option<Fault>,
}

impl Session {
    fn open(ordinal: usize) -> Result<Self, ExperimentError> {
        let ctx = CudaContext::new(ordinal).map_err(cuda_err("creating the CUDA context"))?;
        // SAFETY: experiments synchronize streams before a buffer is reused on another stream
        // and before it is freed, which is what cudarc's event tracking would otherwise ensure.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(cuda_err("creating a stream"))?;
        if !ctx.has_async_alloc() {
            return Err(ExperimentError::Cuda("this GPU has no stream-ordered allocator (cuMemAllocAsync)".into()));
        }
        // SAFETY: the device comes from a live context.
        let pool = unsafe { result::device::get_default_mem_pool(ctx.cu_device()) }
            .map_err(cuda_err("getting the device's memory pool"))?;
        let session = Self { ctx, stream, pool, module: None, blas: None, fault: None };
        // Keep freed blocks cached, as PyTorch's allocator does, until empty_cache.
        session.set_release_threshold(u64::MAX)?;
        Ok(session)
    }

    fn set_release_threshold(&self, bytes: u64) -> Result<(), ExperimentError> {
        let mut value = bytes;
        // SAFETY: the attribute takes a u64 that lives for the call.
        unsafe {
            result::mem_pool::set_attribute(
                self.pool,
                CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&raw mut value).cast(),
            )
        }
        .map_err(cuda_err("setting the pool's release threshold"))
    }

    fn attribute(&self, attribute: CUmemPool_attribute) -> Result<u64, ExperimentError> {
        let mut value: u64 = 0;
        // SAFETY: both attributes read are u64 values written into `value`.
        unsafe { result::mem_pool::get_attribute(self.pool, attribute, (&raw mut value).cast()) }
            .map_err(cuda_err("reading the pool's usage"))?;
        Ok(value)
    }

    pub fn usage(&self) -> Result<PoolUsage, ExperimentError> {
        Ok(PoolUsage {
            reserved: self.attribute(CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)?,
            used: self.attribute(CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT)?,
        })
    }

    /// Releases cached memory until the pool holds at most `keep` bytes.
    pub fn trim_to(&self, keep: u64) -> Result<(), ExperimentError> {
        self.stream.synchronize().map_err(cuda_err("synchronizing before trimming"))?;
        let keep = usize::try_from(keep).unwrap_or(usize::MAX);
        // SAFETY: the pool belongs to this session's live device.
        unsafe { result::mem_pool::trim_to(self.pool, keep) }.map_err(cuda_err("trimming the pool"))
    }

    /// A timing event recorded on `stream` now.
    pub fn record(&self, stream: &CudaStream) -> Result<CudaEvent, ExperimentError> {
        stream.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT)).map_err(cuda_err("recording an event"))
    }

    /// Queues a one-thread kernel that spins `HOLD_CYCLES` on the session's stream, so what the host queues
    /// next (an event, the timed operation, an event) waits behind it and the host's cost of submitting it
    /// stays outside the timed window, as nvbandwidth times its copies.
    pub fn hold(&self, hold: &CudaFunction) -> Result<(), ExperimentError> {
        let cfg = cudarc::driver::LaunchConfig { grid_dim: (1, 1, 1), block_dim: (1, 1, 1), shared_mem_bytes: 0 };
        let mut args = self.stream.launch_builder(hold);
        args.arg(&HOLD_CYCLES);
        // SAFETY: hold_kernel takes one long long and touches no memory.
        unsafe { args.launch(cfg) }.map(|_| ()).map_err(cuda_err("launching hold_kernel"))
    }

    pub fn sync(&self) -> Result<(), ExperimentError> {
        self.ctx.synchronize().map_err(cuda_err("synchronizing the device"))
    }

    /// A device attribute (`what` names it in an error), e.g. the L2 size in bytes.
    pub fn device_attribute(&self, attribute: CUdevice_attribute, what: &str) -> Result<u64, ExperimentError> {
        let value = self.ctx.attribute(attribute).map_err(|e| ExperimentError::Cuda(format!("reading {what}: {e}")))?;
        u64::try_from(value).map_err(|_| ExperimentError::Cuda(format!("reading {what}: the driver said {value}")))
    }

    /// The GPU's L2 cache in bytes (CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE).
    pub fn l2_bytes(&self) -> Result<u64, ExperimentError> {
        self.device_attribute(CUdevice_attribute::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "the L2 cache size")
    }

    /// An NVRTC-compiled kernel from [`KERNELS`] and the experiments' own sources, compiled once per session.
    pub fn kernel(&mut self, name: &str) -> Result<CudaFunction, ExperimentError> {
        let module = match &self.module {
            Some(m) => m.clone(),
            None => {
                let (major, minor) =
                    self.ctx.compute_capability().map_err(cuda_err("reading the compute capability"))?;
                let options = cudarc::nvrtc::CompileOptions {
                    options: vec![format!("--gpu-architecture=sm_{major}{minor}")],
                    ..Default::default()
                };
                let source = [KERNELS, verify::CHECK_KERNELS, copy_kernel::SOURCE, latency::SOURCE].concat();
                let ptx = cudarc::nvrtc::compile_ptx_with_opts(source, options).map_err(lib_err("NVRTC compile"))?;
                let module = self.ctx.load_module(ptx).map_err(cuda_err("loading the kernels"))?;
                self.module = Some(module.clone());
                module
            }
        };
        module.load_function(name).map_err(cuda_err("finding a kernel"))
    }

    /// cuBLAS bound to the session's stream.
    pub fn blas(&mut self) -> Result<Arc<CudaBlas>, ExperimentError> {
        if let Some(blas) = &self.blas {
            return Ok(blas.clone());
        }
        let blas = Arc::new(CudaBlas::new(self.stream.clone()).map_err(lib_err("creating the cuBLAS handle"))?);
        self.blas = Some(blas.clone());
        Ok(blas)
    }

    fn close(self) {
        let _ = self.sync();
        let _ = self.trim_to(0);
        let _ = self.set_release_threshold(0);
        drop(self.blas);
        drop(self.module);
        drop(self.stream);
        let device = self.ctx.cu_device();
        let last = Arc::strong_count(&self.ctx) == 1;
        drop(self.ctx);
        // Releasing our handle is not enough: cuBLAS carries the CUDA runtime, which retains the primary
        // context for itself, so it would stay alive with ~520 MiB of device memory listed under gpudash
        // (tests/gpu/ctx_release.py, docs/runs/lab/session17-ctx-release.log). This worker is the only
        // user of its GPU's context between runs, so the context is reset: the next run retains a fresh
        // one, and cuBLAS works in it.
        if last {
            // SAFETY: every handle of this session is dropped; the reset destroys only this process's
            // primary context on `device`, and a later release by the runtime is allowed after it.
            let rc = unsafe { sys::cuDevicePrimaryCtxReset_v2(device) };
            if rc != sys::cudaError_enum::CUDA_SUCCESS {
                tracing::warn!(?rc, "could not reset the CUDA context after releasing it");
            }
        } else {
            tracing::warn!("the CUDA context is still referenced after the lab released it; not reset");
        }
    }
}

/// The CUDA ordinal of the GPU with this NVML UUID ("GPU-xxxxxxxx-..."): the two APIs may order GPUs differently.
fn ordinal_for(uuid: &str, fallback: usize) -> usize {
    let Ok(count) = result::device::get_count() else { return fallback };
    (0..count)
        .find(|&i| {
            result::device::get(i)
                .and_then(result::device::get_uuid)
                .is_ok_and(|u| format_uuid(&u.bytes.map(|b| b as u8)).eq_ignore_ascii_case(uuid))
        })
        .and_then(|i| usize::try_from(i).ok())
        .unwrap_or(fallback)
}

/// CUDA's 16 UUID bytes the way NVML writes them.
fn format_uuid(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("GPU-{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

/// Runs experiments on one GPU through cudarc.
pub struct CudaExecutor {
    device: u32,
    uuid: Option<String>,
    /// Every GPU of the lab (NVML index, UUID), for p2p runs.
    gpus: Vec<(u32, String)>,
    session: Option<Session>,
    fault: Option<Fault>,
}

impl std::fmt::Debug for CudaExecutor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaExecutor").field("device", &self.device).field("open", &self.session.is_some()).finish()
    }
}

impl CudaExecutor {
    /// The executor for NVML's GPU `device`, matched to CUDA's numbering by `uuid` when given.
    /// Nothing is opened until the first run.
    pub fn new(device: u32, uuid: Option<String>) -> Self {
        Self { device, uuid, gpus: Vec::new(), session: None, fault: None }
    }

    /// Injects `fault` into the runs (`gpudash bench` alone does, from [`FAULT_VAR`]).
    #[must_use]
    pub fn with_fault(mut self, fault: Option<Fault>) -> Self {
        self.fault = fault;
        self
    }

    /// Knows the other GPUs too (NVML index, UUID), so p2p runs can open them.
    #[must_use]
    pub fn with_gpus(mut self, gpus: Vec<(u32, String)>) -> Self {
        self.gpus = gpus;
        self
    }

    fn session(&mut self) -> Result<&mut Session, ExperimentError> {
        if self.session.is_none() {
            result::init().map_err(cuda_err("initialising CUDA"))?;
            let fallback = self.device as usize;
            let ordinal = self.uuid.as_deref().map_or(fallback, |u| ordinal_for(u, fallback));
            let mut session = Session::open(ordinal)?;
            session.fault = self.fault;
            self.session = Some(session);
        }
        self.session.as_mut().ok_or_else(|| ExperimentError::Cuda("no CUDA session".into()))
    }
}

/// What an experiment's CUDA run is given (`Experiment::run_cuda`): this GPU's session, or every GPU.
pub struct Gpu<'a> {
    executor: &'a mut CudaExecutor,
    /// Whether the run used the session, so the executor synchronizes it after.
    opened: bool,
}

impl Gpu<'_> {
    /// This GPU's session (context, stream, pool, cuBLAS, kernels), opened at the first run and bound to
    /// this thread.
    pub(crate) fn session(&mut self, ctx: &RunContext<'_>) -> Result<&mut Session, ExperimentError> {
        if !self.opened {
            ctx.progress(0.0, "opening the CUDA context");
            let session = self.executor.session()?;
            session.ctx.bind_to_thread().map_err(cuda_err("binding the context"))?;
            self.opened = true;
        }
        self.executor.session()
    }

    /// Every GPU of the lab (NVML index, UUID), CUDA initialised: for runs that open contexts and buffers of
    /// their own on several GPUs, released at their end.
    pub(crate) fn all(&self) -> Result<&[(u32, String)], ExperimentError> {
        result::init().map_err(cuda_err("initialising CUDA"))?;
        Ok(&self.executor.gpus)
    }

    /// The fault this run injects (`gpudash bench` with [`FAULT_VAR`] only), for runs without a session.
    pub(crate) fn fault(&self) -> Option<Fault> {
        self.executor.fault
    }
}

impl Executor for CudaExecutor {
    fn simulated(&self) -> bool {
        false
    }

    fn run(&mut self, params: &ExperimentParams, ctx: &RunContext<'_>) -> Result<RunResult, ExperimentError> {
        let mut gpu = Gpu { executor: self, opened: false };
        let experiment = super::experiments::of(params).map_err(|e| ExperimentError::Invalid(e.to_string()))?;
        let result = experiment.run_cuda(params, &mut gpu, ctx);
        if gpu.opened
            && let Some(session) = &self.session
        {
            // Whatever happened, leave no work in flight before the next run or a release.
            let synced = session.sync();
            let result = result?;
            synced?;
            ctx.progress(1.0, "done");
            return Ok(result);
        }
        let result = result?;
        ctx.progress(1.0, "done");
        Ok(result)
    }

    fn pool(&mut self) -> Option<PoolUsage> {
        self.session.as_ref().and_then(|s| s.usage().ok())
    }

    fn empty_cache(&mut self) -> Result<(), ExperimentError> {
        match &self.session {
            Some(s) => s.trim_to(0),
            None => Ok(()),
        }
    }

    fn release(&mut self) {
        if let Some(session) = self.session.take() {
            session.close();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn uuids_print_like_nvml() {
        let bytes = [0x8c, 0x0a, 0x1b, 0x2c, 0x3d, 0x4e, 0x5f, 0x60, 0x71, 0x82, 0x93, 0xa4, 0xb5, 0xc6, 0xd7, 0xe8];
        assert_eq!(format_uuid(&bytes), "GPU-8c0a1b2c-3d4e-5f60-7182-93a4b5c6d7e8");
    }

    /// Without a driver the reason names libcuda and where to look; with one, libcuda loads,
    /// and where every library loads the driver counts at least one GPU.
    #[test]
    fn availability_names_what_is_missing_or_finds_a_gpu() {
        let driver = std::path::Path::new("/proc/driver/nvidia").exists();
        match availability() {
            Ok(()) => {
                let count = CudaContext::device_count().expect("every CUDA library loads, so the driver answers");
                assert!(count >= 1, "the libraries load but the driver counts {count} GPUs");
            }
            Err(missing) => {
                let reason = missing.to_string();
                assert!(reason.contains("LD_LIBRARY_PATH"), "{reason}");
                assert!(missing.missing.iter().all(|m| m.contains(" not found (tried ")), "{reason}");
                assert_eq!(
                    reason.contains("libcuda"),
                    !driver,
                    "libcuda is missing exactly where no NVIDIA driver is loaded: {reason}"
                );
            }
        }
    }
}
