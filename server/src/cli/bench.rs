//! `gpudash bench`: the lab's experiments headless, through the same queue,
//! guards and executors as the page, printed as a table or JSON.
//!
//! Its runs stay in this process (no Lab worker process, `lab/isolated/`): bench is a command a person
//! runs for one table and then exits, so nothing lingers in a long-lived server, a crash ends only the
//! command, and it runs with the privileges of whoever typed it.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use shared::lab::{ExperimentKind, ExperimentParams, Run, RunRequest, RunStatus};

use lab::guards::{DeviceProbe, HardwareProbe, SimulatedProbe};
use lab::{Lab, LabConfig, LabGpu, LabHost, LabSetup, cuda, cuda_executors_with_fault};
use store::runs::MemoryRunStore;
use team::export::table;
use telemetry::nvml::NvmlSource;
use telemetry::{GpuSource, hostname};

/// Flags of `gpudash bench`.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// NVML index of the GPU (as nvidia-smi numbers them).
    #[arg(long, default_value_t = 0)]
    pub device: u32,

    /// Experiments to run, in order, by name (a name that is none lists them)
    /// [default: every experiment that runs on one GPU].
    #[arg(value_name = "EXPERIMENT", value_parser = lab::experiments::parse)]
    pub experiments: Vec<ExperimentKind>,

    /// Print the runs as a JSON array (the same shape as GET /api/runs/{id}) instead of a table.
    #[arg(long)]
    pub json: bool,

    /// Run even where other processes compute on the GPU.
    #[arg(long)]
    pub force: bool,

    /// Parameters of one experiment as JSON, e.g. '{"kind":"transfer","sizes":[1048576]}'; repeatable.
    #[arg(long = "params", value_name = "JSON")]
    pub params: Vec<String>,

    /// Hard time limit per experiment (e.g. "5m").
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub time_limit: Duration,

    /// Device memory to leave free for others, MiB.
    #[arg(long, default_value_t = 1024)]
    pub margin_mib: u64,

    /// Use the simulated executor: no GPU needed, every figure made up and labelled so.
    #[arg(long)]
    pub simulate: bool,

    /// NCCL for the collectives experiment: libnccl.so.2 or the folder holding it [default: the loader's
    /// search for libnccl.so.2, then PyTorch's site-packages/nvidia/nccl/lib].
    #[arg(long, value_name = "PATH", env = "GPUDASH_NCCL_LIB")]
    pub nccl_lib: Option<std::path::PathBuf>,
}

