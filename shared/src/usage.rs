//! Usage accounting on the wire (`GET /api/usage`): who used how much GPU time, memory and
//! energy over a range, and the query rules that the server and the page both check.
//! How the figures are charged is in docs/ACCOUNTING.md.

use serde::{Deserialize, Serialize};

/// The longest range one query may span: a year (a leap year's days).
pub const MAX_RANGE_MS: u64 = 366 * DAY_MS;
/// One day, ms: the width of a `day` row.
pub const DAY_MS: u64 = 24 * 3600 * 1000;
/// The furthest a zone is from UTC, minutes either way (UTC−14:00 to UTC+14:00 covers the world).
pub const MAX_UTC_OFFSET_MIN: i32 = 14 * 60;
/// Who a process ran as when nobody could tell (the process hid its user, or it was redacted).
pub const UNKNOWN_USER: &str = "unknown";
/// Every user, merged, as an anonymous viewer of a server with tokens sees them.
pub const HIDDEN_USER: &str = "(hidden)";

/// How rows are grouped.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum UsageGroup {
    /// One row per user.
    User,
    /// One row per GPU.
    Gpu,
    /// One row per day (the query's time zone).
    Day,
    /// One row per user and GPU.
    UserGpu,
    /// One row per user and day (the page's stacked chart).
    UserDay,
    /// One row per container (by name); processes outside containers in one row without a name.
    Container,
    /// One row per Kubernetes pod (`NAMESPACE/NAME`).
    Pod,
    /// One row per Kubernetes namespace.
    Namespace,
    /// One row per Slurm job.
    Job,
}

impl UsageGroup {
    pub const ALL: [UsageGroup; 9] = [
        UsageGroup::User,
        UsageGroup::Gpu,
        UsageGroup::Day,
        UsageGroup::UserGpu,
        UsageGroup::UserDay,
        UsageGroup::Container,
        UsageGroup::Pod,
        UsageGroup::Namespace,
        UsageGroup::Job,
    ];

    /// The name in `group=`.
    pub fn name(self) -> &'static str {
        match self {
            UsageGroup::User => "user",
            UsageGroup::Gpu => "gpu",
            UsageGroup::Day => "day",
            UsageGroup::UserGpu => "user_gpu",
            UsageGroup::UserDay => "user_day",
            UsageGroup::Container => "container",
            UsageGroup::Pod => "pod",
            UsageGroup::Namespace => "namespace",
            UsageGroup::Job => "job",
        }
    }

    /// The workload part rows are grouped by, for the workload groups.
    pub fn workload_part(self) -> Option<crate::workload::Part> {
        use crate::workload::Part;
        match self {
            UsageGroup::Container => Some(Part::Container),
            UsageGroup::Pod => Some(Part::Pod),
            UsageGroup::Namespace => Some(Part::Namespace),
            UsageGroup::Job => Some(Part::Job),
            _ => None,
        }
    }

    /// Whether rows carry a user (and so must be redacted for anonymous viewers).
    pub fn has_user(self) -> bool {
        matches!(self, UsageGroup::User | UsageGroup::UserGpu | UsageGroup::UserDay)
    }

    pub fn has_gpu(self) -> bool {
        matches!(self, UsageGroup::Gpu | UsageGroup::UserGpu)
    }

    pub fn has_day(self) -> bool {
        matches!(self, UsageGroup::Day | UsageGroup::UserDay)
    }
}

/// One row of `GET /api/usage`: the group's keys, then the four sums.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct UsageRow {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    /// Start of the day in the query's time zone, ms since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub day: Option<u64>,
    /// The container, pod (`NS/NAME`), namespace or Slurm job id of the workload groups; `None`
    /// in such a group for what ran outside one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    /// Time with a process on the GPU, split between users by SM share.
    pub gpu_hours: f64,
    /// Device memory held × time.
    pub memory_gib_hours: f64,
    /// Device memory held while the GPU did no work × time.
    pub idle_gib_hours: f64,
    /// The GPU's energy while it ran the user's processes, split like `gpu_hours`.
    pub energy_kwh: f64,
}

/// Body of `GET /api/usage`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct UsageResponse {
    pub from: u64,
    pub to: u64,
    pub group: UsageGroup,
    /// Minutes east of UTC of the zone whose days `day` rows follow (0: UTC days).
    #[serde(default)]
    pub utc_offset: i32,
    /// The figures come from simulated GPUs.
    pub simulated: bool,
    /// False with `--no-history`: the sums live in memory and a restart forgets them.
    pub persistent: bool,
    /// Largest `gpu_hours` first (rows with a day: oldest day first).
    pub rows: Vec<UsageRow>,
}

/// A valid usage query: `from` < `to`, at most [`MAX_RANGE_MS`] apart, days in a zone at most
/// [`MAX_UTC_OFFSET_MIN`] from UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UsageQuery {
    pub from: u64,
    pub to: u64,
    pub group: UsageGroup,
    /// Minutes east of UTC of the zone whose midnights start the days (the viewer's: 60 for
    /// UTC+1, −300 for UTC−5). One offset for the whole range: a daylight-saving change inside it
    /// moves that day's edge by the hour.
    pub utc_offset: i32,
}

