//! What telling owners keeps: each owner's choice of notices and digest (opt-out: no row means
//! both on), the digest periods already sent (so a restart neither repeats nor skips one), and
//! the jobs that ended in a period, which a digest sums up.

use rusqlite::{Connection, OptionalExtension, params};
use shared::jobs::Job;
use shared::jobs::notices::{NoticeChange, NoticeChoice};

use super::{JobStore, JobStoreError, as_i64};

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS job_notice_choices (
    owner TEXT PRIMARY KEY,
    notices INTEGER NOT NULL,
    digest INTEGER NOT NULL,
    changed_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS job_digests (
    period_end_ms INTEGER PRIMARY KEY,
    sent_ms INTEGER NOT NULL
);
";

/// How many sent digest periods are kept: more than a year of daily ones.
const DIGESTS_KEPT: u32 = 400;

impl JobStore {
    /// `owner`'s choice (blocking); the default (both on) when they never chose.
    pub fn notice_choice(&self, owner: &str) -> Result<NoticeChoice, JobStoreError> {
        let owner = owner.to_owned();
        self.writer.ask(move |conn| choice(conn, &owner)).map_err(|_| JobStoreError::Stopped)?
    }

    /// Applies `change` to `owner`'s choice at `now_ms` in one step (two changes at once both
    /// hold) and answers the choice now (blocking).
    pub fn change_notice_choice(
        &self,
        owner: &str,
        change: NoticeChange,
        now_ms: u64,
    ) -> Result<NoticeChoice, JobStoreError> {
        let owner = owner.to_owned();
        self.writer
            .ask(move |conn| {
                let choice = change.apply(choice(conn, &owner)?);
                conn.execute(
                    "INSERT OR REPLACE INTO job_notice_choices (owner, notices, digest, changed_ms)
                     VALUES (?1, ?2, ?3, ?4)",
                    params![owner, choice.notices, choice.digest, as_i64(now_ms)],
                )?;
                Ok(choice)
            })
            .map_err(|_| JobStoreError::Stopped)?
    }

    /// The jobs that ended in `[from_ms, to_ms)`, oldest first, without their series (blocking).
    pub fn ended_between(&self, from_ms: u64, to_ms: u64) -> Result<Vec<Job>, JobStoreError> {
        self.writer
            .ask(move |conn| {
                let mut statement = conn.prepare_cached(
                    "SELECT body FROM jobs WHERE ended_ms >= ?1 AND ended_ms < ?2 ORDER BY ended_ms, id",
                )?;
                let bodies: Vec<String> = statement
                    .query_map(params![as_i64(from_ms), as_i64(to_ms)], |r| r.get(0))?
                    .collect::<Result<_, _>>()?;
                bodies.iter().map(|b| serde_json::from_str(b).map_err(JobStoreError::from)).collect()
            })
            .map_err(|_| JobStoreError::Stopped)?
    }

    /// The end of the newest digest period sent, if any (blocking).
    pub fn last_digest(&self) -> Result<Option<u64>, JobStoreError> {
        self.writer
            .ask(|conn| {
                let last: Option<i64> =
                    conn.query_row("SELECT MAX(period_end_ms) FROM job_digests", [], |r| r.get(0))?;
                Ok(last.map(|ms| ms.max(0) as u64))
            })
            .map_err(|_| JobStoreError::Stopped)?
    }

    /// Notes the digest period ending at `period_end_ms` as sent at `now_ms` (blocking).
    pub fn digest_sent(&self, period_end_ms: u64, now_ms: u64) -> Result<(), JobStoreError> {
        self.writer
            .ask(move |conn| {
                conn.execute(
                    "INSERT OR REPLACE INTO job_digests (period_end_ms, sent_ms) VALUES (?1, ?2)",
                    params![as_i64(period_end_ms), as_i64(now_ms)],
                )?;
                conn.execute(
                    "DELETE FROM job_digests WHERE period_end_ms NOT IN
                     (SELECT period_end_ms FROM job_digests ORDER BY period_end_ms DESC LIMIT ?1)",
                    [DIGESTS_KEPT],
                )?;
                Ok(())
            })
            .map_err(|_| JobStoreError::Stopped)?
    }
}

fn choice(conn: &Connection, owner: &str) -> Result<NoticeChoice, JobStoreError> {
    let row = conn
        .query_row("SELECT notices, digest FROM job_notice_choices WHERE owner = ?1", [owner], |r| {
            Ok(NoticeChoice { notices: r.get(0)?, digest: r.get(1)? })
        })
        .optional()?;
    Ok(row.unwrap_or_default())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use shared::jobs::{JobFigures, Outcome, Runtime};

    fn job(id: u64, owner: &str, ended_ms: Option<u64>) -> Job {
        Job {
            id,
            key: format!("process:{id}"),
            name: "python3".into(),
            owner: owner.into(),
            runtime: Runtime::Process,
            gpus: vec![0],
            started_ms: 1_000,
            watched_from_ms: 1_000,
            last_seen_ms: ended_ms.unwrap_or(1_000),
            ended_ms,
            outcome: if ended_ms.is_some() { Outcome::Ended } else { Outcome::Running },
            figures: JobFigures::default(),
            series: Vec::new(),
            pids: Vec::new(),
        }
    }

    #[test]
    fn choices_are_opt_out_and_kept_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.sqlite");
        let store = JobStore::open(&path, 0).unwrap();
        assert_eq!(store.notice_choice("ana").unwrap(), NoticeChoice::default());
        let off = NoticeChoice { notices: false, digest: true };
        let change = NoticeChange { notices: Some(false), digest: None };
        assert_eq!(store.change_notice_choice("ana", change, 5).unwrap(), off);
        assert_eq!(store.notice_choice("ana").unwrap(), off);
        let both = NoticeChange { notices: None, digest: Some(false) };
        let all_off = NoticeChoice { notices: false, digest: false };
        assert_eq!(store.change_notice_choice("ana", both, 6).unwrap(), all_off, "the earlier change holds");
        assert_eq!(store.notice_choice("bo").unwrap(), NoticeChoice::default());
        drop(store);
        let again = JobStore::open(&path, 0).unwrap();
        assert_eq!(again.notice_choice("ana").unwrap(), NoticeChoice { notices: false, digest: false });
    }

    #[test]
    fn a_period_holds_the_jobs_that_ended_in_it() {
        let store = JobStore::memory().unwrap();
        store.save(vec![job(1, "ana", Some(999)), job(2, "ana", Some(1_000)), job(3, "bo", Some(1_999))]);
        store.save(vec![job(4, "bo", Some(2_000)), job(5, "cy", None)]);
        let ids: Vec<u64> = store.ended_between(1_000, 2_000).unwrap().iter().map(|j| j.id).collect();
        assert_eq!(ids, [2, 3]);
    }

    #[test]
    fn the_newest_digest_sent_is_remembered() {
        let store = JobStore::memory().unwrap();
        assert_eq!(store.last_digest().unwrap(), None);
        store.digest_sent(86_400_000, 86_400_500).unwrap();
        store.digest_sent(2 * 86_400_000, 2 * 86_400_000).unwrap();
        assert_eq!(store.last_digest().unwrap(), Some(2 * 86_400_000));
    }
}
