//! Whether a GPU can take new work: the one rule behind "free" on the page's "Free:" line, in
//! `/api/processes`, the alerts' `gpu_free`, the Lab's targets and the Fleet.
//!
//! A GPU is free when nothing critical is wrong with it (by [`crate::severity`]'s levels, the ones
//! the overview shows), no process holds it and no reservation holds it now. One with a critical
//! fault is "unhealthy", with the fault in words, whoever holds it.

use serde::{Deserialize, Serialize};

use crate::severity::{Condition, Level, hardware_findings};

/// A GPU that cannot take new work, and why (`unhealthy_devices` in `/api/processes`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct UnhealthyDevice {
    pub index: u32,
    /// Its critical findings in words, most severe first: "lost", "XID 79", "ECC: 2 uncorrected,
    /// row remap pending: reset the GPU", "throttled: thermal".
    pub reason: String,
}

/// Why a GPU in `condition` is unhealthy: its critical findings about the GPU itself (lost, a
/// recent hardware XID, an uncorrectable ECC error, a failed or pending row remap or page
/// retirement, a thermal or hardware slowdown, a temperature past its slowdown threshold);
/// `None` when it has none. A full memory is its users' and no fault.
pub fn unhealthy(condition: &Condition) -> Option<String> {
    let critical: Vec<String> =
        hardware_findings(condition).into_iter().filter(|f| f.level == Level::Critical).map(|f| f.text).collect();
    (!critical.is_empty()).then(|| critical.join(", "))
}

/// Whether a GPU is free: healthy (see [`unhealthy`]), held by no process (`held`: `None` when
/// that is not known, which is never free), in use by none it cannot see
/// ([`crate::in_use::unseen`], kept in the condition) and
/// reserved by no one now.
pub fn is_free(condition: &Condition, held: Option<bool>, reserved: bool) -> bool {
    held == Some(false) && !reserved && unhealthy(condition).is_none() && condition.in_use_unseen.is_none()
}

/// Every unhealthy GPU among `devices`, in the order given.
pub fn unhealthy_devices<'a>(devices: impl IntoIterator<Item = (u32, &'a Condition)>) -> Vec<UnhealthyDevice> {
    devices.into_iter().filter_map(|(index, c)| Some(UnhealthyDevice { index, reason: unhealthy(c)? })).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::health::{DeviceHealth, EccCounts, RemappedRows, XidEvent};
    use crate::in_use::{by_figures, unseen};
    use crate::{DeviceInfo, DeviceSample};

    fn info() -> DeviceInfo {
        DeviceInfo { memory_total: 100, slowdown_temp_c: Some(87), ..crate::testing::device(1) }
    }

    fn of(sample: &DeviceSample, health: &DeviceHealth) -> Condition {
        Condition::of(&info(), Some(sample), Some(health))
    }

    fn xid(code: u64, at: u64) -> XidEvent {
        XidEvent { device: 1, timestamp_ms: at, code, meaning: String::new() }
    }

    #[test]
    fn each_critical_fault_makes_a_gpu_unhealthy_in_words() {
        let fine = DeviceSample { timestamp_ms: 5_000, temperature_c: Some(40), ..Default::default() };
        let health = DeviceHealth::default;
        assert_eq!(unhealthy(&of(&fine, &health())), None);
        let cases = [
            (DeviceSample { lost: Some("fell off the bus".into()), ..fine.clone() }, health(), "lost"),
            (fine.clone(), DeviceHealth { xids: vec![xid(79, 4_000)], ..health() }, "XID 79"),
            (fine.clone(), DeviceHealth { xids: vec![xid(48, 1), xid(13, 2), xid(95, 3)], ..health() }, "XID 48, 95"),
            (
                fine.clone(),
                DeviceHealth { ecc_volatile: EccCounts { uncorrected: Some(2), corrected: None }, ..health() },
                "ECC: 2 uncorrected",
            ),
            (
                fine.clone(),
                DeviceHealth { remapped_rows: RemappedRows { failed: Some(true), ..Default::default() }, ..health() },
                "row remapping failed",
            ),
            (
                fine.clone(),
                DeviceHealth { remapped_rows: RemappedRows { pending: Some(true), ..Default::default() }, ..health() },
                "row remap pending: reset the GPU",
            ),
            (
                DeviceSample { clock_events: Some(vec!["sw_thermal_slowdown".into()]), ..fine.clone() },
                health(),
                "throttled: thermal",
            ),
            (DeviceSample { temperature_c: Some(92), ..fine }, health(), "92 °C, slowdown at 87 °C"),
        ];
        for (sample, health, reason) in cases {
            let condition = of(&sample, &health);
            assert_eq!(unhealthy(&condition).as_deref(), Some(reason));
            assert!(!is_free(&condition, Some(false), false), "{reason} is not free");
        }
    }

    #[test]
    fn warnings_and_history_leave_a_gpu_healthy() {
        let sample = DeviceSample {
            timestamp_ms: 20 * 60 * 1000,
            temperature_c: Some(84),
            memory_used: Some(99),
            clock_events: Some(vec!["sw_power_cap".into()]),
            ..Default::default()
        };
        let health = DeviceHealth {
            // An application's XID now, a hardware one long ago, corrected ECC errors.
            xids: vec![xid(79, 1), xid(13, 20 * 60 * 1000)],
            ecc_volatile: EccCounts { corrected: Some(3), uncorrected: Some(0) },
            ..Default::default()
        };
        let condition = of(&sample, &health);
        assert_eq!(unhealthy(&condition), None);
        assert!(is_free(&condition, Some(false), false));
    }

    #[test]
    fn free_needs_healthy_unheld_unreserved_and_known() {
        let healthy = Condition::default();
        assert!(is_free(&healthy, Some(false), false));
        assert!(!is_free(&healthy, Some(true), false), "held");
        assert!(!is_free(&healthy, Some(false), true), "reserved");
        assert!(!is_free(&healthy, None, false), "who holds it is not known");
        let total = 100 << 30;
        let sample = |used: u64, util: u32| DeviceSample {
            memory_used: Some(used),
            memory_free: Some(total - used),
            gpu_util: Some(util),
            ..Default::default()
        };
        let hidden = Condition::of(&info(), Some(&sample(21 << 30, 0)), None);
        assert!(!is_free(&hidden, Some(false), false), "21 GiB used with no process listed");
        assert_eq!(hidden.in_use_unseen.as_deref(), Some("21.0 GiB used with no process visible"));
        assert_eq!(unseen(&sample(0, 100)).as_deref(), Some("util 100% with no process visible"));
        assert_eq!(unseen(&sample(21 << 30, 100)).as_deref(), Some("21.0 GiB used, util 100% with no process visible"));
        assert!(
            is_free(&Condition::of(&info(), Some(&sample(5 << 20, 0)), None), Some(false), false),
            "a few MiB at 0%"
        );
        assert!(unseen(&sample(256 << 20, 0)).is_some(), "the floor itself counts as used");
        assert!(unseen(&sample((256 << 20) - 1, 0)).is_none(), "just under the floor is idle");
        assert_eq!(by_figures(None, None, None), None, "unknown figures say nothing");
        let lost = Condition { lost: true, ..Condition::default() };
        let xid = Condition { recent_xids: vec![79], ..Condition::default() };
        assert_eq!(
            unhealthy_devices([(0, &healthy), (1, &xid), (2, &lost)]),
            [
                UnhealthyDevice { index: 1, reason: "XID 79".into() },
                UnhealthyDevice { index: 2, reason: "lost".into() }
            ]
        );
    }
}
