//! Each rule as it runs now, in words, for the Alerts tab (`RuleSummary::condition`).

use shared::alerts::{Rule, RuleSummary};

use super::config::Rules;
use super::state::human;

/// Every rule in [`Rule::ALL`] order.
pub fn summaries(rules: &Rules) -> Vec<RuleSummary> {
    Rule::ALL
        .into_iter()
        .map(|rule| {
            let config = rules.rule(rule);
            RuleSummary { rule, enabled: config.enabled, severity: config.severity, condition: condition(rules, rule) }
        })
        .collect()
}

fn condition(rules: &Rules, rule: Rule) -> String {
    let hold = rules.rule(rule).hold;
    let held = if hold.is_zero() {
        String::new()
    } else {
        format!(" for {}", human(u64::try_from(hold.as_millis()).unwrap_or(u64::MAX)))
    };
    match rule {
        Rule::Temperature => {
            let c = rules.temperature_celsius;
            format!(
                "temperature ≥ {c} °C{held}; critical from the GPU's own slowdown threshold; resolves below {} °C",
                c.saturating_sub(3)
            )
        }
        Rule::ClockEvents => format!("clocks held down by {}{held}", rules.clock_event_reasons.join(" or ")),
        Rule::Xid => {
            let quiet = human(u64::try_from(rules.xid_quiet.as_millis()).unwrap_or(u64::MAX));
            let ignored = if rules.xid_ignore.is_empty() {
                String::new()
            } else {
                let codes: Vec<String> = rules.xid_ignore.iter().map(u64::to_string).collect();
                format!(" (except {})", codes.join(", "))
            };
            let application: Vec<String> = shared::severity::APPLICATION_XIDS.iter().map(u64::to_string).collect();
            format!(
                "any XID error{ignored}, critical but for an application's ({}); resolves after {quiet} without one",
                application.join(", ")
            )
        }
        Rule::Ecc => format!("an uncorrectable ECC error, a failed row remap or a remap pending a reset{held}"),
        Rule::DeviceLost => format!("the GPU stops answering (fell off the bus){held}"),
        Rule::MemoryFull => {
            let p = rules.memory_full_percent;
            format!("memory used ≥ {p}%{held}; resolves below {}%", p - 2.0)
        }
        Rule::IdleHeld => format!("a process holds memory on a GPU that computes nothing (see --idle-after){held}"),
        Rule::GpuFree => format!("a GPU that was in use has no process left{held}"),
        Rule::ReservationIntruder => {
            format!("someone other than the holder runs a process on a reserved GPU (advisory){held}")
        }
        Rule::Oom => {
            let quiet = human(u64::try_from(rules.oom_quiet.as_millis()).unwrap_or(u64::MAX));
            format!(
                "a PyTorch process attached with gpudash.attach() raised torch.cuda.OutOfMemoryError; resolves after \
                 {quiet} without another, or when the process stops reporting"
            )
        }
    }
}
