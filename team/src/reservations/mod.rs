//! Advisory GPU reservations: booking (with conflicts checked atomically: two racing requests
//! cannot both win), release, expiry by time, and "who holds GPU i now". Nothing is enforced on
//! the GPU. Reads (`/metrics`, `/api/processes`, the alerts' thread) take a snapshot of the
//! reservations still to come or in force and never touch SQLite.

use std::path::Path;
use std::sync::{Arc, Mutex, RwLock};

use shared::processes::GpuProcess;
use shared::reservations::{MAX_PER_USER, Reservation, ReservationInvalid, ReservationRequest, intruders};

use store::reservations::{ReservationStore, ReservationStoreError};

/// Why a booking or a release was refused.
#[derive(Debug, thiserror::Error)]
pub enum ReservationError {
    #[error(transparent)]
    Invalid(#[from] ReservationInvalid),
    /// Another reservation holds one of the GPUs at that time (the message names it).
    #[error("{0}; pick other GPUs or times, or ask the holder to release it")]
    Conflict(String),
    #[error(
        "{user} already holds {held} reservations still to come or in force; one user may hold at most \
         {MAX_PER_USER}: release one first"
    )]
    TooMany { user: String, held: usize },
    #[error("no reservation {0}; GET /api/reservations?all=1 lists them")]
    NotFound(u64),
    #[error("reservation {id} is {holder}'s: only its holder or an admin may release it")]
    NotYours { id: u64, holder: String },
    #[error("reservation {0} has already ended or been released")]
    Over(u64),
    #[error(transparent)]
    Store(#[from] ReservationStoreError),
}

/// The reservations: the table, and a snapshot of those still to come or in force.
#[derive(Debug, Clone)]
pub struct Reservations {
    /// Held for every write, so a conflict check and its insert are one step.
    store: Arc<Mutex<ReservationStore>>,
    current: Arc<RwLock<Arc<[Reservation]>>>,
}

impl Reservations {
    /// Reservations kept in the history database at `path`, or in memory (`None`, `--no-history`).
    pub fn open(path: Option<&Path>, now_ms: u64) -> Result<Self, ReservationStoreError> {
        let store = match path {
            Some(path) => ReservationStore::open(path)?,
            None => ReservationStore::memory()?,
        };
        let current = store.current(now_ms)?;
        Ok(Self { store: Arc::new(Mutex::new(store)), current: Arc::new(RwLock::new(Arc::from(current))) })
    }

    /// Reservations not released that end after `now_ms` (past ones drop out on their own), by start.
    pub fn current(&self, now_ms: u64) -> Vec<Reservation> {
        let snapshot = Arc::clone(&base::sync::read(&self.current));
        snapshot.iter().filter(|r| r.current_at(now_ms)).cloned().collect()
    }

    /// Those in force at `now_ms`.
    pub fn active(&self, now_ms: u64) -> Vec<Reservation> {
        let mut current = self.current(now_ms);
        current.retain(|r| r.active_at(now_ms));
        current
    }

    /// Every reservation, past and released too, by start (blocking: reads the table).
    pub fn all(&self) -> Result<Vec<Reservation>, ReservationStoreError> {
        let mut all = self.lock().all()?;
        all.sort_by_key(|r| (r.start_ms, r.id));
        Ok(all)
    }

    /// Books `request` for `user` at `now_ms` (blocking: writes the table), unless `user` already
    /// holds [`MAX_PER_USER`] reservations still to come or in force.
    pub fn create(
        &self,
        request: ReservationRequest,
        user: &str,
        device_count: usize,
        now_ms: u64,
    ) -> Result<Reservation, ReservationError> {
        let request = request.validate(device_count, now_ms)?;
        let mut reservation = Reservation {
            id: 0,
            devices: request.devices,
            user: user.to_owned(),
            start_ms: request.start_ms,
            end_ms: request.end_ms,
            note: request.note,
            created_ms: now_ms,
            released_ms: None,
            intruders: Vec::new(),
            redacted: false,
        };
        let store = self.lock();
        let current = self.current(now_ms);
        let held = current.iter().filter(|r| r.user == user).count();
        if held >= MAX_PER_USER {
            return Err(ReservationError::TooMany { user: user.to_owned(), held });
        }
        if let Some(holder) = current.iter().find(|r| r.overlaps(&reservation)) {
            return Err(ReservationError::Conflict(holder.conflict_message(&reservation.devices)));
        }
        reservation.id = store.insert(&reservation)?;
        let mut next = current;
        next.push(reservation.clone());
        next.sort_by_key(|r| (r.start_ms, r.id));
        self.publish(next);
        Ok(reservation)
    }

