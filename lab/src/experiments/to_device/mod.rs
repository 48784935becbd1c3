//! The to_device experiment: one tensor's `.to('cuda')`, from pageable memory as `torch.tensor` makes
//! it and from pinned memory as `pin_memory()` makes it. It is the transfer sweep cut to one size and
//! the two host-to-device copies, so its CUDA run, simulation and byte-exact checks are the transfer
//! experiment's; this folder turns that result into the two times a PyTorch user pays.

pub mod params;
pub mod pytorch;

use shared::lab::{ChartSpec, FieldSpec, RunResult, Stats};
use shared::units::{format_bytes, three_digits};

use self::params::ToDeviceParams;
use super::transfer::Transfer;
use super::transfer::report::WRITTEN_BUFFERS_NOTE;
use super::transfer::params::{CopyKind, TransferParams};
use super::{Experiment, GIB, KIB, range};
#[cfg(feature = "cuda")]
use crate::cuda;
use crate::executor::{ExperimentError, RunContext};
use crate::plan::{Footprint, ParamError};
use crate::report::{empty, figure};
use crate::simulation::Simulation;

pub struct ToDevice;

/// The figures' names, which the takeaway reads.
pub const PAGEABLE: &str = "t.to('cuda') from pageable memory";
pub const PINNED: &str = "t.to('cuda', non_blocking=True) from pinned memory";

impl Experiment for ToDevice {
    const NAME: &'static str = "to_device";
    type Params = ToDeviceParams;

    fn describe(&self) -> (&'static str, &'static str) {
        (
            "To device: one tensor's .to('cuda')",
            "Copies one tensor of `bytes` to the GPU from ordinary (pageable) host memory, as t.to('cuda') does, \
             and from page-locked memory, as t.pin_memory().to('cuda', non_blocking=True) does; each copy's \
             time between CUDA events, the destination checked byte for byte after the timed copies.",
        )
    }

    fn fields(&self) -> Vec<FieldSpec> {
        let mut fields = vec![FieldSpec::bytes("bytes")];
        fields.extend(FieldSpec::rounds());
        fields
    }

    fn validate(&self, p: &ToDeviceParams) -> Result<(), ParamError> {
        super::bytes("bytes", p.bytes, 4 * KIB, GIB)?;
        range("warmup", p.warmup, 0, 100, "")?;
        range("repetitions", p.repetitions, 1, 1000, "")
    }

    fn footprint(&self, p: &ToDeviceParams) -> Footprint {
        Footprint { device: p.bytes, pinned_host: p.bytes, host: p.bytes }
    }

    fn estimate_ms(&self, p: &ToDeviceParams) -> u64 {
        Experiment::estimate_ms(&Transfer, &as_transfer(p))
    }

