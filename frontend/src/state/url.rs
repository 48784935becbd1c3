//! What the URL's `#fragment` holds, so that a reload or a shared link shows the same view:
//! `#dashboard?gpu=3&sort=memory:desc&range=1h`, `#lab?gpu=2&run=12`,
//! `#usage?range=custom&from=2026-12-01&to=2026-12-04&by=pod`. A bare `#lab` (the tabs' own
//! links) names only the tab. Every value read is checked: a bad one is left out (its default is
//! used), never an error; unknown names are ignored.

use std::collections::BTreeSet;

use shared::{
    history::{HistoryRange, Metric},
    usage::UsageGroup,
};

use crate::{
    components::process_sort::{Column, SortOrder},
    pages::Tab,
    state::{
        history::{RANK_BY, charted},
        process_filter::ProcessFilter,
    },
};

/// The most GPU cards a link opens (more is taken as a bad value).
const MAX_CARDS: usize = 256;
/// The longest user, owner or workload name read from a link.
const MAX_NAME: usize = 128;

/// How the overview shows the GPUs: chosen by their number, or as the reader picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// A table for a few GPUs, the compact grid for many (`overview::COMPACT_ABOVE`).
    #[default]
    Auto,
    Table,
    Grid,
}

impl Layout {
    pub fn key(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Table => "table",
            Self::Grid => "grid",
        }
    }

    fn from_key(key: &str) -> Option<Self> {
        [Self::Auto, Self::Table, Self::Grid].into_iter().find(|l| l.key() == key)
    }
}

/// The states the overview's filter offers, as the URL and the filter's `<select>` name them.
pub const STATE_FILTERS: [&str; 6] = ["free", "busy", "held-idle", "reserved", "unhealthy", "lost"];

/// The Usage tab's range choices, as the URL and the range `<select>` name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UsageSpan {
    Today,
    #[default]
    Week,
    Month,
    /// From the start of `UsageView::first` to the end of `UsageView::last`.
    Custom,
}

impl UsageSpan {
    pub const ALL: [Self; 4] = [Self::Today, Self::Week, Self::Month, Self::Custom];

    pub fn key(self) -> &'static str {
        match self {
            Self::Today => "today",
            Self::Week => "7d",
            Self::Month => "30d",
            Self::Custom => "custom",
        }
    }

    pub fn from_key(key: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.key() == key)
    }
}

/// The groupings the Usage tab's workload table offers (`by=`).
pub const WORKLOAD_GROUPS: [UsageGroup; 4] =
    [UsageGroup::Container, UsageGroup::Pod, UsageGroup::Namespace, UsageGroup::Job];

/// What the Usage tab shows: its range and how the workload table groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageView {
    pub span: UsageSpan,
    /// A custom range's first and last days, `YYYY-MM-DD` in the viewer's zone (empty until picked).
    pub first: String,
    pub last: String,
    /// The workload table's grouping, one of `WORKLOAD_GROUPS`.
    pub by: UsageGroup,
}

impl Default for UsageView {
    fn default() -> Self {
        Self { span: UsageSpan::Week, first: String::new(), last: String::new(), by: UsageGroup::Container }
    }
}

/// What the Jobs tab shows: its filters and the job opened (`#jobs?owner=ana&runtime=slurm&state=ended&job=12`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct JobsView {
    pub owner: Option<String>,
    pub runtime: Option<shared::jobs::Runtime>,
    /// `Some(true)`: running only; `Some(false)`: ended only.
    pub running: Option<bool>,
    pub job: Option<u64>,
}

/// Everything a link restores. `Default` is the page as it first opens.
#[derive(Debug, Clone, PartialEq)]
pub struct UrlView {
    pub tab: Tab,
    /// Dashboard: the GPUs whose cards are open (`gpu=3,5`).
    pub cards: BTreeSet<u32>,
    /// Dashboard: the process table's filter (`user=`, `on=` a GPU, `workload=`).
    pub filter: ProcessFilter,
    /// Dashboard: the process table's order (`sort=memory:desc`).
    pub sort: SortOrder,
    /// Dashboard: the History range (`range=1h`) and the GPU drilled down to (`history=3`).
    pub range: HistoryRange,
    pub drill: Option<u32>,
    /// Dashboard: what ranks the History lines past eight GPUs (`lines=temperature`).
    pub rank: Metric,
    /// Dashboard: table or grid (`layout=grid`), and the overview's filter (`state=free`, `owner=ana`).
    pub layout: Layout,
    pub state: Option<String>,
    pub owner: Option<String>,
    /// Lab: the GPU picked (`gpu=2`) and the run shown (`run=12`).
    pub lab_gpu: Option<u32>,
    pub run: Option<u64>,
    /// Usage: the range (`range=30d`, or `range=custom&from=…&to=…`) and the workload grouping (`by=pod`).
    pub usage: UsageView,
    /// Jobs: the filters and the job opened.
    pub jobs: JobsView,
}

