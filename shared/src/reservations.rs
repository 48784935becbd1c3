//! Advisory GPU reservations: who has booked which GPUs from when to when. Nothing is enforced
//! on the GPU; the server and the page only show them, leave reserved GPUs out of "free" and mark
//! someone else's processes on a reserved GPU as intruders. The rules here (what a valid
//! request is, when two reservations overlap, which GPUs are reserved now) are the ones both
//! sides of the wire use.

use serde::{Deserialize, Serialize};

use crate::processes::GpuProcess;
use crate::severity::Condition;

/// Longest reservation: one year.
pub const MAX_LENGTH_MS: u64 = 366 * 24 * 3600 * 1000;
/// Shortest reservation: five minutes (a shorter one books nothing a person could use, and
/// thousands of them only bloat the list every page reloads).
pub const MIN_LENGTH_MS: u64 = 5 * 60 * 1000;
/// Most reservations one user may hold at once, counting those still to come and those in force.
pub const MAX_PER_USER: usize = 16;
/// How far ahead a reservation may start: one year.
pub const MAX_AHEAD_MS: u64 = 366 * 24 * 3600 * 1000;
/// A start up to this far in the past (a slow form, a clock a little behind) is taken as "now";
/// further back is refused: a reservation books the future, not the past.
pub const PAST_GRACE_MS: u64 = 5 * 60 * 1000;
/// Longest note, in characters.
pub const MAX_NOTE: usize = 200;
/// The sentence the page and the docs show beside reservations.
pub const ADVISORY: &str = "Reservations are advisory: nothing is enforced on the GPU.";

/// One reservation of one or more GPUs.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Reservation {
    /// Unique on this server, increasing, never reused.
    pub id: u64,
    /// GPU indexes, ascending.
    pub devices: Vec<u32>,
    /// Who holds it; "reserved" for a viewer who may not see names (see [`Reservation::redact`]).
    pub user: String,
    pub start_ms: u64,
    pub end_ms: u64,
    pub note: String,
    pub created_ms: u64,
    /// Set when it was released before its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_ms: Option<u64>,
    /// PIDs of other users' processes on its GPUs while it is in force (filled in by the server).
    #[serde(default)]
    pub intruders: Vec<u32>,
    /// True when the server left out the holder and the note for this viewer.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub redacted: bool,
}

impl Reservation {
    /// The holder's name an anonymous viewer sees.
    pub const SOMEONE: &'static str = "reserved";

    /// Leaves out who holds it and why: the view of an anonymous visitor to a server with tokens.
    pub fn redact(&mut self) {
        Self::SOMEONE.clone_into(&mut self.user);
        self.note.clear();
        self.redacted = true;
    }

    /// In force at `now_ms`: started, not ended, not released.
    pub fn active_at(&self, now_ms: u64) -> bool {
        self.released_ms.is_none() && self.start_ms <= now_ms && now_ms < self.end_ms
    }

    /// Still to come or in force at `now_ms`.
    pub fn current_at(&self, now_ms: u64) -> bool {
        self.released_ms.is_none() && now_ms < self.end_ms
    }

    /// Shares a GPU and a moment with `other` (end times are exclusive: back to back is fine).
    pub fn overlaps(&self, other: &Reservation) -> bool {
        self.released_ms.is_none()
            && other.released_ms.is_none()
            && self.start_ms < other.end_ms
            && other.start_ms < self.end_ms
            && self.devices.iter().any(|d| other.devices.contains(d))
    }

    /// "GPU 1 is reserved by ana from 2026-12-01 14:00 UTC to 2026-12-01 18:00 UTC (reservation 7)": moments
    /// in the server's one form (`utc_minute`), which the page rewrites in the viewer's zone.
    pub fn conflict_message(&self, devices: &[u32]) -> String {
        let shared: Vec<String> =
            self.devices.iter().filter(|d| devices.contains(d)).map(|d| format!("GPU {d}")).collect();
        let verb = if shared.len() == 1 { "is" } else { "are" };
        format!(
            "{} {verb} reserved by {} from {} to {} (reservation {})",
            shared.join(", "),
            self.user,
            utc_minute(self.start_ms),
            utc_minute(self.end_ms),
            self.id
        )
    }
}