    fn simulate(
        &self,
        p: &ToDeviceParams,
        sim: &Simulation,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError> {
        Ok(times(Experiment::simulate(&Transfer, &as_transfer(p), sim, ctx)?, p.bytes))
    }

    #[cfg(feature = "cuda")]
    fn run_cuda(
        &self,
        p: &ToDeviceParams,
        gpu: &mut cuda::Gpu<'_>,
        ctx: &RunContext<'_>,
    ) -> Result<RunResult, ExperimentError> {
        Ok(times(cuda::transfer::run(gpu.session(ctx)?, &as_transfer(p), ctx)?, p.bytes))
    }
}

/// The transfer run that measures it: one size, both host-to-device copies.
fn as_transfer(p: &ToDeviceParams) -> TransferParams {
    TransferParams {
        sizes: vec![p.bytes],
        copies: vec![CopyKind::H2dPageable, CopyKind::H2dPinned],
        warmup: p.warmup,
        repetitions: p.repetitions,
    }
}

/// The transfer result as the two copies' times, ms (bars), with their rates and the link's share in a
/// note; the checks are kept, and of the transfer's notes the one on written host buffers (the others
/// speak of device copies and the L2, which this run has none of).
fn times(transfer: RunResult, bytes: u64) -> RunResult {
    let mut r = empty(ChartSpec::Bars { y_label: "ms".into() }, "ms");
    let mut rates = Vec::new();
    for (copy, name) in [(CopyKind::H2dPageable, PAGEABLE), (CopyKind::H2dPinned, PINNED)] {
        let Some(gbps) = transfer.series.iter().find(|s| s.name == copy.name()).and_then(|s| s.points.first()) else {
            continue;
        };
        let gbps = gbps.y;
        // ms = bytes / rate: the fastest rate is the shortest time.
        let ms = |rate: f64| bytes as f64 / (rate * 1e9) * 1e3;
        let time = Stats { median: ms(gbps.median), min: ms(gbps.max), max: ms(gbps.min), n: gbps.n };
        r.figures.extend(figure(name, "ms", Some(time)));
        let share = transfer.figures.iter().find(|f| f.name == format!("{} efficiency", copy.name()));
        let share = share.map(|f| format!(", {}% of the link's peak", three_digits(f.stats.median))).unwrap_or_default();
        rates.push(format!("{}: {} GB/s{share}", copy.label(), three_digits(gbps.median)));
    }
    if !rates.is_empty() {
        r.notes.push(format!("A {} tensor: {}.", format_bytes(bytes), rates.join("; ")));
    }
    r.checks = transfer.checks;
    r.notes.extend(transfer.notes.into_iter().filter(|n| n == WRITTEN_BUFFERS_NOTE));
    r.notes.push(
        "Times are CUDA events around each copy. The pinned copy is queued behind a short spin kernel, so the \
         host's cost of submitting it is outside the window, and under 64 MiB it is timed as a batch of copies \
         moving 64 MiB, the window divided by their number; the pageable copy is staged by the host inside the \
         call, so it goes alone, its host work counted."
            .into(),
    );
    r
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use shared::lab::{ExperimentKind, ExperimentParams, Run, RunRequest, RunStatus};

    use crate::guards::SimulatedProbe;
    use crate::{Lab, LabConfig, LabGpu, LabHost, LabSetup};

    fn run_on(lab: &Lab, device: u32) -> Run {
        let params = ExperimentParams::defaults(ExperimentKind::named("to_device"));
        let id = lab.submit(RunRequest { device, params, force: false }, "t").unwrap().summary.id;
        let deadline = base::clock::Deadline::after(Duration::from_secs(10));
        loop {
            let run = lab.get(id).unwrap();
            if run.summary.status.is_final() {
                return run;
            }
            assert!(!deadline.passed(), "run {id} stayed {:?}", run.summary.status);
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Two times whose rates are the transfer model's, pinned the faster; the checks pass on a sound GPU
    /// and fail on one that gives wrong results (the simulator's fault).
    #[test]
    fn a_tensor_to_the_gpu_takes_two_checked_times() {
        let probe = Arc::new(SimulatedProbe::default());
        probe.give_wrong_results(1);
        let gpus = (0..2).map(|index| LabGpu { index, name: format!("GPU {index}"), uuid: String::new() }).collect();
        let setup = LabSetup::simulated(LabConfig::default(), LabHost::default(), gpus, probe, Duration::from_millis(1));
        let lab = Lab::start(setup);
        let sound = run_on(&lab, 0);
        assert_eq!(sound.summary.status, RunStatus::Succeeded, "{:?}", sound.summary.error);
        assert_eq!(sound.params.values["bytes"], 256 << 20, "stored with its defaults");
        let result = sound.result.as_ref().unwrap();
        let names: Vec<&str> = result.figures.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, [super::PAGEABLE, super::PINNED]);
        let (pageable, pinned) = (result.figures[0].stats, result.figures[1].stats);
        // The model's 7.0 and 55.3 GB/s over 256 MiB, plus 15 and 8 µs of latency, with its jitter.
        assert!((pageable.median - 38.4).abs() < 4.0 && (pinned.median - 4.86).abs() < 0.5, "{pageable:?} {pinned:?}");
        assert!(pageable.min <= pageable.median && pageable.median <= pageable.max);
        assert!(pinned.min <= pinned.median && pinned.median <= pinned.max);
        assert_eq!(result.notes.len(), 3, "{:?}", result.notes);
        assert!(!result.notes.iter().any(|n| n.contains("d2d")), "{:?}", result.notes);
        assert_eq!(result.checks.len(), 2);
        assert!(result.checks.iter().all(|c| c.passed), "{:?}", result.checks);
        assert!(sound.takeaway.as_deref().unwrap().contains("pin_memory=True"), "{:?}", sound.takeaway);
        let faulty = run_on(&lab, 1);
        let checks = &faulty.result.as_ref().unwrap().checks;
        assert!(checks.len() == 2 && checks.iter().all(|c| !c.passed), "{checks:?}");
        assert_eq!(faulty.summary.passed, Some(false));
        lab.shutdown();
    }
}
