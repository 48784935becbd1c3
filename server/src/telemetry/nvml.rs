//! The real source: NVIDIA's management library through `nvml-wrapper`.
//!
//! `libnvidia-ml.so.1` is loaded at run time, so the same binary starts on a
//! machine without the driver and says why it shows no GPUs.

use std::collections::HashSet;

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::error::NvmlError;
use shared::{ComputeCapability, DeviceInfo, DeviceSample, HostInfo};

use super::GpuSource;

/// GPUs read through NVML.
pub struct NvmlSource {
    nvml: Nvml,
    host: HostInfo,
    devices: Vec<DeviceInfo>,
    /// Fields that already failed with an unexpected error, so each is logged once.
    reported: HashSet<(u32, &'static str)>,
}

impl std::fmt::Debug for NvmlSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlSource").field("devices", &self.devices.len()).finish_non_exhaustive()
    }
}

impl NvmlSource {
    /// Loads NVML and reads every device's static facts.
    ///
    /// Fails with the loader's message when there is no usable driver.
    pub fn open(interval_ms: u64) -> Result<Self, String> {
        let nvml = Nvml::init().map_err(|e| error_chain(&e))?;
        let count = nvml.device_count().map_err(|e| format!("NVML could not count GPUs: {}", error_chain(&e)))?;
        let mut devices = Vec::new();
        for index in 0..count {
            match read_info(&nvml, index) {
                Ok(info) => devices.push(info),
                // A GPU that cannot even be named is left out, the others are shown.
                Err(e) => tracing::warn!(index, "skipping GPU: {}", error_chain(&e)),
            }
        }
        let host = HostInfo {
            hostname: super::hostname(),
            driver_version: nvml.sys_driver_version().ok(),
            cuda_driver_version: nvml.sys_cuda_driver_version().ok().map(cuda_version),
            simulated: false,
            gpu_error: (devices.is_empty()).then(|| "NVML found no NVIDIA GPU on this machine".to_owned()),
            interval_ms,
            version: env!("CARGO_PKG_VERSION").to_owned(),
            history_path: None,
        };
        Ok(Self { nvml, host, devices, reported: HashSet::new() })
    }

    /// Unwraps a reading; unsupported fields are `None` quietly, other errors once in the log.
    fn field<T>(&mut self, index: u32, name: &'static str, result: Result<T, NvmlError>) -> Option<T> {
        match result {
            Ok(value) => Some(value),
            Err(NvmlError::NotSupported) => None,
            Err(e) => {
                if self.reported.insert((index, name)) {
                    tracing::warn!(index, field = name, "NVML read failed: {}", error_chain(&e));
                }
                None
            }
        }
    }
}

impl GpuSource for NvmlSource {
    fn host(&self) -> HostInfo {
        self.host.clone()
    }

    fn devices(&self) -> Vec<DeviceInfo> {
        self.devices.clone()
    }

    fn sample(&mut self, timestamp_ms: u64) -> Vec<DeviceSample> {
        let indexes: Vec<u32> = self.devices.iter().map(|d| d.index).collect();
        indexes.into_iter().map(|index| self.sample_device(index, timestamp_ms)).collect()
    }
}

impl NvmlSource {
    fn sample_device(&mut self, index: u32, timestamp_ms: u64) -> DeviceSample {
        let mut sample = DeviceSample { index, timestamp_ms, ..DeviceSample::default() };
        // Reads are collected first: the device handle borrows `self.nvml`.
        let readings = match self.nvml.device_by_index(index) {
            Ok(device) => Readings {
                memory: device.memory_info().map(|m| (m.used, m.free)),
                utilization: device.utilization_rates().map(|u| (u.gpu, u.memory)),
                temperature: device.temperature(TemperatureSensor::Gpu),
                power_draw: device.power_usage(),
                power_limit: device.enforced_power_limit(),
                sm_clock: device.clock_info(Clock::SM),
                mem_clock: device.clock_info(Clock::Memory),
            },
            Err(e) => {
                let _ = self.field::<()>(index, "handle", Err(e));
                return sample;
            }
        };
        if let Some((used, free)) = self.field(index, "memory", readings.memory) {
            sample.memory_used = Some(used);
            sample.memory_free = Some(free);
        }
        if let Some((gpu, memory)) = self.field(index, "utilization", readings.utilization) {
            sample.gpu_util = Some(gpu);
            sample.mem_util = Some(memory);
        }
        sample.temperature_c = self.field(index, "temperature", readings.temperature);
        sample.power_draw_mw = self.field(index, "power draw", readings.power_draw);
        sample.power_limit_mw = self.field(index, "power limit", readings.power_limit);
        sample.sm_clock_mhz = self.field(index, "SM clock", readings.sm_clock);
        sample.mem_clock_mhz = self.field(index, "memory clock", readings.mem_clock);
        sample
    }
}

type Reading<T> = Result<T, NvmlError>;

struct Readings {
    memory: Reading<(u64, u64)>,
    utilization: Reading<(u32, u32)>,
    temperature: Reading<u32>,
    power_draw: Reading<u32>,
    power_limit: Reading<u32>,
    sm_clock: Reading<u32>,
    mem_clock: Reading<u32>,
}

fn read_info(nvml: &Nvml, index: u32) -> Result<DeviceInfo, NvmlError> {
    let device = nvml.device_by_index(index)?;
    let optional = |r: Result<String, NvmlError>| r.unwrap_or_else(|_| "n/a".to_owned());
    Ok(DeviceInfo {
        index,
        name: device.name()?,
        uuid: optional(device.uuid()),
        pci_bus_id: optional(device.pci_info().map(|p| p.bus_id)),
        compute_capability: device.cuda_compute_capability().ok().and_then(|c| {
            Some(ComputeCapability { major: u32::try_from(c.major).ok()?, minor: u32::try_from(c.minor).ok()? })
        }),
        memory_total: device.memory_info()?.total,
        simulated: false,
    })
}

/// NVML's CUDA version number (e.g. 13000) as "13.0".
fn cuda_version(version: i32) -> String {
    format!("{}.{}", version / 1000, (version % 1000) / 10)
}

/// An error and its causes on one line: "a: b: c".
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_versions_read_like_nvidia_smi() {
        assert_eq!(cuda_version(13000), "13.0");
        assert_eq!(cuda_version(12040), "12.4");
    }

    #[test]
    fn without_a_driver_the_error_names_the_library() {
        // CI machines have no NVIDIA driver: opening must fail with the loader's words, not panic.
        if std::path::Path::new("/proc/driver/nvidia").exists() {
            return;
        }
        let err = NvmlSource::open(1000).unwrap_err();
        assert!(err.contains("libnvidia-ml"), "{err}");
    }
}