/// Body of `POST /api/reservations`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ReservationRequest {
    pub devices: Vec<u32>,
    pub start_ms: u64,
    pub end_ms: u64,
    #[serde(default)]
    pub note: String,
}

/// Body of `GET /api/reservations`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Default)]
pub struct ReservationsResponse {
    /// Ordered by start.
    pub reservations: Vec<Reservation>,
    /// The server's clock, so the page counts time left against it.
    pub now_ms: u64,
}

/// Why a reservation request is refused (each says what is allowed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReservationInvalid {
    #[error("'devices' is empty; name at least one GPU index, e.g. [0]")]
    NoDevices,
    #[error("no GPU {0}; this host has {1} GPUs, numbered from 0")]
    UnknownDevice(u32, usize),
    #[error("GPU {0} is listed twice in 'devices'; name each GPU once")]
    Duplicate(u32),
    #[error("'end_ms' ({end}) must be after 'start_ms' ({start})")]
    EndBeforeStart { start: u64, end: u64 },
    #[error("the reservation lasts {days} days; the longest allowed is 366 days (one year)")]
    TooLong { days: u64 },
    #[error(
        "the reservation lasts {seconds} s from now; the shortest allowed is {} minutes: move 'end_ms' later",
        MIN_LENGTH_MS / 60_000
    )]
    TooShort { seconds: u64 },
    #[error("'start_ms' is more than 5 minutes in the past; reservations book the present or the future")]
    InThePast,
    #[error("'start_ms' is more than a year ahead; book at most 366 days ahead")]
    TooFarAhead,
    #[error("'note' has {0} characters; at most 200 are allowed")]
    NoteTooLong(usize),
    #[error("'note' holds a control character (a newline, a tab or similar); use plain text on one line")]
    NoteControl,
}

impl ReservationRequest {
    /// Checks the request against a host with `device_count` GPUs at `now_ms` and returns it
    /// tidied: devices sorted, a start just past taken as now, the note trimmed and cleaned of
    /// format characters ([`crate::text::typed_line`]).
    pub fn validate(mut self, device_count: usize, now_ms: u64) -> Result<ReservationRequest, ReservationInvalid> {
        if self.devices.is_empty() {
            return Err(ReservationInvalid::NoDevices);
        }
        crate::order::sort(&mut self.devices);
        if let Some(&unknown) = self.devices.iter().find(|&&d| usize::try_from(d).map_or(true, |d| d >= device_count)) {
            return Err(ReservationInvalid::UnknownDevice(unknown, device_count));
        }
        if let Some(pair) = self.devices.windows(2).find(|w| w[0] == w[1]) {
            return Err(ReservationInvalid::Duplicate(pair[0]));
        }
        if self.end_ms <= self.start_ms {
            return Err(ReservationInvalid::EndBeforeStart { start: self.start_ms, end: self.end_ms });
        }
        if self.start_ms < now_ms.saturating_sub(PAST_GRACE_MS) {
            return Err(ReservationInvalid::InThePast);
        }
        if self.start_ms > now_ms.saturating_add(MAX_AHEAD_MS) {
            return Err(ReservationInvalid::TooFarAhead);
        }
        self.start_ms = self.start_ms.max(now_ms);
        if self.end_ms <= self.start_ms {
            return Err(ReservationInvalid::EndBeforeStart { start: self.start_ms, end: self.end_ms });
        }
        let length = self.end_ms - self.start_ms;
        if length > MAX_LENGTH_MS {
            return Err(ReservationInvalid::TooLong { days: length / (24 * 3600 * 1000) });
        }
        if length < MIN_LENGTH_MS {
            return Err(ReservationInvalid::TooShort { seconds: length / 1000 });
        }
        // Format characters (U+202E, zero-width ones) go: the note is shown to everyone.
        let note = crate::text::typed_line(&self.note).map_err(|_| ReservationInvalid::NoteControl)?;
        let chars = note.chars().count();
        if chars > MAX_NOTE {
            return Err(ReservationInvalid::NoteTooLong(chars));
        }
        self.note = note;
        Ok(self)
    }
}