impl Default for UrlView {
    fn default() -> Self {
        Self {
            tab: Tab::Dashboard,
            cards: BTreeSet::new(),
            filter: ProcessFilter::default(),
            sort: SortOrder::default(),
            range: HistoryRange::FiveMinutes,
            drill: None,
            rank: RANK_BY,
            layout: Layout::Auto,
            state: None,
            owner: None,
            lab_gpu: None,
            run: None,
            usage: UsageView::default(),
            jobs: JobsView::default(),
        }
    }
}

impl UrlView {
    /// The fragment, with its `#`: only the current tab's values, and only those that differ from the default.
    pub fn encode(&self) -> String {
        let mut pairs: Vec<(&str, String)> = Vec::new();
        match self.tab {
            Tab::Dashboard => {
                if !self.cards.is_empty() {
                    pairs.push(("gpu", self.cards.iter().map(u32::to_string).collect::<Vec<_>>().join(",")));
                }
                pairs.extend(self.filter.user.clone().map(|u| ("user", u)));
                pairs.extend(self.filter.gpu.map(|g| ("on", g.to_string())));
                pairs.extend(self.filter.workload.clone().map(|w| ("workload", w)));
                if self.sort != SortOrder::default() {
                    let way = if self.sort.descending { "desc" } else { "asc" };
                    pairs.push(("sort", format!("{}:{way}", self.sort.column.key())));
                }
                if self.range != HistoryRange::FiveMinutes {
                    pairs.push(("range", self.range.key().to_owned()));
                }
                pairs.extend(self.drill.map(|g| ("history", g.to_string())));
                if self.rank != RANK_BY {
                    pairs.push(("lines", self.rank.name().to_owned()));
                }
                if self.layout != Layout::Auto {
                    pairs.push(("layout", self.layout.key().to_owned()));
                }
                pairs.extend(self.state.clone().map(|s| ("state", s)));
                pairs.extend(self.owner.clone().map(|o| ("owner", o)));
            }
            Tab::Lab => {
                pairs.extend(self.lab_gpu.map(|g| ("gpu", g.to_string())));
                pairs.extend(self.run.map(|r| ("run", r.to_string())));
            }
            Tab::Usage => {
                let usage = &self.usage;
                if usage.span != UsageSpan::default() {
                    pairs.push(("range", usage.span.key().to_owned()));
                }
                if usage.span == UsageSpan::Custom {
                    pairs.extend(
                        [("from", usage.first.clone()), ("to", usage.last.clone())]
                            .into_iter()
                            .filter(|(_, d)| !d.is_empty()),
                    );
                }
                if usage.by != UsageView::default().by {
                    pairs.push(("by", usage.by.name().to_owned()));
                }
            }
            Tab::Jobs => {
                let jobs = &self.jobs;
                pairs.extend(jobs.owner.clone().map(|o| ("owner", o)));
                pairs.extend(jobs.runtime.map(|r| ("runtime", r.name().to_owned())));
                pairs.extend(jobs.running.map(|r| ("state", if r { "running" } else { "ended" }.to_owned())));
                pairs.extend(jobs.job.map(|j| ("job", j.to_string())));
            }
            _ => {}
        }
        let query: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={}", escape(v))).collect();
        if query.is_empty() {
            format!("#{}", self.tab.key())
        } else {
            format!("#{}?{}", self.tab.key(), query.join("&"))
        }
    }

