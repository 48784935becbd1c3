//! The Lab's runs in a worker process: each GPU's experiments run in a child of the gpudash binary
//! ([`child`]), started at the first run on that GPU and ended at the Lab's idle release, so what
//! CUDA, cuBLAS and NVRTC load (hundreds of MiB) leaves with it, a crash in a CUDA library ends the
//! run and not the dashboard, and CUDA runs as an unprivileged user when the dashboard is root
//! ([`user`]). [`parent::WorkerExecutor`] is the dashboard's [`Executor`](super::executor::Executor)
//! for it; the two speak the framed protocol of [`protocol`].

mod child;
mod parent;
pub mod protocol;
mod user;
mod writer;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

pub use self::child::{FAULT_VAR, WORKER_VAR, is_worker, serve};
pub use self::parent::{GRACE, WorkerExecutor};
pub use self::protocol::Engine;
pub use self::user::{RunAs, UnknownUser, lab_user, look_up};
use super::executor::Executor;

/// How a lab starts its workers: shared by every GPU's executor.
#[derive(Debug, Clone)]
pub struct Launch {
    /// The gpudash binary (the dashboard's own).
    pub binary: PathBuf,
    /// Who the workers run as; `None` keeps the dashboard's user.
    pub user: Option<RunAs>,
    /// Workers still to start with [`FAULT_VAR`]`=abort` (tests).
    aborts_left: Arc<AtomicUsize>,
    /// Workers still to start with [`FAULT_VAR`]`=chatter` (tests).
    chatters_left: Arc<AtomicUsize>,
}

impl Launch {
    /// Workers of `binary` as `user`; the first `aborts` of them abort halfway through their first run.
    pub fn new(binary: PathBuf, user: Option<RunAs>, aborts: usize) -> Self {
        Self { binary, user, aborts_left: Arc::new(AtomicUsize::new(aborts)), chatters_left: Arc::default() }
    }

    /// The first `chatters` workers send progress every 5 ms from their first run on and never end it,
    /// deaf to cancel and to their time limit (tests of the dashboard's own limit).
    #[must_use]
    pub fn with_chatters(self, chatters: usize) -> Self {
        self.chatters_left.store(chatters, Ordering::Relaxed);
        self
    }

    /// The fault the worker starting now gets, if any (counting it): "abort" or "chatter".
    fn take_fault(&self) -> Option<&'static str> {
        let take =
            |left: &AtomicUsize| left.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok();
        if take(&self.aborts_left) {
            Some("abort")
        } else if take(&self.chatters_left) {
            Some("chatter")
        } else {
            None
        }
    }
}

/// Makes each GPU's [`WorkerExecutor`]: `gpus` are every GPU (NVML index, UUID), `engine` what the
/// workers run on.
pub fn executors(
    launch: Launch,
    gpus: Vec<(u32, String)>,
    engine: Engine,
) -> impl Fn(u32) -> Box<dyn Executor> + Send + Sync {
    // Read in the dashboard (`--nccl-lib`), loaded in the worker.
    let nccl_library = super::cuda::nccl::chosen_library();
    move |device| {
        let uuid = gpus.iter().find(|(i, _)| *i == device).map(|(_, u)| u.clone());
        let start = protocol::Start {
            device,
            uuid,
            gpus: gpus.clone(),
            engine: engine.clone(),
            nccl_library: nccl_library.clone(),
        };
        Box::new(WorkerExecutor::new(launch.clone(), start)) as Box<dyn Executor>
    }
}
