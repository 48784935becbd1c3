//! `reservation_intruder`: another user's process on a GPU while it is reserved (advisory). One
//! alert per process, whose `user` is the holder (the one to tell); who the intruder is stays
//! out of the message.

use shared::alerts::{Rule, Severity, Silence};
use shared::reservations::is_intruder;

use super::prom::GPU;
use super::{AlertRule, Book, Configured, Gpu, Key, Prom, for_, ms};

pub struct ReservationIntruder;

impl AlertRule for ReservationIntruder {
    type Settings = ();
    const NEEDS_PROCESSES: bool = true;

    fn defaults() -> Configured<()> {
        Configured::on(Severity::Warning, 0, ())
    }

    fn on_gpu(book: &mut Book, rule: &Configured<()>, gpu: &Gpu<'_>, silences: &[Silence], now: u64) {
        for p in gpu.processes {
            let key = Key { rule: Rule::ReservationIntruder, gpu_uuid: gpu.info.uuid.clone(), pid: Some(p.pid) };
            let reservation = gpu.reservation.filter(|r| is_intruder(r, p, now));
            if book.is_firing(&key) {
                if reservation.is_none() {
                    book.resolve(&key, now);
                }
                continue;
            }
            let Some(r) = reservation else {
                book.held(&key, false, 0, now);
                continue;
            };
            if let Some(held) = book.held(&key, true, ms(rule.config.hold), now) {
                let message = format!(
                    "PID {} runs on {} during reservation {} (until {}){}; the holder's process it is not",
                    p.pid,
                    gpu.label(),
                    r.id,
                    shared::reservations::utc_minute(r.end_ms),
                    for_(held)
                );
                let action = "reservations are advisory: ask the process's owner to move to a free GPU, or the \
                              holder to release the reservation";
                let mut draft = book.draft(&rule.config, key, gpu, message, action);
                draft.user = Some(r.user.clone());
                book.fire(draft, silences, now);
            }
        }
    }

    fn condition(_rule: &Configured<()>, held: &str) -> String {
        format!("someone other than the holder runs a process on a reserved GPU (advisory){held}")
    }

    fn prometheus(rule: &Configured<()>) -> Option<Prom> {
        Some(Prom {
            notes: vec![
                "A process whose user is not the holder of the GPU's reservation in force (advisory).".to_owned(),
            ],
            expr: "(gpudash_process_memory_bytes unless on(UUID, user) gpudash_reservation_active) \
                   and on(UUID) gpudash_reservation_active"
                .to_owned(),
            hold: rule.config.hold,
            severity: rule.config.severity.as_str().to_owned(),
            summary: format!("{GPU}: pid {{{{ $labels.pid }}}} ({{{{ $labels.user }}}}) runs on a reserved GPU"),
            description: "Ask the process's owner to move off the GPU, or the holder to release the reservation; \
                          nothing is enforced."
                .to_owned(),
        })
    }
}
