//! `ecc`: an uncorrectable ECC error, a failed row remap, or a remap pending a reset.

use shared::alerts::{Rule, Severity, Silence};

use super::prom::GPU;
use super::{AlertRule, Book, Configured, Gpu, Key, Prom, for_, ms};

pub struct Ecc;

impl AlertRule for Ecc {
    type Settings = ();

    fn defaults() -> Configured<()> {
        Configured::on(Severity::Critical, 0, ())
    }

    fn on_gpu(book: &mut Book, rule: &Configured<()>, gpu: &Gpu<'_>, silences: &[Silence], now: u64) {
        let key = Key::gpu(Rule::Ecc, &gpu.info.uuid);
        let Some(health) = gpu.health else { return };
        let mut what = Vec::new();
        if let Some(n) = health.ecc_volatile.uncorrected.filter(|n| *n > 0) {
            what.push(format!("{n} uncorrectable ECC error{} since the driver loaded", if n == 1 { "" } else { "s" }));
        }
        if health.remapped_rows.failed == Some(true) {
            what.push("a row remap failed".to_owned());
        }
        if health.remapped_rows.pending == Some(true) {
            what.push("a row remap is pending a reset".to_owned());
        }
        if book.is_firing(&key) {
            if what.is_empty() {
                book.resolve(&key, now);
            }
        } else if let Some(held) = book.held(&key, !what.is_empty(), ms(rule.config.hold), now) {
            let message = format!("{} has {}{}", gpu.label(), what.join(", "), for_(held));
            let action = "drain the GPU and reset it (`nvidia-smi -r`) when its jobs end; if a remap failed or \
                          errors come back, the GPU needs replacing: open a ticket with its serial";
            book.fire(book.draft(&rule.config, key, gpu, message, action), silences, now);
        }
    }

    fn condition(_rule: &Configured<()>, held: &str) -> String {
        format!("an uncorrectable ECC error, a failed row remap or a remap pending a reset{held}")
    }

    fn prometheus(rule: &Configured<()>) -> Option<Prom> {
        Some(Prom {
            notes: vec![
                "Any of: an uncorrectable volatile ECC error, a failed row remap, a row remap pending a reset.".into(),
            ],
            expr: "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL > 0 or DCGM_FI_DEV_ROW_REMAP_FAILURE == 1 \
                   or DCGM_FI_DEV_ROW_REMAP_PENDING == 1"
                .to_owned(),
            hold: rule.config.hold,
            severity: rule.config.severity.as_str().to_owned(),
            summary: format!("{GPU}: uncorrectable ECC error or row remapping failure/pending"),
            description: "Drain the GPU and reset it (nvidia-smi -r) to apply pending remaps; a failed remap means \
                          the GPU should be replaced."
                .to_owned(),
        })
    }
}
