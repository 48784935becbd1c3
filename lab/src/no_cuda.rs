//! The Lab's `cuda` module in a build without the `cuda` feature (`cargo build -p gpudash
//! --no-default-features`: a dashboard without cudarc, whose Lab runs on simulated GPUs only): the same names the rest of the
//! crate and the server call, each saying CUDA is not built in. Experiments then run only on
//! simulated GPUs; on real ones the Lab says why it is unavailable, as it does without the libraries.

use std::process::ExitCode;

use shared::lab::{ExperimentParams, RunResult};

use crate::executor::{Executor, ExperimentError, PoolUsage, RunContext};

#[path = "cuda/fault.rs"]
mod fault;

pub use self::fault::{FAULT_VAR, Fault};

/// Why runs on real GPUs are refused in this build.
const NOT_BUILT: &str = "this gpudash was built without CUDA (the lab crate's `cuda` feature); \
                         build it with default features to run experiments on the GPUs";

/// Why the lab cannot run on the GPUs: here, that CUDA is not built in.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .missing.join(", "))]
pub struct MissingLibraries {
    pub missing: Vec<String>,
}

/// This binary answers no library probe.
pub fn answer_probe() -> Option<ExitCode> {
    None
}

/// Always the refusal: no CUDA in this build.
pub fn availability() -> Result<(), MissingLibraries> {
    Err(MissingLibraries { missing: vec![NOT_BUILT.to_owned()] })
}

/// An executor that refuses every run (the Lab worker process makes one when told to run CUDA).
#[derive(Debug)]
pub struct CudaExecutor;

impl CudaExecutor {
    pub fn new(_device: u32, _uuid: Option<String>) -> Self {
        Self
    }

    #[must_use]
    pub fn with_fault(self, _fault: Option<Fault>) -> Self {
        self
    }

    #[must_use]
    pub fn with_gpus(self, _gpus: Vec<(u32, String)>) -> Self {
        self
    }
}

impl Executor for CudaExecutor {
    fn simulated(&self) -> bool {
        false
    }

    fn run(&mut self, _params: &ExperimentParams, _ctx: &RunContext<'_>) -> Result<RunResult, ExperimentError> {
        Err(ExperimentError::Cuda(NOT_BUILT.to_owned()))
    }

    fn pool(&mut self) -> Option<PoolUsage> {
        None
    }

    fn empty_cache(&mut self) -> Result<(), ExperimentError> {
        Ok(())
    }

    fn release(&mut self) {}
}

/// NCCL, which this build does not load.
pub mod nccl {
    use std::path::PathBuf;

    /// NCCL could not be loaded: here, because CUDA is not built in.
    #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
    #[error("{}", .tried.join("; "))]
    pub struct NcclMissing {
        pub tried: Vec<String>,
    }

    /// Nothing to choose in this build.
    pub fn choose_library(_path: PathBuf) {}

    /// No library was chosen.
    pub fn chosen_library() -> Option<PathBuf> {
        None
    }

    pub fn availability() -> Result<String, NcclMissing> {
        Err(NcclMissing { tried: vec![format!("NCCL (libnccl.so.2) not loaded: {}", super::NOT_BUILT)] })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_way_in_says_cuda_is_not_built_in() {
        let said = availability().unwrap_err().to_string();
        assert!(said.starts_with("this gpudash was built without CUDA"), "{said}");
        assert!(nccl::availability().unwrap_err().to_string().contains("built without CUDA"));
        assert_eq!(answer_probe(), None);
        let mut executor = CudaExecutor::new(0, None).with_gpus(Vec::new()).with_fault(None);
        assert_eq!(executor.pool(), None);
        assert!(!executor.simulated());
    }
}
