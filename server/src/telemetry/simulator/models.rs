//! The GPU models the simulator imitates, and the people and commands its jobs run as.

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