/// Runs the experiments; non-zero when one could not run, failed, or a check failed.
pub fn main(args: &BenchArgs) -> ExitCode {
    let mut params = Vec::new();
    for text in &args.params {
        let read = serde_json::from_str::<ExperimentParams>(text).map_err(|e| e.to_string()).and_then(|mut p| {
            let experiment = lab::experiments::find(&p.kind).map_err(|e| e.to_string())?;
            experiment.normalize(&mut p).map_err(|e| e.0)?;
            Ok(p)
        });
        match read {
            Ok(p) => params.push(p),
            Err(e) => {
                eprintln!("gpudash bench: --params '{text}' is not valid ({e})");
                return ExitCode::from(2);
            }
        }
    }
    let kinds = if args.experiments.is_empty() {
        lab::experiments::ALL.iter().filter(|e| !e.multi_gpu()).map(|e| e.kind()).collect()
    } else {
        args.experiments.clone()
    };
    if let Some((i, p)) = params.iter().enumerate().find(|(i, p)| params[..*i].iter().any(|q| q.kind == p.kind)) {
        eprintln!("gpudash bench: --params number {} is the second for {}; give each experiment one", i + 1, p.kind);
        return ExitCode::from(2);
    }
    if let Some(p) = params.iter().find(|p| !kinds.contains(&p.kind)) {
        eprintln!("gpudash bench: --params are for {}, which this run leaves out; name it too", p.kind);
        return ExitCode::from(2);
    }
    if let Some(path) = &args.nccl_lib {
        cuda::nccl::choose_library(path.clone());
    }
    // A kind this host cannot run (collectives without NCCL) is said before CUDA and NVML are needed, in
    // the words the page uses.
    for kind in &kinds {
        let reason = lab::experiments::find(kind).ok().and_then(|e| e.unavailable(args.simulate, &BeforeSetup));
        if let Some(reason) = reason {
            eprintln!("gpudash bench: {kind} cannot run here: {reason}");
            return ExitCode::from(2);
        }
    }
    let config = LabConfig {
        time_limit: args.time_limit,
        idle_release: Duration::from_secs(3600),
        memory_margin: args.margin_mib.saturating_mul(1 << 20),
        ..LabConfig::default()
    };
    // A fault injected on purpose, to show the checks catching it on real hardware (tests/gpu/lab.sh).
    let fault = match cuda::Fault::from_env() {
        Ok(fault) => fault,
        Err(message) => {
            eprintln!("gpudash bench: {message}");
            return ExitCode::from(2);
        }
    };
    if let Some(fault) = fault {
        eprintln!("gpudash bench: injecting the fault '{}' ({}): its check must fail", fault.name(), cuda::FAULT_VAR);
    }
    let setup = match setup(args, config, fault) {
        Ok(s) => s,
        Err(message) => {
            eprintln!("gpudash bench: {message}");
            return ExitCode::from(2);
        }
    };
    let lab = Lab::start(setup);
    let mut runs = Vec::new();
    let mut ok = true;
    for kind in kinds {
        let p =
            params.iter().find(|p| p.kind == kind).cloned().unwrap_or_else(|| ExperimentParams::defaults(kind.clone()));
        let request = RunRequest { device: args.device, params: p, force: args.force };
        let run = match lab.submit(request, &format!("{}@bench", whoami())) {
            Ok(run) => wait(&lab, run.summary.id, args.json),
            Err(e) => {
                eprintln!("gpudash bench: {} on GPU {}: {e}", kind.name(), args.device);
                ok = false;
                continue;
            }
        };
        let Some(run) = run else { continue };
        ok &= run.summary.status == RunStatus::Succeeded && run.summary.passed != Some(false);
        if !args.json {
            println!("{}", table::text(&run));
        }
        runs.push(run);
    }
    lab.shutdown();
    if args.json {
        match serde_json::to_string_pretty(&runs) {
            Ok(text) => println!("{text}"),
            Err(e) => eprintln!("gpudash bench: {e}"),
        }
    }
    if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// The probe before any GPU is opened: it knows no GPU, so an experiment can say only what this host
/// lacks.
struct BeforeSetup;

impl DeviceProbe for BeforeSetup {
    fn memory(&self, _: u32) -> Option<lab::guards::DeviceMemory> {
        None
    }
    fn compute_processes(&self, _: u32) -> Result<Vec<lab::guards::ComputeProcess>, lab::guards::QueryError> {
        Ok(Vec::new())
    }
    fn peaks(&self, _: u32) -> lab::guards::LinkPeaks {
        lab::guards::LinkPeaks::default()
    }
}

fn whoami() -> String {
    std::env::var("USER").unwrap_or_else(|_| "cli".to_owned())
}

/// Polls until the run ends, showing progress on stderr.
fn wait(lab: &Lab, id: u64, quiet: bool) -> Option<Run> {
    let mut last = String::new();
    loop {
        let run = lab.get(id).ok()?;
        if run.summary.status.is_final() {
            if !quiet && !last.is_empty() {
                eprintln!();
            }
            return Some(run);
        }
        if let Some(p) = &run.progress {
            let line = format!("{} {:>3.0}% {}", run.summary.kind.name(), p.fraction * 100.0, p.message);
            if !quiet && line != last {
                eprint!("\r\x1b[2K{line}");
                last = line;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Why `gpudash bench` cannot run on this machine.
#[derive(Debug, thiserror::Error)]
enum SetupError {
    #[error("needs CUDA to run experiments: {0}")]
    Cuda(#[from] cuda::MissingLibraries),
    #[error("needs an NVIDIA GPU and driver: {0}")]
    Driver(#[from] telemetry::nvml::OpenError),
    #[error("no GPU {device} (NVML sees {count}); pick one with --device 0..{}", .count.saturating_sub(1))]
    NoDevice { device: u32, count: u32 },
}

fn setup(args: &BenchArgs, config: LabConfig, fault: Option<cuda::Fault>) -> Result<LabSetup, SetupError> {
    let mut host = LabHost { hostname: hostname(), ..LabHost::default() };
    if args.simulate {
        // Two GPUs at least, so p2p runs too.
        let devices = (0..=args.device.max(1))
            .map(|index| LabGpu { index, name: "Simulated H200 (simulated)".into(), uuid: String::new() })
            .collect();
        let probe = Arc::new(SimulatedProbe::default());
        return Ok(LabSetup::simulated(config, host, devices, probe, Duration::from_millis(5)));
    }
    cuda::availability()?;
    let source = NvmlSource::open(1000)?;
    let gpus = source.devices();
    let count = u32::try_from(gpus.len()).unwrap_or(u32::MAX);
    if !gpus.iter().any(|d| d.index == args.device) {
        return Err(SetupError::NoDevice { device: args.device, count });
    }
    host.driver_version = source.host().driver_version;
    host.cuda_driver_version = source.host().cuda_driver_version;
    // Every GPU, so p2p can pair them; the others run only what --device's runs involve.
    let devices: Vec<LabGpu> =
        gpus.iter().map(|d| LabGpu { index: d.index, name: d.name.clone(), uuid: d.uuid.clone() }).collect();
    let readings = crate::wiring::lab::nvml_readings(Arc::new(source.query()), None);
    let probe: Arc<dyn DeviceProbe> = Arc::new(HardwareProbe::new(readings, &gpus));
    Ok(LabSetup {
        config,
        host,
        executors: Ok(cuda_executors_with_fault(&devices, fault)),
        devices,
        probe,
        store: Arc::new(MemoryRunStore::default()),
        simulated: false,
        // How the GPUs connect: the collectives chart's NVLink or PCIe peak.
        topology: source.topology(),
    })
}
