//! The process table's filter: by user, by GPU, or both. The dashboard provides it as context
//! (an `RwSignal<ProcessFilter>`), so "Who uses what", "Free: GPU n" and the overview's rows can
//! set it and the one process table follows.

use shared::processes::GpuProcess;

/// Which processes the table shows; the default shows all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessFilter {
    /// A user's name as "who uses what" writes it (`shared::processes::UNKNOWN_USER` for an unknown owner).
    pub user: Option<String>,
    /// A GPU's index.
    pub gpu: Option<u32>,
    /// A workload's short name (`shared::workload::short_name`: a container, `NS/POD`, "job N").
    pub workload: Option<String>,
}

impl ProcessFilter {
    /// Only `user`'s processes, on any GPU.
    pub fn user(user: &str) -> Self {
        Self { user: Some(user.to_owned()), ..Self::default() }
    }

    /// Only GPU `index`'s processes, whoever runs them.
    pub fn gpu(index: u32) -> Self {
        Self { gpu: Some(index), ..Self::default() }
    }

    /// Only the processes of the workload called `name`.
    pub fn workload(name: &str) -> Self {
        Self { workload: Some(name.to_owned()), ..Self::default() }
    }

    /// Shows every process.
    pub fn is_empty(&self) -> bool {
        self.user.is_none() && self.gpu.is_none() && self.workload.is_none()
    }

    /// Whether `process` passes. A process the server redacted has no user to match.
    pub fn matches(&self, process: &GpuProcess) -> bool {
        let user_ok = self.user.as_deref().is_none_or(|user| !process.redacted && process.user_name() == user);
        let gpu_ok = self.gpu.is_none_or(|gpu| process.device == gpu);
        let workload_ok = self.workload.as_deref().is_none_or(|name| {
            !process.redacted
                && process.workload.as_ref().and_then(shared::workload::short_name).as_deref() == Some(name)
        });
        user_ok && gpu_ok && workload_ok
    }

    /// "GPU 3", "ana", "ana on GPU 3": what the table is filtered by, for its caption.
    pub fn describe(&self) -> Option<String> {
        let place = match (&self.user, self.gpu) {
            (None, None) => None,
            (Some(user), None) => Some(user.clone()),
            (None, Some(gpu)) => Some(format!("GPU {gpu}")),
            (Some(user), Some(gpu)) => Some(format!("{user} on GPU {gpu}")),
        };
        match (place, &self.workload) {
            (place, None) => place,
            (None, Some(workload)) => Some(workload.clone()),
            (Some(place), Some(workload)) => Some(format!("{workload}, {place}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn process(device: u32, user: Option<&str>, redacted: bool) -> GpuProcess {
        GpuProcess { user: user.map(str::to_owned), redacted, ..shared::testing::process(device, 1) }
    }

    #[test]
    fn filters_by_user_gpu_or_both() {
        let ana0 = process(0, Some("ana"), false);
        let bo1 = process(1, Some("bo"), false);
        let nobody1 = process(1, None, false);
        let hidden1 = process(1, None, true);
        let all = ProcessFilter::default();
        assert!(all.is_empty() && [&ana0, &bo1, &nobody1, &hidden1].iter().all(|p| all.matches(p)));
        assert!(ProcessFilter::user("ana").matches(&ana0) && !ProcessFilter::user("ana").matches(&bo1));
        assert!(ProcessFilter::user("unknown").matches(&nobody1), "as who uses what names an unknown owner");
        assert!(!ProcessFilter::user("unknown").matches(&hidden1), "a redacted process names no one");
        assert!(ProcessFilter::gpu(1).matches(&hidden1) && !ProcessFilter::gpu(1).matches(&ana0));
        let both = ProcessFilter { user: Some("bo".into()), gpu: Some(0), workload: None };
        assert!(!both.matches(&bo1) && !both.matches(&ana0));
        assert_eq!(both.describe().as_deref(), Some("bo on GPU 0"));
        assert_eq!(ProcessFilter::gpu(3).describe().as_deref(), Some("GPU 3"));
        assert_eq!(all.describe(), None);
    }
}