    /// Releases reservation `id` for `by` (its holder, or anyone when `admin`) at `now_ms`.
    pub fn release(&self, id: u64, by: &str, admin: bool, now_ms: u64) -> Result<Reservation, ReservationError> {
        let store = self.lock();
        let mut reservation = store.get(id)?.ok_or(ReservationError::NotFound(id))?;
        if reservation.user != by && !admin {
            return Err(ReservationError::NotYours { id, holder: reservation.user });
        }
        if !reservation.current_at(now_ms) || !store.release(id, now_ms)? {
            return Err(ReservationError::Over(id));
        }
        reservation.released_ms = Some(now_ms);
        let mut next = self.current(now_ms);
        next.retain(|r| r.id != id);
        self.publish(next);
        Ok(reservation)
    }

    /// Each reservation with the intruders on its GPUs at `now_ms` filled in.
    pub fn with_intruders(mut list: Vec<Reservation>, processes: &[GpuProcess], now_ms: u64) -> Vec<Reservation> {
        for r in &mut list {
            r.intruders = intruders(r, processes, now_ms);
        }
        list
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ReservationStore> {
        base::sync::lock(&self.store)
    }

    fn publish(&self, next: Vec<Reservation>) {
        *base::sync::write(&self.current) = Arc::from(next);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_764_597_600_000;
    const H: u64 = 3_600_000;

    fn request(devices: &[u32], start_ms: u64, end_ms: u64) -> ReservationRequest {
        ReservationRequest { devices: devices.to_vec(), start_ms, end_ms, note: "n".into() }
    }

    #[test]
    fn books_refuses_overlaps_releases_and_expires() {
        let r = Reservations::open(None, NOW).unwrap();
        let a = r.create(request(&[1], NOW, NOW + 4 * H), "ana", 4, NOW).unwrap();
        let refused = r.create(request(&[0, 1], NOW + H, NOW + 2 * H), "bo", 4, NOW).unwrap_err();
        assert!(refused.to_string().starts_with("GPU 1 is reserved by ana from"), "{refused}");
        r.create(request(&[1], NOW + 4 * H, NOW + 5 * H), "bo", 4, NOW).expect("back to back");
        assert!(matches!(r.release(a.id, "bo", false, NOW), Err(ReservationError::NotYours { .. })));
        assert_eq!(r.active(NOW).len(), 1);
        assert_eq!(r.current(NOW + 4 * H).len(), 1, "a expired");
        r.release(a.id, "root", true, NOW).expect("an admin may");
        assert!(matches!(r.release(a.id, "ana", false, NOW), Err(ReservationError::Over(_))));
        assert!(matches!(r.release(99, "ana", true, NOW), Err(ReservationError::NotFound(99))));
        assert!(r.active(NOW).is_empty());
        assert_eq!(r.all().unwrap().len(), 2);
    }

    #[test]
    fn one_user_holds_at_most_sixteen_and_a_release_or_an_expiry_makes_room() {
        let r = Reservations::open(None, NOW).unwrap();
        let book = |i: u64, user: &str, now: u64| r.create(request(&[0], NOW + i * H, NOW + (i + 1) * H), user, 4, now);
        let made: Vec<Reservation> = (0..16).map(|i| book(i, "ana", NOW).unwrap()).collect();
        let refused = book(16, "ana", NOW).unwrap_err();
        assert!(matches!(refused, ReservationError::TooMany { held: 16, .. }), "{refused}");
        assert!(refused.to_string().contains("at most 16: release one first"), "{refused}");
        book(16, "bo", NOW).expect("the cap is per user");
        r.release(made[3].id, "ana", false, NOW).unwrap();
        book(17, "ana", NOW).expect("a release makes room");
        book(18, "ana", NOW + H).expect("the first one ended: room again");
    }

    #[test]
    fn racing_bookings_of_one_gpu_let_one_win() {
        let r = Reservations::open(None, NOW).unwrap();
        let won: usize = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let r = r.clone();
                    s.spawn(move || r.create(request(&[2], NOW, NOW + H), &format!("u{i}"), 4, NOW).is_ok())
                })
                .collect();
            handles.into_iter().map(|h| usize::from(h.join().unwrap())).sum()
        });
        assert_eq!(won, 1);
    }
}
