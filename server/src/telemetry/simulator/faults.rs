//! Faults the simulator injects (`--simulate-fault`), so tests and demos show how gpudash copes.

/// A fault the simulator injects, for tests and demos of how gpudash copes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// GPU `device` stops answering `after_ms` after the first sample (like XID 79, fallen off the bus).
    Lost { device: u32, after_ms: u64 },
    /// Every lab run on GPU `device` observes a wrong result (a flipped byte in a copy, a wrong GEMM
    /// element, a pool that cached nothing, a wrong stream output), so its correctness checks fail.
    WrongResult { device: u32 },
}

/// A `--simulate-fault` value the simulator does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{0}' is not a fault; the simulator knows lost:INDEX@DELAY (e.g. lost:1@30s: GPU 1 falls off the bus after \
     30 s) and wrong-result:INDEX (e.g. wrong-result:0: GPU 0's lab runs produce wrong results, so their checks fail)"
)]
pub struct FaultError(pub String);

impl std::str::FromStr for Fault {
    type Err = FaultError;

    /// `lost:INDEX@DELAY`, e.g. `lost:1@30s`, or `wrong-result:INDEX`, e.g. `wrong-result:0`.
    fn from_str(text: &str) -> Result<Self, FaultError> {
        let usage = || FaultError(text.to_owned());
        if let Some(device) = text.trim().strip_prefix("wrong-result:") {
            return Ok(Fault::WrongResult { device: device.parse().map_err(|_| usage())? });
        }
        let rest = text.trim().strip_prefix("lost:").ok_or_else(usage)?;
        let (device, delay) = rest.split_once('@').ok_or_else(usage)?;
        let device = device.parse().map_err(|_| usage())?;
        let after = humantime::parse_duration(delay).map_err(|_| usage())?;
        Ok(Fault::Lost { device, after_ms: u64::try_from(after.as_millis()).unwrap_or(u64::MAX) })
    }
}

impl Fault {
    /// Why `device` is lost at `now_ms` when sampling began at `first_ms`, if this fault says so.
    pub fn lost_reason(&self, device: u32, first_ms: u64, now_ms: u64) -> Option<String> {
        match *self {
            Fault::Lost { device: d, after_ms } if d == device && now_ms >= first_ms.saturating_add(after_ms) => {
                Some(format!("GPU {device} is lost: GPU is lost (simulated fault)"))
            }
            Fault::Lost { .. } | Fault::WrongResult { .. } => None,
        }
    }

    /// The GPU whose lab runs this fault makes observe wrong results, if it is such a fault.
    pub fn wrong_result_device(&self) -> Option<u32> {
        match *self {
            Fault::WrongResult { device } => Some(device),
            Fault::Lost { .. } => None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn faults_parse_or_say_the_syntax() {
        assert_eq!("lost:3@1m".parse::<Fault>(), Ok(Fault::Lost { device: 3, after_ms: 60_000 }));
        assert_eq!("wrong-result:2".parse::<Fault>(), Ok(Fault::WrongResult { device: 2 }));
        for bad in ["lost", "lost:x@1s", "lost:1@soon", "melt:1@1s", "wrong-result:", "wrong-result:-1", "wrong:1"] {
            let message = bad.parse::<Fault>().unwrap_err().to_string();
            assert!(message.contains("lost:INDEX@DELAY") && message.contains("wrong-result:INDEX"), "{bad}: {message}");
        }
    }

    #[test]
    fn a_lost_fault_strikes_its_gpu_only_and_only_after_its_delay() {
        let fault = Fault::Lost { device: 1, after_ms: 30_000 };
        assert_eq!(fault.lost_reason(1, 1_000, 30_999), None);
        assert_eq!(
            fault.lost_reason(1, 1_000, 31_000).as_deref(),
            Some("GPU 1 is lost: GPU is lost (simulated fault)")
        );
        assert_eq!(fault.lost_reason(0, 1_000, 99_000), None);
        assert_eq!(fault.wrong_result_device(), None);
    }

    #[test]
    fn a_wrong_result_fault_loses_no_gpu_and_names_its_gpu() {
        let fault = Fault::WrongResult { device: 1 };
        assert_eq!(fault.lost_reason(1, 0, u64::MAX), None);
        assert_eq!(fault.wrong_result_device(), Some(1));
    }
}