    /// The view a fragment names (with or without `#` and a leading `/`); defaults where it says
    /// nothing or something that cannot be.
    pub fn parse(fragment: &str) -> Self {
        let fragment = fragment.trim_start_matches('#').trim_start_matches('/');
        let (tab, query) = fragment.split_once('?').unwrap_or((fragment, ""));
        let mut view = Self { tab: Tab::from_fragment(tab), ..Self::default() };
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let Some(value) = unescape(value).filter(|v| !v.is_empty() && v.len() <= MAX_NAME) else { continue };
            view.read(key, &value);
        }
        view
    }

    /// One `key=value`, if the current tab has it and the value is good.
    fn read(&mut self, key: &str, value: &str) {
        let name = || Some(value.to_owned()).filter(|v| !v.chars().any(char::is_control));
        match (self.tab, key) {
            (Tab::Dashboard, "gpu") => self.cards = indexes(value).unwrap_or_default(),
            (Tab::Dashboard, "user") => self.filter.user = name(),
            (Tab::Dashboard, "on") => self.filter.gpu = value.parse().ok(),
            (Tab::Dashboard, "workload") => self.filter.workload = name(),
            (Tab::Dashboard, "sort") => self.sort = sort_order(value).unwrap_or_default(),
            (Tab::Dashboard, "range") => {
                self.range = HistoryRange::from_key(value).unwrap_or(HistoryRange::FiveMinutes);
            }
            (Tab::Dashboard, "history") => self.drill = value.parse().ok(),
            (Tab::Dashboard, "lines") => {
                self.rank = charted(value).unwrap_or(RANK_BY);
            }
            (Tab::Dashboard, "layout") => self.layout = Layout::from_key(value).unwrap_or_default(),
            (Tab::Dashboard, "state") => self.state = STATE_FILTERS.contains(&value).then(|| value.to_owned()),
            (Tab::Dashboard, "owner") => self.owner = name(),
            (Tab::Lab, "gpu") => self.lab_gpu = value.parse().ok(),
            (Tab::Lab, "run") => self.run = value.parse().ok(),
            (Tab::Usage, "range") => self.usage.span = UsageSpan::from_key(value).unwrap_or_default(),
            (Tab::Usage, "from") => self.usage.first = day(value).unwrap_or_default(),
            (Tab::Usage, "to") => self.usage.last = day(value).unwrap_or_default(),
            (Tab::Usage, "by") => {
                self.usage.by =
                    WORKLOAD_GROUPS.into_iter().find(|g| g.name() == value).unwrap_or(UsageGroup::Container);
            }
            (Tab::Jobs, "owner") => self.jobs.owner = name(),
            (Tab::Jobs, "runtime") => self.jobs.runtime = shared::jobs::Runtime::parse(value),
            (Tab::Jobs, "state") => {
                self.jobs.running = match value {
                    "running" => Some(true),
                    "ended" => Some(false),
                    _ => None,
                };
            }
            (Tab::Jobs, "job") => self.jobs.job = value.parse().ok().filter(|&id: &u64| id > 0),
            _ => {}
        }
    }
}

/// A `YYYY-MM-DD` day that exists (the Usage tab's custom range); `None` for anything else.
fn day(value: &str) -> Option<String> {
    (value.len() == 10 && shared::time::parse_date(value, 0).is_some()).then(|| value.to_owned())
}

/// "3,5" as a set of GPU indexes; `None` for anything else.
fn indexes(value: &str) -> Option<BTreeSet<u32>> {
    let set: BTreeSet<u32> = value.split(',').map(|i| i.trim().parse().ok()).collect::<Option<_>>()?;
    (set.len() <= MAX_CARDS).then_some(set)
}

/// "memory:desc", "user:asc", or a bare "memory" (the column's own order); "mem" for memory.
fn sort_order(value: &str) -> Option<SortOrder> {
    let (name, way) = value.split_once(':').unwrap_or((value, ""));
    let name = if name == "mem" { "memory" } else { name };
    let column = Column::ALL.into_iter().find(|c| c.key() == name)?;
    // The order a first click on the column gives (the default column is in its own order already).
    let natural =
        if column == SortOrder::default().column { SortOrder::default() } else { SortOrder::default().clicked(column) };
    match way {
        "" => Some(natural),
        "desc" => Some(SortOrder { column, descending: true }),
        "asc" => Some(SortOrder { column, descending: false }),
        _ => None,
    }
}

