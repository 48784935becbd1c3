//! Alerts, silences and subscriptions: one writer thread owns the connection (the history
//! database's file, or an in-memory database with `--no-history`), so neither the engine nor a
//! handler touches SQLite on the async runtime. Saves are queued and return at once; reads go
//! through the same queue, so a read sees every save queued before it.

use std::path::Path;

use rusqlite::{Connection, params};
use shared::alerts::{Alert, AlertState, Rule, Silence, Subscription, SubscriptionKind};

use super::schema::ALERTS_SCHEMA;
use super::writer::{self, DbWriter};

/// Why the alerts tables could not be used.
#[derive(Debug, thiserror::Error)]
pub enum AlertStoreError {
    #[error("alerts database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("cannot start the alerts writer: {0}")]
    Thread(std::io::Error),
    #[error("the alerts writer has stopped")]
    Stopped,
}

/// Which stored alerts a list returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlertFilter {
    /// `None`: firing and resolved.
    pub state: Option<AlertState>,
    /// Fired at or after / at or before (ms since the epoch).
    pub from_ms: Option<u64>,
    pub to_ms: Option<u64>,
    pub gpu_index: Option<u32>,
    pub rule: Option<Rule>,
    pub limit: u32,
}

impl Default for AlertFilter {
    fn default() -> Self {
        Self { state: None, from_ms: None, to_ms: None, gpu_index: None, rule: None, limit: 200 }
    }
}

/// A new subscription was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SubscribeRefused {
    #[error("you already have this subscription")]
    Duplicate,
    #[error("you have {0} subscriptions, the most one user may have; delete one first")]
    TooMany(u32),
}

/// The handle to the alerts tables' writer; dropping the last clone writes what is queued.
#[derive(Debug, Clone)]
pub struct AlertStore {
    writer: DbWriter,
    persistent: bool,
}

impl AlertStore {
    /// The tables in the history database at `path`.
    pub fn open(path: &Path) -> Result<Self, AlertStoreError> {
        Self::start(writer::open_file(path)?, true)
    }

    /// Tables that live as long as the process (`--no-history`).
    pub fn memory() -> Result<Self, AlertStoreError> {
        Self::start(Connection::open_in_memory()?, false)
    }

    fn start(conn: Connection, persistent: bool) -> Result<Self, AlertStoreError> {
        conn.execute_batch(ALERTS_SCHEMA)?;
        let writer = DbWriter::start("gpudash-alertdb", conn).map_err(AlertStoreError::Thread)?;
        Ok(Self { writer, persistent })
    }

    /// True when alerts outlive the process (the history database).
    pub fn persistent(&self) -> bool {
        self.persistent
    }

    /// Queues an insert or update of `alert`; never blocks. A failed write is logged.
    pub fn save(&self, alert: Alert) {
        let sent = self.send(move |conn| {
            if let Err(e) = save(conn, &alert) {
                tracing::error!("could not store alert {}: {e}", alert.id);
            }
        });
        if sent.is_err() {
            tracing::error!("the alerts writer has stopped; an alert was not stored");
        }
    }

    /// The alerts that pass `filter`: firing first, then resolved, newest first (blocking).
    pub fn list(&self, filter: AlertFilter) -> Result<Vec<Alert>, AlertStoreError> {
        self.ask(move |conn| list(conn, &filter))?
    }

