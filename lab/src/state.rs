//! The state a lab's workers and its API share: the queue book, the pools, the
//! probe and store, and the channel events go out on.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use shared::lab::{ExperimentParams, LabDevice, LabEvent, LabStatus, Run};
use shared::topology::Topology;
use tokio::sync::broadcast;

use super::guards::{self, DeviceProbe};
use super::queue::QueueBook;
use super::setup::{LabConfig, LabGpu, LabHost, Unavailable};
use super::{executor, experiments};
use store::runs::RunStore;

/// Events a slow subscriber may fall behind before it should ask for a fresh status.
const EVENT_BACKLOG: usize = 256;

/// State the workers and the handlers share.
pub(crate) struct Shared {
    pub(super) config: LabConfig,
    /// Whether experiments can run here, or why not (e.g. "libcuda.so not found").
    pub(super) availability: Result<(), Unavailable>,
    pub(super) simulated: bool,
    pub(super) host: LabHost,
    pub(super) devices: Vec<LabGpu>,
    pub(super) probe: Arc<dyn DeviceProbe>,
    pub(super) store: Arc<dyn RunStore>,
    pub(super) topology: Option<Topology>,
    book: Mutex<QueueBook>,
    /// Held from the per-user count to the push, so simultaneous submits cannot pass the limit together.
    pub(super) admission: Mutex<()>,
    pools: Mutex<Vec<LabDevice>>,
    /// What the lab publishes: plain events, for `web/` to encode (and tests to read).
    events: broadcast::Sender<LabEvent>,
}

impl Shared {
    /// The shared state of a lab on `devices`, no run queued and no pool open.
    #[expect(clippy::too_many_arguments, reason = "the parts of a LabSetup, each needed")]
    pub(super) fn new(
        config: LabConfig,
        availability: Result<(), Unavailable>,
        simulated: bool,
        host: LabHost,
        devices: Vec<LabGpu>,
        probe: Arc<dyn DeviceProbe>,
        store: Arc<dyn RunStore>,
        topology: Option<Topology>,
    ) -> Self {
        let (events, _) = broadcast::channel(EVENT_BACKLOG);
        let pools = devices
            .iter()
            .map(|d| LabDevice { index: d.index, context_open: false, pool_reserved: 0, pool_used: 0, pending: 0 })
            .collect();
        Self {
            config,
            availability,
            simulated,
            host,
            devices,
            probe,
            store,
            topology,
            book: Mutex::default(),
            admission: Mutex::default(),
            pools: Mutex::new(pools),
            events,
        }
    }

    pub(super) fn subscribe(&self) -> broadcast::Receiver<LabEvent> {
        self.events.subscribe()
    }

    pub(super) fn book(&self) -> MutexGuard<'_, QueueBook> {
        base::sync::lock(&self.book)
    }

    pub(super) fn pools(&self) -> MutexGuard<'_, Vec<LabDevice>> {
        base::sync::lock(&self.pools)
    }

    /// The status with a bounded queue ([`shared::lab::QUEUE_LISTED`] waiting runs at most).
    pub(crate) fn status(&self) -> LabStatus {
        let book = self.book();
        let queue = book.listed(shared::lab::QUEUE_LISTED);
        let queue_total = count(book.total());
        let pending: Vec<u32> = self.devices.iter().map(|d| count(book.pending_on(d.index))).collect();
        drop(book);
        let mut devices = self.pools().clone();
        for (device, pending) in devices.iter_mut().zip(pending) {
            device.pending = pending;
        }
        LabStatus {
            available: self.availability.is_ok(),
            reason: self.availability.as_ref().err().map(ToString::to_string),
            simulated: self.simulated,
            devices,
            queue,
            queue_total,
            queue_per_user: count(self.config.queue_per_user),
            time_limit_ms: millis(self.config.time_limit),
            idle_release_ms: millis(self.config.idle_release),
        }
    }

    /// The host-memory guard for `run` against the runs running now; `book` is held so the check and
    /// marking the run running are one step.
    pub(crate) fn check_host(&self, book: &QueueBook, run: &Run) -> Result<Option<String>, guards::Refusal> {
        let others = book.host_bytes_running(Some(run.summary.id));
        let footprint = experiments::footprint(&run.params).map_err(|e| guards::Refusal(e.0))?;
        guards::check_host_memory(&footprint, self.probe.host_memory(), others, self.config.host_margin)
    }

    pub(crate) fn emit(&self, event: LabEvent) {
        // Nobody listening is normal.
        let _ = self.events.send(event);
    }

    pub(crate) fn emit_status(&self) {
        self.emit(LabEvent::Status(self.status()));
    }

    pub(crate) fn save(&self, run: &Run) {
        if let Err(e) = self.store.save(run) {
            tracing::error!(run = run.summary.id, "{e}");
        }
    }

    pub(crate) fn set_pool(&self, device: u32, pool: Option<executor::PoolUsage>) {
        if let Some(d) = self.pools().iter_mut().find(|d| d.index == device) {
            d.context_open = pool.is_some();
            d.pool_reserved = pool.map_or(0, |p| p.reserved);
            d.pool_used = pool.map_or(0, |p| p.used);
        }
    }

    /// Notes a finished run gets from how the GPUs connect (p2p: each pair's link).
    pub(crate) fn link_notes(&self, params: &ExperimentParams) -> Vec<String> {
        let Some(topology) = &self.topology else { return Vec::new() };
        experiments::of(params).map(|e| e.topology_notes(params, topology)).unwrap_or_default()
    }

    pub(crate) fn pool_of(&self, device: u32) -> Option<LabDevice> {
        self.pools().iter().find(|d| d.index == device).cloned()
    }
}

pub(super) fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