/// Why a usage query was refused; each message says what is allowed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageQueryError {
    #[error("'{0}' is required: ms since the epoch, e.g. {0}=1767225600000")]
    Missing(&'static str),
    #[error("'{name}' must be a whole number of ms since the epoch, not '{value}'")]
    NotANumber { name: &'static str, value: String },
    #[error("'from' ({from}) must be before 'to' ({to})")]
    Backwards { from: u64, to: u64 },
    #[error("the range spans {days} days; one query may span at most 366 days")]
    TooLong { days: u64 },
    #[error(
        "'{0}' is not a group; the groups are user (or owner), gpu, day, user_gpu, user_day, container, pod, namespace and job"
    )]
    UnknownGroup(String),
    #[error(
        "'utc_offset' must be whole minutes east of UTC from -840 to 840 (60 for UTC+1, -300 for UTC-5), not '{0}'"
    )]
    BadOffset(String),
}

impl UsageQuery {
    /// Checks the query string's values (`group` defaults to `user`, `utc_offset` to 0).
    pub fn parse(
        from: Option<&str>,
        to: Option<&str>,
        group: Option<&str>,
        utc_offset: Option<&str>,
    ) -> Result<Self, UsageQueryError> {
        let number = |name: &'static str, value: Option<&str>| {
            let value = value.ok_or(UsageQueryError::Missing(name))?;
            value.trim().parse::<u64>().map_err(|_| UsageQueryError::NotANumber { name, value: value.to_owned() })
        };
        let group = match group {
            // "owner" is what the page calls a user: the owner rule's name (shared::workload).
            None | Some("owner") => UsageGroup::User,
            Some(name) => UsageGroup::ALL
                .into_iter()
                .find(|g| g.name() == name)
                .ok_or_else(|| UsageQueryError::UnknownGroup(name.to_owned()))?,
        };
        let (from, to) = (number("from", from)?, number("to", to)?);
        let utc_offset = match utc_offset {
            None => 0,
            Some(text) => text.trim().parse::<i32>().map_err(|_| UsageQueryError::BadOffset(text.to_owned()))?,
        };
        Self::new(from, to, group, utc_offset)
    }

    /// Checks a range the caller already holds as numbers.
    pub fn new(from: u64, to: u64, group: UsageGroup, utc_offset: i32) -> Result<Self, UsageQueryError> {
        if !(-MAX_UTC_OFFSET_MIN..=MAX_UTC_OFFSET_MIN).contains(&utc_offset) {
            return Err(UsageQueryError::BadOffset(utc_offset.to_string()));
        }
        if from >= to {
            return Err(UsageQueryError::Backwards { from, to });
        }
        if to - from > MAX_RANGE_MS {
            return Err(UsageQueryError::TooLong { days: (to - from).div_ceil(DAY_MS) });
        }
        Ok(Self { from, to, group, utc_offset })
    }

    /// The query string of this query, for `/api/usage` and `/api/usage.csv`.
    pub fn query_string(&self) -> String {
        format!("from={}&to={}&group={}&utc_offset={}", self.from, self.to, self.group.name(), self.utc_offset)
    }
}

fn offset_ms(utc_offset: i32) -> i64 {
    i64::from(utc_offset) * 60_000
}

/// The start (ms since the epoch) of the day that holds `ms` in the zone `utc_offset` minutes
/// east of UTC: its local midnight.
pub fn day_of(ms: u64, utc_offset: i32) -> u64 {
    let local = i64::try_from(ms).unwrap_or(i64::MAX) + offset_ms(utc_offset);
    u64::try_from(local - local.rem_euclid(DAY_MS as i64) - offset_ms(utc_offset)).unwrap_or(0)
}

/// `YYYY-MM-DD` of the day that holds `ms` in the zone `utc_offset` minutes east of UTC (the
/// CSV's and the chart's day labels).
pub fn date(ms: u64, utc_offset: i32) -> String {
    crate::time::date(ms, utc_offset)
}

/// The local midnight of a `YYYY-MM-DD` date in the zone `utc_offset` minutes east of UTC.
pub fn parse_date(text: &str, utc_offset: i32) -> Option<u64> {
    crate::time::parse_date(text, utc_offset)
}

/// `YYYY-MM-DD` of the UTC day that holds `ms`.
pub fn utc_date(ms: u64) -> String {
    crate::time::date(ms, 0)
}