    /// What a restart carries on: the alerts still firing and the next alert id (blocking).
    pub fn firing(&self) -> Result<(Vec<Alert>, u64), AlertStoreError> {
        self.ask(|conn| {
            let firing =
                list(conn, &AlertFilter { state: Some(AlertState::Firing), limit: u32::MAX, ..Default::default() })?;
            // AUTOINCREMENT remembers the largest id ever stored, also of rows pruned since: an id is never
            // handed out twice (a page or a receiver holding an old alert would take the new one for it).
            let max: Option<i64> = conn.query_row(
                "SELECT MAX(n) FROM (SELECT MAX(id) AS n FROM alerts
                                     UNION ALL SELECT seq FROM sqlite_sequence WHERE name = 'alerts')",
                [],
                |r| r.get(0),
            )?;
            Ok((firing, max.map_or(1, |m| m as u64 + 1)))
        })?
    }

    /// Deletes alerts resolved before `oldest_ms` and silences that ended before it; returns how many (blocking).
    pub fn prune(&self, oldest_ms: u64) -> Result<usize, AlertStoreError> {
        self.ask(move |conn| {
            let at = as_i64(oldest_ms);
            let alerts = conn.execute("DELETE FROM alerts WHERE resolved_ms IS NOT NULL AND resolved_ms < ?1", [at])?;
            let silences = conn.execute("DELETE FROM alert_silences WHERE until_ms < ?1", [at])?;
            Ok(alerts + silences)
        })?
    }

    /// Stores a silence and gives it its id (blocking).
    pub fn add_silence(&self, silence: Silence) -> Result<Silence, AlertStoreError> {
        self.ask(move |conn| {
            conn.execute(
                "INSERT INTO alert_silences (rule, gpu_uuid, by_user, reason, from_ms, until_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    silence.rule.as_str(),
                    silence.gpu_uuid,
                    silence.by,
                    silence.reason,
                    as_i64(silence.from_ms),
                    as_i64(silence.until_ms)
                ],
            )?;
            Ok(Silence { id: conn.last_insert_rowid() as u64, ..silence })
        })?
    }

    /// Ends silence `id` at `now_ms`; `false` when there is no such silence in force (blocking).
    pub fn end_silence(&self, id: u64, now_ms: u64) -> Result<bool, AlertStoreError> {
        self.ask(move |conn| {
            let at = as_i64(now_ms);
            let changed = conn.execute(
                "UPDATE alert_silences SET until_ms = ?2 WHERE id = ?1 AND until_ms > ?2",
                params![as_i64(id), at],
            )?;
            Ok(changed > 0)
        })?
    }

    /// The silences in force at `now_ms` (blocking).
    pub fn silences(&self, now_ms: u64) -> Result<Vec<Silence>, AlertStoreError> {
        self.ask(move |conn| {
            let mut statement = conn.prepare_cached(
                "SELECT id, rule, gpu_uuid, by_user, reason, from_ms, until_ms FROM alert_silences
                 WHERE until_ms > ?1 ORDER BY id",
            )?;
            let rows = statement.query_map([as_i64(now_ms)], |r| {
                let rule: String = r.get(1)?;
                let silence = Silence {
                    id: r.get::<_, i64>(0)? as u64,
                    rule: Rule::Xid,
                    gpu_uuid: r.get(2)?,
                    by: r.get(3)?,
                    reason: r.get(4)?,
                    from_ms: r.get::<_, i64>(5)? as u64,
                    until_ms: r.get::<_, i64>(6)? as u64,
                };
                Ok(Rule::parse(&rule).map(|rule| Silence { rule, ..silence }))
            })?;
            Ok(rows.filter_map(Result::transpose).collect::<rusqlite::Result<Vec<_>>>()?)
        })?
    }

    /// `user`'s subscriptions, oldest first (blocking).
    pub fn subscriptions(&self, user: &str) -> Result<Vec<Subscription>, AlertStoreError> {
        let user = user.to_owned();
        Ok(self.ask(move |conn| subscriptions(conn, &user))??)
    }

    /// Adds a subscription for `user`, at most `most` each (blocking).
    pub fn subscribe(
        &self,
        user: &str,
        kind: SubscriptionKind,
        most: u32,
    ) -> Result<Result<Subscription, SubscribeRefused>, AlertStoreError> {
        let user = user.to_owned();
        self.ask(move |conn| {
            let mine = subscriptions(conn, &user)?;
            if mine.iter().any(|s| s.kind == kind) {
                return Ok(Err(SubscribeRefused::Duplicate));
            }
            if mine.len() >= most as usize {
                return Ok(Err(SubscribeRefused::TooMany(most)));
            }
            let json = serde_json::to_string(&kind).unwrap_or_default();
            conn.execute("INSERT INTO alert_subscriptions (user, kind) VALUES (?1, ?2)", params![user, json])?;
            Ok(Ok(Subscription { id: conn.last_insert_rowid() as u64, user, kind }))
        })?
    }

    /// Deletes subscription `id` if it is `user`'s; `false` otherwise (blocking).
    pub fn unsubscribe(&self, user: &str, id: u64) -> Result<bool, AlertStoreError> {
        let user = user.to_owned();
        self.ask(move |conn| {
            let n =
                conn.execute("DELETE FROM alert_subscriptions WHERE id = ?1 AND user = ?2", params![as_i64(id), user])?;
            Ok(n > 0)
        })?
    }

    /// Waits until everything queued so far is written (blocking).
    pub fn sync(&self) -> Result<(), AlertStoreError> {
        self.ask(|_| ())
    }

    fn ask<T: Send + 'static>(
        &self,
        job: impl FnOnce(&mut Connection) -> T + Send + 'static,
    ) -> Result<T, AlertStoreError> {
        self.writer.ask(job).map_err(|_| AlertStoreError::Stopped)
    }

    fn send(&self, job: impl FnOnce(&mut Connection) + Send + 'static) -> Result<(), AlertStoreError> {
        self.writer.send(job).map_err(|_| AlertStoreError::Stopped)
    }
}

