//! The GPU lab's wire types: experiment parameters, runs, results and the
//! events pushed over `/ws` while experiments queue and run.
//!
//! A request names its experiment and carries its parameters as JSON, which the
//! lab reads: a client may send only what it changes. Bytes are `u64`, times ms
//! since the epoch, durations `f64` milliseconds unless a field says otherwise.
//!
//! By topic: [`params`] (requests and parameters), [`results`] (runs and what
//! they measured), [`events`] (status, queue and WebSocket events), [`form`] (an experiment's form,
//! as the lab describes it); every type
//! is re-exported here, so `shared::lab::X` names each.

pub mod events;
pub mod form;
pub mod params;
pub mod results;

pub use events::{ExperimentInfo, LabDevice, LabEvent, LabStatus, QUEUE_LISTED, QueueEntry, TrimOutcome};
pub use form::{Choice, FieldSpec, Input};
pub use params::{BadExperimentName, ExperimentKind, ExperimentParams, RunRequest};
pub use results::{
    ChartSpec, Check, Figure, HIDDEN_REQUESTER, Matrix, MemoryStep, Point, Progress, ReferenceLine, Run, RunCheck,
    RunEnvironment, RunPlan, RunResult, RunStatus, RunSummary, Series, Stats, TimelineSpan, gpus_label,
};
