//! `device_lost`: the GPU stopped answering (fell off the bus).

use shared::alerts::{Rule, Severity, Silence};

use super::prom::GPU;
use super::{AlertRule, Book, Configured, Gpu, Key, Prom, for_, ms};

pub struct DeviceLost;

impl AlertRule for DeviceLost {
    type Settings = ();

    fn defaults() -> Configured<()> {
        Configured::on(Severity::Critical, 0, ())
    }

    fn on_gpu(book: &mut Book, rule: &Configured<()>, gpu: &Gpu<'_>, silences: &[Silence], now: u64) {
        let key = Key::gpu(Rule::DeviceLost, &gpu.info.uuid);
        let Some(sample) = gpu.sample else { return };
        match &sample.lost {
            None => book.resolve(&key, now),
            Some(reason) => {
                if let Some(held) = book.held(&key, true, ms(rule.config.hold), now) {
                    let message = format!("{} stopped answering{}: {reason}", gpu.label(), for_(held));
                    let action = "check `nvidia-smi` and the kernel log (dmesg) for XID 79; the GPU usually needs a \
                                  reset or a reboot, and the jobs on it are lost";
                    book.fire(book.draft(&rule.config, key, gpu, message, action), silences, now);
                }
            }
        }
    }

    fn condition(_rule: &Configured<()>, held: &str) -> String {
        format!("the GPU stops answering (fell off the bus){held}")
    }

    fn prometheus(rule: &Configured<()>) -> Option<Prom> {
        Some(Prom {
            notes: Vec::new(),
            expr: "gpudash_device_lost == 1".to_owned(),
            hold: rule.config.hold,
            severity: rule.config.severity.as_str().to_owned(),
            summary: format!("{GPU} stopped answering (fallen off the bus)"),
            description: "Check the GPU's power and seating and the kernel log (XID 79); the node usually needs a \
                          reboot."
                .to_owned(),
        })
    }
}
