//! Whole pages of the app: the dashboard, the GPU lab, the fleet and (for admins) the audit log.

pub mod audit;
pub mod dashboard;
pub mod fleet;
pub mod lab;
pub mod login;

/// The page shown below the header, switched by the header's tabs and the URL's `#fragment`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tab {
    Dashboard,
    Lab,
    Fleet,
    Audit,
}

impl Tab {
    /// The URL fragment and the tab button's id suffix (`#tab-lab`).
    pub fn key(self) -> &'static str {
        match self {
            Self::Dashboard => "dashboard",
            Self::Lab => "lab",
            Self::Fleet => "fleet",
            Self::Audit => "audit",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Self::Dashboard => "Dashboard",
            Self::Lab => "Lab",
            Self::Fleet => "Fleet",
            Self::Audit => "Audit",
        }
    }

    /// The tab a URL fragment names; the dashboard for anything else.
    pub fn from_fragment(fragment: &str) -> Self {
        match fragment.trim_start_matches('#') {
            "lab" => Self::Lab,
            "fleet" => Self::Fleet,
            "audit" => Self::Audit,
            _ => Self::Dashboard,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fragments_name_tabs() {
        for tab in [Tab::Dashboard, Tab::Lab, Tab::Fleet, Tab::Audit] {
            assert_eq!(Tab::from_fragment(&format!("#{}", tab.key())), tab);
        }
        assert_eq!(Tab::from_fragment(""), Tab::Dashboard);
        assert_eq!(Tab::from_fragment("#nonsense"), Tab::Dashboard);
    }
}
