//! "Held but idle" alerts of one owner as one card: the Alerts list groups the firing, unsilenced
//! idle_held alerts of each owner when there are two or more, so six near-identical cards read as
//! one, with its GPUs and processes listed and one bulk silence.

use shared::alerts::{Alert, Rule};

/// The owner a group names when the server left names out or knows none.
pub const UNKNOWN_OWNER: &str = "owner unknown";

/// One entry of the Alerts list.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    One(Alert),
    /// Two or more firing, unsilenced idle_held alerts of one owner, in list order.
    Group {
        owner: String,
        alerts: Vec<Alert>,
    },
}

/// Who a groupable alert belongs to; `None` for an alert that stays on its own.
fn group_key(alert: &Alert) -> Option<String> {
    (alert.rule == Rule::IdleHeld && alert.resolved_ms.is_none() && alert.silenced.is_none())
        .then(|| alert.user.clone().unwrap_or_else(|| UNKNOWN_OWNER.to_owned()))
}

/// `shown` with each owner's groupable alerts gathered where the first of them stood.
pub fn group(shown: Vec<Alert>) -> Vec<Entry> {
    let mut entries: Vec<Entry> = Vec::with_capacity(shown.len());
    for alert in shown {
        let Some(owner) = group_key(&alert) else {
            entries.push(Entry::One(alert));
            continue;
        };
        let found = entries.iter_mut().find_map(|e| match e {
            Entry::Group { owner: o, alerts } if *o == owner => Some(alerts),
            _ => None,
        });
        match found {
            Some(alerts) => alerts.push(alert),
            None => entries.push(Entry::Group { owner, alerts: vec![alert] }),
        }
    }
    // A group of one is an ordinary card.
    entries
        .into_iter()
        .map(|e| match e {
            Entry::Group { mut alerts, .. } if alerts.len() == 1 => Entry::One(alerts.remove(0)),
            other => other,
        })
        .collect()
}

/// The GPUs of a group's alerts, ascending, each once: what its bulk silence silences.
pub fn gpus(alerts: &[Alert]) -> Vec<u32> {
    let mut gpus: Vec<u32> = alerts.iter().map(|a| a.gpu_index).collect();
    shared::order::sort(&mut gpus);
    gpus.dedup();
    gpus
}

/// "3 processes on GPUs 1, 2 and 5" / "2 processes on GPU 4".
pub fn summary(alerts: &[Alert]) -> String {
    let gpus = gpus(alerts);
    let names: Vec<String> = gpus.iter().map(u32::to_string).collect();
    let list = match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("GPUs {} and {last}", rest.join(", ")),
        _ => format!("GPU {}", names.concat()),
    };
    format!("{} processes on {list}", alerts.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::alerts::{Severity, Silence};

    fn alert(id: u64, rule: Rule, gpu: u32, user: Option<&str>) -> Alert {
        Alert {
            id,
            rule,
            severity: Severity::Warning,
            gpu_index: gpu,
            gpu_uuid: format!("GPU-{gpu}"),
            pid: Some(1000 + id as u32),
            user: user.map(str::to_owned),
            message: String::new(),
            action: String::new(),
            fired_ms: 0,
            resolved_ms: None,
            silenced: None,
            simulated: false,
            redacted: false,
        }
    }

    fn ids(entry: &Entry) -> Vec<u64> {
        match entry {
            Entry::One(a) => vec![a.id],
            Entry::Group { alerts, .. } => alerts.iter().map(|a| a.id).collect(),
        }
    }

    #[test]
    fn one_owners_idle_alerts_gather_in_one_card() {
        let silence = Silence {
            id: 1,
            rule: Rule::IdleHeld,
            gpu_uuid: "GPU-3".into(),
            by: "bo".into(),
            reason: "r".into(),
            from_ms: 0,
            until_ms: 1,
        };
        let list = vec![
            alert(1, Rule::Temperature, 0, None),
            alert(2, Rule::IdleHeld, 1, Some("ana")),
            alert(3, Rule::IdleHeld, 2, Some("bo")),
            alert(4, Rule::IdleHeld, 2, Some("ana")),
            alert(5, Rule::IdleHeld, 5, Some("ana")),
            Alert { silenced: Some(silence), ..alert(6, Rule::IdleHeld, 3, Some("ana")) },
            Alert { resolved_ms: Some(9), ..alert(7, Rule::IdleHeld, 3, Some("ana")) },
        ];
        let entries = group(list);
        let shape: Vec<Vec<u64>> = entries.iter().map(ids).collect();
        assert_eq!(shape, [vec![1], vec![2, 4, 5], vec![3], vec![6], vec![7]], "silenced and resolved stand apart");
        let Entry::Group { owner, alerts } = &entries[1] else { panic!("{entries:?}") };
        assert_eq!(owner, "ana");
        assert_eq!(gpus(alerts), [1, 2, 5]);
        assert_eq!(summary(alerts), "3 processes on GPUs 1, 2 and 5");
        let same_gpu = [alert(8, Rule::IdleHeld, 4, None), alert(9, Rule::IdleHeld, 4, None)];
        assert_eq!(summary(&same_gpu), "2 processes on GPU 4");
        assert!(matches!(&group(same_gpu.to_vec())[0], Entry::Group { owner, .. } if owner == UNKNOWN_OWNER));
    }
}