/// Percent-encodes all but letters, digits and `-._~,:`.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~,:".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Undoes [`escape`] (and `+` for a space); `None` for a broken escape or bytes that are not UTF-8.
fn unescape(value: &str) -> Option<String> {
    let bytes = value.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            other => {
                out.push(other);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full() -> UrlView {
        UrlView {
            cards: [3, 12].into(),
            filter: ProcessFilter {
                user: Some("ana maría&co".into()),
                gpu: Some(3),
                workload: Some("ns/pod-1".into()),
            },
            sort: SortOrder { column: Column::User, descending: true },
            range: HistoryRange::Hour,
            drill: Some(5),
            rank: Metric::Temperature,
            layout: Layout::Grid,
            state: Some("held-idle".into()),
            owner: Some("bo".into()),
            ..UrlView::default()
        }
    }

    #[test]
    fn a_view_survives_the_round_trip() {
        let view = full();
        let fragment = view.encode();
        assert_eq!(UrlView::parse(&fragment), view, "{fragment}");
        assert!(fragment.starts_with("#dashboard?gpu=3,12&user=ana%20mar"), "{fragment}");
        let lab = UrlView { tab: Tab::Lab, lab_gpu: Some(2), run: Some(41), ..UrlView::default() };
        assert_eq!(lab.encode(), "#lab?gpu=2&run=41");
        assert_eq!(UrlView::parse(&lab.encode()), lab);
        let usage = UsageView {
            span: UsageSpan::Custom,
            first: "2026-12-01".into(),
            last: "2026-12-04".into(),
            by: UsageGroup::Pod,
        };
        let usage = UrlView { tab: Tab::Usage, usage, ..UrlView::default() };
        assert_eq!(usage.encode(), "#usage?range=custom&from=2026-12-01&to=2026-12-04&by=pod");
        assert_eq!(UrlView::parse(&usage.encode()), usage);
        let month = UrlView {
            tab: Tab::Usage,
            usage: UsageView { span: UsageSpan::Month, ..UsageView::default() },
            ..UrlView::default()
        };
        assert_eq!(month.encode(), "#usage?range=30d", "a custom range's days only with it");
        for tab in Tab::ALL {
            let plain = UrlView { tab, ..UrlView::default() };
            assert_eq!(plain.encode(), format!("#{}", tab.key()), "a tab alone is its bare key");
            assert_eq!(UrlView::parse(&plain.encode()), plain);
        }
    }

    #[test]
    fn readable_links_are_understood() {
        let view = UrlView::parse("#/dashboard?gpu=3&sort=mem&range=1h");
        assert_eq!(view.cards, [3].into());
        assert_eq!(view.sort, SortOrder::default());
        assert_eq!(view.range, HistoryRange::Hour);
        assert_eq!(UrlView::parse("#dashboard?lines=power_draw").rank, Metric::PowerDraw);
        assert_eq!(UrlView::parse("dashboard?sort=user").sort, SortOrder { column: Column::User, descending: false });
        assert_eq!(UrlView::parse("#processes"), UrlView::default(), "the skip link's target is on the dashboard");
    }

    #[test]
    fn bad_values_are_left_at_their_defaults() {
        let bad = "#dashboard?gpu=3,x&on=-1&sort=memory:sideways&range=2y&history=all&lines=mem_clock&layout=3d&state=happy\
                   &user=%ZZ&workload=%FF&owner=&run=5&=1&novalue&%%%&user=a%0Ab";
        assert_eq!(UrlView::parse(bad), UrlView::default());
        assert_eq!(
            UrlView::parse("#lab?gpu=99999999999&run=-3&cards=1"),
            UrlView { tab: Tab::Lab, ..UrlView::default() }
        );
        assert_eq!(UrlView::parse("#nowhere?gpu=1").tab, Tab::Dashboard);
        assert_eq!(
            UrlView::parse("#usage?range=1y&from=2026-02-30&to=yesterday&by=user"),
            UrlView { tab: Tab::Usage, ..UrlView::default() },
            "no such range, day or workload grouping"
        );
        let long = format!("#dashboard?user={}", "a".repeat(MAX_NAME + 1));
        assert_eq!(UrlView::parse(&long).filter.user, None);
        let many = (0..300).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
        assert!(UrlView::parse(&format!("#dashboard?gpu={many}")).cards.is_empty());
        for odd in ["", "#", "#?", "#??&&==", "#dashboard?gpu", "#lab?run=%", "#lab?run=%4"] {
            let _ = UrlView::parse(odd);
        }
    }

    #[test]
    fn escapes_round_trip() {
        for text in ["ana", "a b&c=d", "ns/pod", "ünï", "100%"] {
            assert_eq!(unescape(&escape(text)).as_deref(), Some(text));
        }
        assert_eq!(unescape("a+b").as_deref(), Some("a b"));
        assert_eq!(unescape("%zz"), None);
    }
}
