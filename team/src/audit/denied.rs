//! Denials of every kind (a wrong token, a viewer's POST, an operator's signal
//! to someone else's process), aggregated so a flood cannot flood the log: per
//! client and action, the first few denials of a minute are written as rows, the
//! rest are counted into one row when that minute closes. Across all clients at
//! most [`ROWS_PER_WINDOW_ALL`] denials a minute are written as rows of their own,
//! so many addresses cannot flood it either.

use std::collections::HashMap;

use super::Action;

/// How long one client's window of denials lasts.
pub const WINDOW_MS: u64 = 60_000;
/// Denials written as their own rows per client, action and window.
pub const ROWS_PER_WINDOW: u32 = 5;
/// Denials written as their own rows per window across every client and action.
pub const ROWS_PER_WINDOW_ALL: u32 = 100;
/// Clients tracked at once; denials from more clients share one bucket.
pub const MAX_CLIENTS: usize = 1000;
/// The client named in the shared bucket's summary.
pub const OTHER_CLIENTS: &str = "other clients";

/// One denied attempt, as the caller describes it.
#[derive(Debug, Clone, Copy)]
pub struct Denial<'a> {
    pub user: &'a str,
    pub client: &'a str,
    pub action: Action,
    pub target: &'a str,
    pub detail: &'a str,
}

/// The row that stands for the denials of a window that were counted, not written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub user: String,
    pub client: String,
    pub action: Action,
    pub target: String,
    pub detail: String,
    /// How many denials it counts.
    pub count: u64,
}

#[derive(Debug)]
struct Window {
    started_ms: u64,
    written: u32,
    counted: u64,
    /// The last counted denial's user, target and detail, for the summary.
    last: (String, String, String),
}

/// Open windows keyed by (client, action); at most [`MAX_CLIENTS`] clients
/// plus one shared bucket per action.
#[derive(Debug, Default)]
pub struct DeniedWindows {
    windows: HashMap<(String, Action), Window>,
    /// The window of the budget shared by every client: (start, rows written in it).
    all: (u64, u32),
}

impl DeniedWindows {
    /// Notes a denial at `now_ms`. Returns the summary of this client's window
    /// if it had closed, and whether the denial should be written as its own row.
    pub fn note(&mut self, denial: &Denial<'_>, now_ms: u64) -> (Option<Summary>, bool) {
        let mut key = (denial.client.to_owned(), denial.action);
        if self.windows.len() >= MAX_CLIENTS && !self.windows.contains_key(&key) {
            key.0 = OTHER_CLIENTS.to_owned();
        }
        let closed = match self.windows.get(&key) {
            Some(window) if now_ms.saturating_sub(window.started_ms) >= WINDOW_MS => {
                self.windows.remove_entry(&key).and_then(|(key, window)| summary(key, window))
            }
            _ => None,
        };
        let window = self.windows.entry(key).or_insert_with(|| Window {
            started_ms: now_ms,
            written: 0,
            counted: 0,
            last: Default::default(),
        });
        if now_ms.saturating_sub(self.all.0) >= WINDOW_MS {
            self.all = (now_ms, 0);
        }
        if window.written < ROWS_PER_WINDOW && self.all.1 < ROWS_PER_WINDOW_ALL {
            window.written += 1;
            self.all.1 += 1;
            return (closed, true);
        }
        window.counted += 1;
        window.last = (denial.user.to_owned(), denial.target.to_owned(), denial.detail.to_owned());
        (closed, false)
    }

    /// Closes the windows that are a minute old (or all of them, at shutdown)
    /// and returns the summaries of those that counted denials.
    pub fn close(&mut self, now_ms: u64, all: bool) -> Vec<Summary> {
        let ended = |w: &Window| all || now_ms.saturating_sub(w.started_ms) >= WINDOW_MS;
        let keys: Vec<_> = self.windows.iter().filter(|(_, w)| ended(w)).map(|(k, _)| k.clone()).collect();
        keys.into_iter()
            .filter_map(|key| self.windows.remove_entry(&key))
            .filter_map(|(key, window)| summary(key, window))
            .collect()
    }