/// The reservation in force on GPU `device` at `now_ms`.
pub fn holder(reservations: &[Reservation], device: u32, now_ms: u64) -> Option<&Reservation> {
    reservations.iter().find(|r| r.active_at(now_ms) && r.devices.contains(&device))
}

/// The free GPUs of [`crate::processes::free_devices`] less those reserved at `now_ms`: what
/// "Free: GPU …" and `free_devices` in `/api/processes` mean.
pub fn free_unreserved<'a>(
    devices: impl IntoIterator<Item = (u32, &'a Condition)>,
    processes: &[GpuProcess],
    reservations: &[Reservation],
    now_ms: u64,
) -> Vec<u32> {
    let mut free = crate::processes::free_devices(devices, processes);
    free.retain(|&d| holder(reservations, d, now_ms).is_none());
    free
}

/// True when `process` runs on a GPU that `reservation` holds at `now_ms` and belongs to someone
/// other than the holder. A process whose user is unknown (or left out) counts as another's:
/// the holder cannot be told it is theirs.
/// (A process counts for its owner by the owner rule: a job's user, a container's owner label...)
pub fn is_intruder(reservation: &Reservation, process: &GpuProcess, now_ms: u64) -> bool {
    reservation.active_at(now_ms)
        && reservation.devices.contains(&process.device)
        && process.owner_name() != Some(reservation.user.as_str())
}

/// PIDs of intruders on `reservation`'s GPUs at `now_ms`, ascending.
pub fn intruders(reservation: &Reservation, processes: &[GpuProcess], now_ms: u64) -> Vec<u32> {
    let mut pids: Vec<u32> = processes.iter().filter(|p| is_intruder(reservation, p, now_ms)).map(|p| p.pid).collect();
    crate::order::sort(&mut pids);
    pids.dedup();
    pids
}

pub use crate::time::utc_minute;

/// How soon a booking must start for a free GPU to mention it: within this, "Free" says "reserved from 14:00".
pub const SOON_MS: u64 = 3 * 3_600_000;

/// The next booking of GPU `device` that starts after `now_ms` and within [`SOON_MS`], if any.
pub fn booked_soon(reservations: &[Reservation], device: u32, now_ms: u64) -> Option<&Reservation> {
    reservations
        .iter()
        .filter(|r| r.devices.contains(&device) && r.start_ms > now_ms && r.start_ms - now_ms <= SOON_MS)
        .min_by_key(|r| r.start_ms)
}

/// What a free GPU says of a booking near: "reserved from 14:00" (in the zone `utc_offset` minutes
/// east of UTC; the date too, as the tables write it, when it starts on another day:
/// "reserved from 2 Dec 00:30").
pub fn free_note(reservations: &[Reservation], device: u32, now_ms: u64, utc_offset: i32) -> Option<String> {
    let r = booked_soon(reservations, device, now_ms)?;
    let offset_ms = i64::from(utc_offset) * 60_000;
    let at = |ms| crate::time_axis::Civil::at(ms, offset_ms);
    let (then, today) = (at(r.start_ms), at(now_ms));
    Some(if then.date() == today.date() {
        format!("reserved from {}", then.time(false))
    } else {
        format!("reserved from {} {}", then.date(), then.time(false))
    })
}

