//! The GPU models the simulator imitates, and the people and commands its jobs run as.

use shared::workload::{
    COMPOSE_PROJECT_LABEL, COMPOSE_SERVICE_LABEL, Container, DEFAULT_OWNER_LABEL, Pod, SlurmJob, Workload,
    bounded_labels,
};

use super::MIB;

/// A model the simulator imitates: what `nvidia-smi` would say about it.
pub(super) struct Model {
    pub(super) name: &'static str,
    pub(super) memory_total: u64,
    pub(super) power_limit_mw: u32,
    pub(super) idle_power_mw: u32,
    pub(super) max_sm_clock_mhz: u32,
    pub(super) mem_clock_mhz: u32,
    pub(super) capability: (u32, u32),
    pub(super) pcie_gen: u32,
    pub(super) bus_width: u32,
    pub(super) nvlinks: u32,
}

pub(super) const MODELS: [Model; 4] = [
    Model {
        name: "NVIDIA H200",
        memory_total: 143_771 * MIB,
        power_limit_mw: 700_000,
        idle_power_mw: 75_000,
        max_sm_clock_mhz: 1980,
        mem_clock_mhz: 3201,
        capability: (9, 0),
        pcie_gen: 5,
        bus_width: 6144,
        nvlinks: 18,
    },
    Model {
        name: "NVIDIA H100 80GB HBM3",
        memory_total: 81_559 * MIB,
        power_limit_mw: 700_000,
        idle_power_mw: 70_000,
        max_sm_clock_mhz: 1980,
        mem_clock_mhz: 2619,
        capability: (9, 0),
        pcie_gen: 5,
        bus_width: 5120,
        nvlinks: 18,
    },
    Model {
        name: "NVIDIA A100-SXM4-80GB",
        memory_total: 81_920 * MIB,
        power_limit_mw: 400_000,
        idle_power_mw: 60_000,
        max_sm_clock_mhz: 1410,
        mem_clock_mhz: 1593,
        capability: (8, 0),
        pcie_gen: 4,
        bus_width: 5120,
        nvlinks: 12,
    },
    Model {
        name: "NVIDIA L40S",
        memory_total: 46_068 * MIB,
        power_limit_mw: 350_000,
        idle_power_mw: 35_000,
        max_sm_clock_mhz: 2520,
        mem_clock_mhz: 9001,
        capability: (8, 9),
        pcie_gen: 4,
        bus_width: 384,
        nvlinks: 0,
    },
];

pub(super) const USERS: [&str; 5] = ["ana", "bo", "chen", "dana", "eli"];
pub(super) const COMMANDS: [&str; 5] = [
    "python train.py --model llama-3-8b --batch-size 16 --bf16 --grad-accum 4",
    "torchrun --nproc_per_node 1 finetune.py --config configs/lora.yaml",
    "python -m vllm.entrypoints.openai.api_server --model mistral-7b --gpu-memory-utilization 0.9",
    "python bench_attention.py --seq-len 8192 --heads 32",
    "/opt/conda/bin/python3 -m ipykernel_launcher -f /root/.local/share/jupyter/runtime/kernel-4f2a.json",
];

/// Where a random job of `user` runs, by `pick`: on the host, in a Compose container labelled with
/// its owner, in a Slurm job, or in a Kubernetes pod of the user's namespace (one in four each).
pub(super) fn workload(user: &str, pick: usize, pid: u32, rng: &mut fastrand::Rng) -> Option<Workload> {
    let mut workload = Workload::default();
    match pick % 4 {
        0 => return None,
        1 => {
            let labels =
                [(DEFAULT_OWNER_LABEL, user), (COMPOSE_PROJECT_LABEL, user), (COMPOSE_SERVICE_LABEL, "trainer")];
            workload.container = Some(Container {
                id: format!("{:012x}", rng.u64(..1 << 48)),
                runtime: Some("docker".to_owned()),
                name: Some(format!("{user}-trainer-1")),
                image: Some("nvcr.io/nvidia/pytorch:24.05-py3".to_owned()),
                labels: bounded_labels(labels, DEFAULT_OWNER_LABEL),
                trusted: true,
            });
        }
        2 => {
            workload.job = Some(SlurmJob {
                id: (100_000 + pid).to_string(),
                user: Some(user.to_owned()),
                account: Some("lab".to_owned()),
                partition: Some("gpu".to_owned()),
                verified: true,
            });
        }
        _ => {
            workload.pod = Some(Pod {
                namespace: Some(user.to_owned()),
                name: Some(format!("{user}-finetune-0")),
                container: Some("main".to_owned()),
                uid: None,
                owner: None,
            });
        }
    }
    Some(workload)
}

/// The command of the idle notebook (`Simulator::with_idle_holder`).
pub(super) const NOTEBOOK: &str =
    "/opt/conda/bin/python3 -m ipykernel_launcher -f /home/eli/.local/share/jupyter/runtime/kernel-9c1e.json";

/// The command of a notebook kernel `user` opened (an idle-holder fault's).
pub(super) fn notebook(user: &str, pid: u32) -> String {
    format!(
        "/opt/conda/bin/python3 -m ipykernel_launcher -f /home/{user}/.local/share/jupyter/runtime/kernel-{pid:x}.json"
    )
}

/// What a job's kernels keep busy, as shares of its GPU utilization (GPM's view of it).
pub(super) struct Profile {
    pub(super) sm: f64,
    pub(super) occupancy: f64,
    pub(super) tensor: f64,
    pub(super) dram: f64,
    pub(super) fp32: f64,
    pub(super) fp16: f64,
}

/// One per entry of [`COMMANDS`]. The notebook runs a Python loop of tiny kernels:
/// "GPU util" reads busy while the SMs are nearly idle (measured on an H200: 32 % util, 0.04 % SM).
pub(super) const PROFILES: [Profile; 5] = [
    Profile { sm: 0.95, occupancy: 0.15, tensor: 0.78, dram: 0.2, fp32: 0.08, fp16: 0.04 },
    Profile { sm: 0.9, occupancy: 0.2, tensor: 0.55, dram: 0.3, fp32: 0.12, fp16: 0.06 },
    Profile { sm: 0.6, occupancy: 0.25, tensor: 0.3, dram: 0.7, fp32: 0.1, fp16: 0.05 },
    Profile { sm: 0.97, occupancy: 0.3, tensor: 0.85, dram: 0.35, fp32: 0.05, fp16: 0.1 },
    Profile { sm: 0.0015, occupancy: 0.0005, tensor: 0.0, dram: 0.0005, fp32: 0.0005, fp16: 0.0 },
];