/// Midnight UTC of a `YYYY-MM-DD` date (years 1970 to 9999), ms since the epoch.
pub fn parse_utc_date(text: &str) -> Option<u64> {
    crate::time::parse_date(text, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_good_query_parses_and_group_defaults_to_user() {
        let q = UsageQuery::parse(Some("1000"), Some("2000"), None, None).unwrap();
        assert_eq!((q.from, q.to, q.group), (1000, 2000, UsageGroup::User));
        assert_eq!(q.utc_offset, 0);
        let q = UsageQuery::parse(Some("0"), Some("1"), Some("user_gpu"), Some("-300")).unwrap();
        assert_eq!((q.group, q.utc_offset), (UsageGroup::UserGpu, -300));
        assert_eq!(q.query_string(), "from=0&to=1&group=user_gpu&utc_offset=-300");
    }

    #[test]
    fn bad_queries_say_what_is_allowed() {
        fn err(f: Option<&str>, t: Option<&str>, g: Option<&str>) -> String {
            UsageQuery::parse(f, t, g, None).unwrap_err().to_string()
        }
        let offset = |o: &str| UsageQuery::parse(Some("0"), Some("1"), None, Some(o)).map(|q| q.utc_offset);
        for bad in ["841", "-841", "1.5", "UTC+1", ""] {
            let message = offset(bad).unwrap_err().to_string();
            assert!(message.contains("from -840 to 840") && message.contains(&format!("not '{bad}'")), "{message}");
        }
        assert_eq!((offset("840"), offset("-840"), offset(" 330 ")), (Ok(840), Ok(-840), Ok(330)));
        assert!(err(None, Some("1"), None).contains("'from' is required"));
        assert!(err(Some("1"), None, None).contains("'to' is required"));
        assert!(err(Some("x"), Some("1"), None).contains("not 'x'"));
        assert!(err(Some("2"), Some("1"), None).contains("must be before"));
        assert!(err(Some("1"), Some("1"), None).contains("must be before"));
        assert!(err(Some("0"), Some(&(MAX_RANGE_MS + 1).to_string()), None).contains("at most 366 days"));
        assert!(
            err(Some("0"), Some("1"), Some("week"))
                .contains("gpu, day, user_gpu, user_day, container, pod, namespace and job")
        );
        let owner = UsageQuery::parse(Some("0"), Some("1"), Some("owner"), None).unwrap();
        assert_eq!(owner.group, UsageGroup::User, "'owner' is the user group");
        assert_eq!(UsageQuery::parse(Some("0"), Some("1"), Some("job"), None).unwrap().group, UsageGroup::Job);
        assert!(UsageQuery::parse(Some("0"), Some(&MAX_RANGE_MS.to_string()), None, None).is_ok());
    }

    #[test]
    fn dates_read_and_write_utc_days() {
        assert_eq!(utc_date(0), "1970-01-01");
        assert_eq!(utc_date(20_423 * DAY_MS + 5), "2025-12-01");
        assert_eq!(utc_date(19_416 * DAY_MS), "2023-02-28");
        assert_eq!(parse_utc_date("2025-12-01"), Some(20_423 * DAY_MS));
        assert_eq!(parse_utc_date("2024-02-29").map(utc_date).as_deref(), Some("2024-02-29"));
        for bad in ["2025-13-01", "2023-02-29", "1969-12-31", "yesterday", "2025-1"] {
            assert_eq!(parse_utc_date(bad), None, "{bad}");
        }
    }

    #[test]
    fn days_start_at_utc_midnight() {
        assert_eq!(day_of(DAY_MS + 5, 0), DAY_MS);
        assert_eq!(day_of(DAY_MS - 1, 0), 0);
    }

    #[test]
    fn days_start_at_the_zones_midnight() {
        const HOUR: u64 = 3_600_000;
        let monday = 20_423 * DAY_MS; // 2025-12-01 00:00 UTC
        // 23:30 UTC on Monday is already Tuesday in UTC+1 and still Monday in UTC−5.
        let late = monday + 23 * HOUR + HOUR / 2;
        assert_eq!(day_of(late, 60), monday + DAY_MS - HOUR, "Tuesday began at 23:00 UTC in UTC+1");
        assert_eq!(date(late, 60), "2025-12-02");
        assert_eq!(day_of(late, -300), monday + 5 * HOUR, "Monday began at 05:00 UTC in UTC−5");
        assert_eq!(date(late, -300), "2025-12-01");
        // 02:00 UTC on Monday is still Sunday in UTC−5; India's half hour is kept.
        assert_eq!(date(monday + 2 * HOUR, -300), "2025-11-30");
        assert_eq!(day_of(monday + 2 * HOUR, 330), monday - 5 * HOUR - HOUR / 2);
        for offset in [-840, -300, 0, 330, 840] {
            let midnight = parse_date("2025-12-01", offset).unwrap();
            assert_eq!(date(midnight, offset), "2025-12-01");
            assert_eq!(day_of(midnight, offset), midnight, "a midnight is its own day's start");
            assert_eq!(day_of(midnight - 1, offset), midnight - DAY_MS, "a ms before is the day before");
        }
        assert_eq!(day_of(0, 60), 0, "no day starts before the epoch");
    }
}
