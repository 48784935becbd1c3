//! Why a process counts as idle: the marks a process carries ([`IdleHold`]) and the reading that
//! said so ([`IdleSignal`]). Apart from `activity` (which rates GPUs over processes) so that
//! `processes` can carry the mark without importing `activity` back.

use serde::{Deserialize, Serialize};

/// Which reading said a process is idle.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum IdleSignal {
    /// The GPU's SM activity (GPM) stayed below 1 %.
    SmActivity,
    /// Without GPM: the process's own SM utilization (NVML per-process samples),
    /// and the GPU's utilization when NVML has no sample for the process.
    ProcessSmUtil,
}

impl IdleSignal {
    /// How the page and `/api/processes` name it.
    pub fn as_str(self) -> &'static str {
        match self {
            IdleSignal::SmActivity => "sm_activity",
            IdleSignal::ProcessSmUtil => "process_sm_util",
        }
    }

    /// A phrase for a tooltip.
    pub fn describe(self) -> &'static str {
        match self {
            IdleSignal::SmActivity => "the GPU's SM activity (GPM) stayed below 1%",
            IdleSignal::ProcessSmUtil => "no SM use by the process (NVML per-process samples) and GPU util below 1%",
        }
    }
}

/// A process that holds device memory while its GPU does nothing.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdleHold {
    /// Since when it has held memory without computing, ms since the Unix epoch.
    pub since_ms: u64,
    pub signal: IdleSignal,
}