    /// Windows open now.
    pub fn open_windows(&self) -> usize {
        self.windows.len()
    }
}

fn summary((client, action): (String, Action), window: Window) -> Option<Summary> {
    (window.counted > 0).then(|| {
        let (user, target, last) = window.last;
        let count = window.counted;
        let detail = format!("{count} more denied {action} attempts from {client} within a minute (last: {last})");
        Summary { user, client, action, target, detail, count }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denial(client: &str) -> Denial<'_> {
        Denial { user: "unknown", client, action: Action::Login, target: "session", detail: "invalid token" }
    }

    #[test]
    fn the_first_denials_are_written_and_the_rest_counted_into_one_summary() {
        let mut windows = DeniedWindows::default();
        let written = (0..1000).filter(|i| windows.note(&denial("10.0.0.9"), 1000 + i).1).count();
        assert_eq!(written, ROWS_PER_WINDOW as usize);
        assert!(windows.close(1000 + WINDOW_MS - 1, false).is_empty(), "the window is still open");
        let summaries = windows.close(1000 + WINDOW_MS, false);
        assert_eq!(summaries.len(), 1);
        assert_eq!(summaries[0].count, 1000 - u64::from(ROWS_PER_WINDOW));
        assert_eq!(
            summaries[0].detail,
            "995 more denied login attempts from 10.0.0.9 within a minute (last: invalid token)"
        );
        assert_eq!(windows.open_windows(), 0);
    }

    #[test]
    fn the_next_denial_after_a_minute_closes_the_window_and_starts_another() {
        let mut windows = DeniedWindows::default();
        for i in 0..7 {
            windows.note(&denial("10.0.0.9"), i);
        }
        let (closed, written) = windows.note(&denial("10.0.0.9"), WINDOW_MS + 5);
        assert_eq!(closed.map(|s| s.count), Some(2));
        assert!(written, "a new window writes its first denials again");
        assert!(windows.close(0, true).is_empty(), "the new window counted nothing");
    }

    #[test]
    fn many_clients_share_one_budget_of_rows_and_nothing_is_lost() {
        let mut windows = DeniedWindows::default();
        let clients: Vec<String> = (0..500).map(|i| format!("10.2.{}.{}", i / 256, i % 256)).collect();
        let written = clients.iter().filter(|c| windows.note(&denial(c), 0).1).count();
        assert_eq!(written, ROWS_PER_WINDOW_ALL as usize);
        let counted: u64 = windows.close(0, true).iter().map(|s| s.count).sum();
        assert_eq!(written as u64 + counted, 500, "every denial is a row or counted in a summary");
        assert!(windows.note(&denial("10.2.0.0"), WINDOW_MS).1, "a new minute has a new budget");
    }

    #[test]
    fn clients_are_counted_apart_and_beyond_the_limit_share_one_bucket() {
        let mut windows = DeniedWindows::default();
        let clients: Vec<String> = (0..MAX_CLIENTS + 50).map(|i| format!("10.1.{}.{}", i / 256, i % 256)).collect();
        let mut written = 0u64;
        for _ in 0..ROWS_PER_WINDOW + 1 {
            for client in &clients {
                written += u64::from(windows.note(&denial(client), 0).1);
            }
        }
        assert_eq!(windows.open_windows(), MAX_CLIENTS + 1, "bounded: one bucket for the clients past the limit");
        let summaries = windows.close(0, true);
        let total: u64 = summaries.iter().map(|s| s.count).sum();
        assert!(summaries.iter().any(|s| s.client == OTHER_CLIENTS));
        assert_eq!(written, u64::from(ROWS_PER_WINDOW_ALL));
        assert_eq!(written + total, clients.len() as u64 * u64::from(ROWS_PER_WINDOW + 1), "no count is lost");
    }
}
