//! Whole pages of the app: the dashboard, the GPU lab, the fleet, alerts, usage, jobs and (for admins) the audit log.

pub mod alerts;
pub mod audit;
pub mod dashboard;
pub mod fleet;
pub mod fleet_owners;
pub mod jobs;
pub mod lab;
pub mod login;
pub mod usage;

/// The page shown below the header, switched by the header's tabs and the URL's `#fragment`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    Dashboard,
    Lab,
    Fleet,
    Alerts,
    Usage,
    Jobs,
    Audit,
}

impl Tab {
    /// Every tab, in the header's order.
    pub const ALL: [Self; 7] =
        [Self::Dashboard, Self::Lab, Self::Fleet, Self::Alerts, Self::Usage, Self::Jobs, Self::Audit];

    /// The URL fragment and the tab button's id suffix (`#tab-lab`).
    pub fn key(self) -> &'static str {
        match self {
            Self::Dashboard => "dashboard",
            Self::Lab => "lab",
            Self::Fleet => "fleet",
            Self::Alerts => "alerts",
            Self::Usage => "usage",
            Self::Jobs => "jobs",
            Self::Audit => "audit",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::Dashboard => "Dashboard",
            Self::Lab => "Lab",
            Self::Fleet => "Fleet",
            Self::Alerts => "Alerts",
            Self::Usage => "Usage",
            Self::Jobs => "Jobs",
            Self::Audit => "Audit",
        }
    }

    /// The tab a URL fragment names; the dashboard for anything else.
    pub fn from_fragment(fragment: &str) -> Self {
        match fragment.trim_start_matches('#') {
            "lab" => Self::Lab,
            "fleet" => Self::Fleet,
            "alerts" => Self::Alerts,
            "usage" => Self::Usage,
            "jobs" => Self::Jobs,
            "audit" => Self::Audit,
            // The skip link's target is on the dashboard; anything else is too.
            _ => Self::Dashboard,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_name_tabs() {
        for tab in Tab::ALL {
            assert_eq!(Tab::from_fragment(&format!("#{}", tab.key())), tab);
        }
        assert_eq!(Tab::from_fragment(""), Tab::Dashboard);
        assert_eq!(Tab::from_fragment("#nonsense"), Tab::Dashboard);
    }
}