/// Time left as the card says it, in the one duration format ("2h 10m", "45m"), to the minute:
/// "under a minute" below one.
pub fn time_left(ms: u64) -> String {
    if ms < 60_000 { "under a minute".to_owned() } else { crate::time::duration(ms / 60_000 * 60_000) }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_764_597_600_000; // 2025-12-01 14:00 UTC
    const H: u64 = 3_600_000;

    fn request(devices: &[u32], start: u64, end: u64) -> ReservationRequest {
        ReservationRequest { devices: devices.to_vec(), start_ms: start, end_ms: end, note: String::new() }
    }

    fn reservation(id: u64, devices: &[u32], start: u64, end: u64) -> Reservation {
        Reservation {
            id,
            devices: devices.to_vec(),
            user: "ana".into(),
            start_ms: start,
            end_ms: end,
            note: "fine-tuning".into(),
            created_ms: start,
            released_ms: None,
            intruders: Vec::new(),
            redacted: false,
        }
    }

    #[test]
    fn validation_says_what_is_wrong() {
        let v = |r: ReservationRequest| r.validate(4, NOW);
        assert_eq!(v(request(&[], NOW, NOW + H)), Err(ReservationInvalid::NoDevices));
        assert_eq!(v(request(&[4], NOW, NOW + H)), Err(ReservationInvalid::UnknownDevice(4, 4)));
        assert_eq!(v(request(&[1, 1], NOW, NOW + H)), Err(ReservationInvalid::Duplicate(1)));
        assert_eq!(
            v(request(&[1], NOW + H, NOW)),
            Err(ReservationInvalid::EndBeforeStart { start: NOW + H, end: NOW })
        );
        assert_eq!(v(request(&[1], NOW, NOW + 400 * 24 * H)), Err(ReservationInvalid::TooLong { days: 400 }));
        assert_eq!(v(request(&[1], NOW - H, NOW + H)), Err(ReservationInvalid::InThePast));
        assert_eq!(v(request(&[1], NOW + 400 * 24 * H, NOW + 401 * 24 * H)), Err(ReservationInvalid::TooFarAhead));
        let long = ReservationRequest { note: "x".repeat(201), ..request(&[1], NOW, NOW + H) };
        assert_eq!(v(long), Err(ReservationInvalid::NoteTooLong(201)));
        let control = ReservationRequest { note: "a\nb".into(), ..request(&[1], NOW, NOW + H) };
        assert_eq!(v(control), Err(ReservationInvalid::NoteControl));
        let fine = ReservationRequest { note: "  fine-tuning ".into(), ..request(&[2, 0], NOW - 60_000, NOW + H) };
        let fine = v(fine).unwrap();
        assert_eq!((fine.devices, fine.start_ms, fine.note.as_str()), (vec![0, 2], NOW, "fine-tuning"));
    }

    #[test]
    fn a_reservation_lasts_at_least_five_minutes_from_now() {
        let v = |r: ReservationRequest| r.validate(4, NOW);
        assert_eq!(v(request(&[0], NOW, NOW + 1)), Err(ReservationInvalid::TooShort { seconds: 0 }));
        let short = v(request(&[0], NOW, NOW + MIN_LENGTH_MS - 1000)).unwrap_err();
        assert_eq!(short, ReservationInvalid::TooShort { seconds: 299 });
        assert!(short.to_string().contains("the shortest allowed is 5 minutes"), "{short}");
        // A start a little in the past counts from now: what is left must still be five minutes.
        let late = request(&[0], NOW - 4 * 60_000, NOW + 60_000);
        assert_eq!(v(late), Err(ReservationInvalid::TooShort { seconds: 60 }));
        assert!(v(request(&[0], NOW, NOW + MIN_LENGTH_MS)).is_ok(), "exactly five minutes");
    }

    #[test]
    fn notes_lose_bidi_overrides_and_zero_width_characters() {
        let note = "\u{202E}gninut-enif\u{202C} by\u{200B} ana\u{FEFF}\u{2066}";
        let kept = ReservationRequest { note: note.into(), ..request(&[0], NOW, NOW + H) }.validate(4, NOW).unwrap();
        assert_eq!(kept.note, "gninut-enif by ana");
        // Counted after cleaning: 200 letters and some zero-width spaces fit.
        let padded = format!("{}{}", "x".repeat(MAX_NOTE), "\u{200B}".repeat(50));
        let kept = ReservationRequest { note: padded, ..request(&[0], NOW, NOW + H) }.validate(4, NOW).unwrap();
        assert_eq!(kept.note.chars().count(), MAX_NOTE);
        let tab = ReservationRequest { note: "a\tb\u{202E}".into(), ..request(&[0], NOW, NOW + H) };
        assert_eq!(tab.validate(4, NOW), Err(ReservationInvalid::NoteControl), "controls are refused, not dropped");
    }

    #[test]
    fn overlap_needs_a_shared_gpu_and_moment_and_back_to_back_is_fine() {
        let a = reservation(1, &[0, 1], NOW, NOW + 4 * H);
        assert!(a.overlaps(&reservation(2, &[1], NOW + 3 * H, NOW + 5 * H)));
        assert!(!a.overlaps(&reservation(2, &[1], NOW + 4 * H, NOW + 5 * H)), "adjacent");
        assert!(!a.overlaps(&reservation(2, &[2], NOW, NOW + 4 * H)), "another GPU");
        let released = Reservation { released_ms: Some(NOW), ..reservation(2, &[1], NOW, NOW + H) };
        assert!(!a.overlaps(&released));
    }

    #[test]
    fn conflict_names_the_holder_and_the_times() {
        let a = reservation(7, &[1, 2], NOW, NOW + 4 * H);
        assert_eq!(
            a.conflict_message(&[1]),
            "GPU 1 is reserved by ana from 2025-12-01 14:00 UTC to 2025-12-01 18:00 UTC (reservation 7)"
        );
    }

    #[test]
    fn free_leaves_out_gpus_reserved_now_only() {
        let soon = reservation(1, &[1], NOW + H, NOW + 2 * H);
        let now = reservation(2, &[2], NOW - H, NOW + H);
        let fine = Condition::default();
        let devices = [(0, &fine), (1, &fine), (2, &fine)];
        assert_eq!(free_unreserved(devices, &[], &[soon.clone(), now.clone()], NOW), [0, 1]);
        assert_eq!(free_unreserved(devices, &[], &[soon, now], NOW + H), [0, 2], "2 expired, 1 began");
    }

    #[test]
    fn intruders_are_other_users_processes_while_in_force() {
        let r = reservation(1, &[1], NOW, NOW + H);
        let p = |device, pid, user: Option<&str>| GpuProcess {
            user: user.map(str::to_owned),
            ..crate::testing::process(device, pid)
        };
        let processes = [p(1, 30, Some("bo")), p(1, 20, Some("ana")), p(0, 10, Some("bo")), p(1, 40, None)];
        assert_eq!(intruders(&r, &processes, NOW), [30, 40]);
        assert!(intruders(&r, &processes, NOW + H).is_empty(), "expired");
    }

    #[test]
    fn times_read_as_people_say_them() {
        assert_eq!(utc_minute(0), "1970-01-01 00:00 UTC");
        assert_eq!(time_left(2 * H + 10 * 60_000 + 5), "2h 10m");
        assert_eq!(time_left(59_000), "under a minute");
        assert_eq!(time_left(50 * H), "2d 2h");
    }

    #[test]
    fn a_free_gpu_says_when_a_booking_is_near() {
        let list = [reservation(1, &[1], NOW + H, NOW + 2 * H), reservation(2, &[2], NOW + 4 * H, NOW + 5 * H)];
        assert_eq!(free_note(&list, 1, NOW, 0).as_deref(), Some("reserved from 15:00"));
        assert_eq!(free_note(&list, 1, NOW, 60).as_deref(), Some("reserved from 16:00"), "in the viewer's zone");
        assert_eq!(free_note(&list, 1, NOW, 540).as_deref(), Some("reserved from 2 Dec 00:00"));
        assert_eq!(free_note(&list, 2, NOW, 0), None, "not within three hours");
        assert_eq!(free_note(&list, 1, NOW + H, 0), None, "in force: not free, not to come");
        assert_eq!(free_note(&list, 0, NOW, 0), None);
    }

    #[test]
    fn redaction_drops_the_holder_and_the_note() {
        let mut r = reservation(1, &[1], NOW, NOW + H);
        r.redact();
        assert_eq!((r.user.as_str(), r.note.as_str(), r.redacted), ("reserved", "", true));
    }
}