fn save(conn: &Connection, alert: &Alert) -> Result<usize, AlertStoreError> {
    let mut stored = alert.clone();
    // The stored form is the full one; redaction is per viewer.
    stored.redacted = false;
    let body = serde_json::to_string(&stored).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
    Ok(conn
        .prepare_cached(
            "INSERT OR REPLACE INTO alerts (id, rule, gpu_index, fired_ms, resolved_ms, body) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![
            as_i64(alert.id),
            alert.rule.as_str(),
            alert.gpu_index,
            as_i64(alert.fired_ms),
            alert.resolved_ms.map(as_i64),
            body
        ])?)
}

/// Firing ones first (newest first), then resolved ones (latest resolved first): two queries, so
/// each walks an index in its order and stops at the limit (a day of a flapping rule is thousands of rows).
fn list(conn: &Connection, filter: &AlertFilter) -> Result<Vec<Alert>, AlertStoreError> {
    let mut alerts = Vec::new();
    if filter.state != Some(AlertState::Resolved) {
        alerts.extend(query(conn, filter, AlertState::Firing, filter.limit)?);
    }
    let left = filter.limit.saturating_sub(u32::try_from(alerts.len()).unwrap_or(u32::MAX));
    if filter.state != Some(AlertState::Firing) && left > 0 {
        alerts.extend(query(conn, filter, AlertState::Resolved, left)?);
    }
    Ok(alerts)
}

fn query(
    conn: &Connection,
    filter: &AlertFilter,
    state: AlertState,
    limit: u32,
) -> Result<Vec<Alert>, AlertStoreError> {
    let sql = match state {
        AlertState::Firing => {
            "SELECT id, body FROM alerts WHERE resolved_ms IS NULL
               AND fired_ms >= ?1 AND fired_ms <= ?2 AND (?3 IS NULL OR gpu_index = ?3) AND (?4 IS NULL OR rule = ?4)
             ORDER BY fired_ms DESC, id DESC LIMIT ?5"
        }
        AlertState::Resolved => {
            "SELECT id, body FROM alerts WHERE resolved_ms IS NOT NULL
               AND fired_ms >= ?1 AND fired_ms <= ?2 AND (?3 IS NULL OR gpu_index = ?3) AND (?4 IS NULL OR rule = ?4)
             ORDER BY resolved_ms DESC, id DESC LIMIT ?5"
        }
    };
    let mut statement = conn.prepare_cached(sql)?;
    let rows = statement.query_map(
        params![
            filter.from_ms.map_or(0, as_i64),
            filter.to_ms.map_or(i64::MAX, as_i64),
            filter.gpu_index,
            filter.rule.map(Rule::as_str),
            i64::from(limit),
        ],
        |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)),
    )?;
    let mut alerts = Vec::new();
    for row in rows {
        let (id, body) = row?;
        match serde_json::from_str::<Alert>(&body) {
            Ok(alert) => alerts.push(alert),
            // A row a newer gpudash wrote: skip it rather than fail the whole list.
            Err(e) => tracing::warn!("skipping stored alert {id}: {e}"),
        }
    }
    Ok(alerts)
}

fn subscriptions(conn: &Connection, user: &str) -> rusqlite::Result<Vec<Subscription>> {
    let mut statement = conn.prepare_cached("SELECT id, kind FROM alert_subscriptions WHERE user = ?1 ORDER BY id")?;
    let rows = statement.query_map([user], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)))?;
    let mut out = Vec::new();
    for row in rows {
        let (id, kind) = row?;
        if let Ok(kind) = serde_json::from_str(&kind) {
            out.push(Subscription { id: id as u64, user: user.to_owned(), kind });
        }
    }
    Ok(out)
}

