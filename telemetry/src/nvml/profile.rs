//! Per-call costs of the fast path's NVML calls, for `gpudash-bench sampler --per-call`.

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};

use super::NvmlSource;

impl NvmlSource {
    /// Mean cost of each fast-path NVML call on GPU `index`, µs, over `iterations` calls: what
    /// `gpudash-bench sampler --per-call` prints to decide what belongs on the fast path.
    pub fn profile_calls(&self, index: u32, iterations: u32) -> Vec<(&'static str, f64)> {
        let Ok(device) = self.nvml.device_by_index(index) else { return Vec::new() };
        let time = |f: &dyn Fn() -> bool| {
            let start = base::clock::Stopwatch::start();
            for _ in 0..iterations {
                std::hint::black_box(f());
            }
            start.elapsed().as_secs_f64() * 1e6 / f64::from(iterations.max(1))
        };
        vec![
            ("device_by_index", time(&|| self.nvml.device_by_index(index).is_ok())),
            ("memory_info", time(&|| device.memory_info().is_ok())),
            ("utilization_rates", time(&|| device.utilization_rates().is_ok())),
            ("temperature", time(&|| device.temperature(TemperatureSensor::Gpu).is_ok())),
            ("power_usage", time(&|| device.power_usage().is_ok())),
            ("power_management_limit", time(&|| device.power_management_limit().is_ok())),
            ("enforced_power_limit", time(&|| device.enforced_power_limit().is_ok())),
            ("clock_info(SM)", time(&|| device.clock_info(Clock::SM).is_ok())),
            ("clock_info(Memory)", time(&|| device.clock_info(Clock::Memory).is_ok())),
            ("clock_info(Graphics)", time(&|| device.clock_info(Clock::Graphics).is_ok())),
            ("performance_state", time(&|| device.performance_state().is_ok())),
            ("current_throttle_reasons", time(&|| device.current_throttle_reasons().is_ok())),
            ("num_fans", time(&|| device.num_fans().is_ok())),
            ("encoder_utilization", time(&|| device.encoder_utilization().is_ok())),
            ("decoder_utilization", time(&|| device.decoder_utilization().is_ok())),
            ("current_pcie_link_gen", time(&|| device.current_pcie_link_gen().is_ok())),
            ("current_pcie_link_width", time(&|| device.current_pcie_link_width().is_ok())),
            ("running_compute_processes", time(&|| device.running_compute_processes().is_ok())),
            ("is_ecc_enabled", time(&|| device.is_ecc_enabled().is_ok())),
            ("bar1_memory_info", time(&|| device.bar1_memory_info().is_ok())),
        ]
    }
}