fn as_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::alerts::Severity;

    fn alert(id: u64, rule: Rule, fired: u64, resolved: Option<u64>) -> Alert {
        Alert {
            id,
            rule,
            severity: Severity::Warning,
            gpu_index: (id % 2) as u32,
            gpu_uuid: format!("GPU-{}", id % 2),
            pid: None,
            user: Some("ana".into()),
            message: "hot".into(),
            action: "cool it".into(),
            fired_ms: fired,
            resolved_ms: resolved,
            silenced: None,
            simulated: true,
            redacted: false,
        }
    }

    #[test]
    fn alerts_survive_reopening_and_firing_ones_are_carried_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.db");
        {
            let store = AlertStore::open(&path).unwrap();
            store.save(alert(1, Rule::Temperature, 100, Some(200)));
            store.save(alert(2, Rule::DeviceLost, 150, None));
            store.save(alert(3, Rule::Xid, 300, None));
            store.save(Alert { resolved_ms: Some(400), ..alert(3, Rule::Xid, 300, None) });
        }
        let store = AlertStore::open(&path).unwrap();
        let (firing, next) = store.firing().unwrap();
        assert_eq!(firing.iter().map(|a| a.id).collect::<Vec<_>>(), [2]);
        assert_eq!(next, 4);
        let all = store.list(AlertFilter::default()).unwrap();
        assert_eq!(all.iter().map(|a| a.id).collect::<Vec<_>>(), [2, 3, 1], "firing first, then newest resolved");
        let resolved = store.list(AlertFilter { state: Some(AlertState::Resolved), ..Default::default() }).unwrap();
        assert_eq!(resolved.len(), 2);
        let gpu0 = store.list(AlertFilter { gpu_index: Some(0), ..Default::default() }).unwrap();
        assert_eq!(gpu0.iter().map(|a| a.id).collect::<Vec<_>>(), [2]);
        let xid = store.list(AlertFilter { rule: Some(Rule::Xid), from_ms: Some(250), ..Default::default() }).unwrap();
        assert_eq!(xid.iter().map(|a| a.id).collect::<Vec<_>>(), [3]);
        let one = store.list(AlertFilter { limit: 1, ..Default::default() }).unwrap();
        assert_eq!(one.len(), 1);
    }

    #[test]
    fn pruning_keeps_firing_and_recent_alerts() {
        let store = AlertStore::memory().unwrap();
        store.save(alert(1, Rule::Temperature, 10, Some(20)));
        store.save(alert(2, Rule::Temperature, 10, None));
        store.save(alert(3, Rule::Temperature, 10, Some(2000)));
        assert_eq!(store.prune(1000).unwrap(), 1);
        let left = store.list(AlertFilter::default()).unwrap();
        assert_eq!(left.iter().map(|a| a.id).collect::<Vec<_>>(), [2, 3]);
        assert!(!store.persistent());
    }

    #[test]
    fn an_id_is_never_handed_out_twice_even_after_its_alert_was_pruned() {
        let store = AlertStore::memory().unwrap();
        store.save(alert(1, Rule::Temperature, 10, None));
        store.save(alert(2, Rule::Temperature, 10, Some(20)));
        store.save(alert(3, Rule::Temperature, 10, Some(20)));
        assert_eq!(store.prune(1000).unwrap(), 2);
        let (firing, next) = store.firing().unwrap();
        assert_eq!((firing.len(), next), (1, 4), "ids 2 and 3 were pruned, not freed");
    }

    #[test]
    fn silences_end_and_subscriptions_belong_to_their_user() {
        let store = AlertStore::memory().unwrap();
        let silence = Silence {
            id: 0,
            rule: Rule::Xid,
            gpu_uuid: "GPU-0".into(),
            by: "omar".into(),
            reason: "known".into(),
            from_ms: 100,
            until_ms: 1000,
        };
        let stored = store.add_silence(silence).unwrap();
        assert!(stored.id > 0);
        assert_eq!(store.silences(500).unwrap(), std::slice::from_ref(&stored));
        assert!(store.end_silence(stored.id, 600).unwrap());
        assert!(!store.end_silence(stored.id, 700).unwrap(), "already ended");
        assert!(store.silences(650).unwrap().is_empty());

        let sub = store.subscribe("ana", SubscriptionKind::AnyGpuFree {}, 2).unwrap().unwrap();
        assert_eq!(
            store.subscribe("ana", SubscriptionKind::AnyGpuFree {}, 2).unwrap(),
            Err(SubscribeRefused::Duplicate)
        );
        store.subscribe("ana", SubscriptionKind::Critical {}, 2).unwrap().unwrap();
        assert_eq!(
            store.subscribe("ana", SubscriptionKind::Everything {}, 2).unwrap(),
            Err(SubscribeRefused::TooMany(2))
        );
        assert!(store.subscriptions("bo").unwrap().is_empty());
        assert!(!store.unsubscribe("bo", sub.id).unwrap(), "not bo's");
        assert!(store.unsubscribe("ana", sub.id).unwrap());
        assert_eq!(store.subscriptions("ana").unwrap().len(), 1);
    }
}
