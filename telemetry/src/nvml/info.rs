//! A device's static facts, read once at start, and NVML's enums as the names the API uses.

use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::device::ThrottleReasons;
use nvml_wrapper::enum_wrappers::device::{Clock, ComputeMode, PerformanceState, TemperatureThreshold};
use nvml_wrapper::enums::device::SampleValue;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::structs::device::FieldId;
use nvml_wrapper::sys_exports::field_id::NVML_FI_DEV_NVLINK_LINK_COUNT;
use shared::{Clocks, ComputeCapability, DeviceInfo, PcieLink};

pub(super) fn read_info(nvml: &Nvml, index: u32) -> Result<(DeviceInfo, u32), NvmlError> {
    let device = nvml.device_by_index(index)?;
    let optional = |r: Result<String, NvmlError>| r.unwrap_or_else(|_| "n/a".to_owned());
    let max = |clock| device.max_clock_info(clock).ok();
    let nvlinks = device
        .field_values_for(&[FieldId(NVML_FI_DEV_NVLINK_LINK_COUNT)])
        .ok()
        .and_then(|v| v.into_iter().next())
        .and_then(|v| v.ok())
        .and_then(|v| v.value.ok())
        .and_then(|v| as_u64(&v))
        .map_or(0, |n| u32::try_from(n).unwrap_or(0));
    let info = DeviceInfo {
        index,
        name: device.name()?,
        uuid: optional(device.uuid()),
        pci_bus_id: optional(device.pci_info().map(|p| p.bus_id)),
        compute_capability: device.cuda_compute_capability().ok().and_then(|c| {
            Some(ComputeCapability { major: u32::try_from(c.major).ok()?, minor: u32::try_from(c.minor).ok()? })
        }),
        memory_total: device.memory_info()?.total,
        simulated: false,
        max_clocks: Clocks {
            graphics_mhz: max(Clock::Graphics),
            sm_mhz: max(Clock::SM),
            memory_mhz: max(Clock::Memory),
        },
        pcie_max: device
            .max_pcie_link_gen()
            .ok()
            .zip(device.max_pcie_link_width().ok())
            .map(|(generation, width)| PcieLink { generation, width }),
        memory_bus_width: device.memory_bus_width().ok(),
        nvlink_links: nvlinks,
        // NotSupported (and any refusal) is "n/a": the page then judges no temperature.
        slowdown_temp_c: device.temperature_threshold(TemperatureThreshold::Slowdown).ok(),
        shutdown_temp_c: device.temperature_threshold(TemperatureThreshold::Shutdown).ok(),
    };
    Ok((info, device.num_fans().unwrap_or(0)))
}

pub(super) fn as_u64(value: &SampleValue) -> Option<u64> {
    match *value {
        SampleValue::U64(v) => Some(v),
        SampleValue::U32(v) => Some(u64::from(v)),
        SampleValue::I64(v) => u64::try_from(v).ok(),
        SampleValue::F64(v) => (v >= 0.0).then_some(v as u64),
    }
}

pub(super) fn pstate_number(state: &PerformanceState) -> Option<u32> {
    use PerformanceState as P;
    Some(match state {
        P::Zero => 0,
        P::One => 1,
        P::Two => 2,
        P::Three => 3,
        P::Four => 4,
        P::Five => 5,
        P::Six => 6,
        P::Seven => 7,
        P::Eight => 8,
        P::Nine => 9,
        P::Ten => 10,
        P::Eleven => 11,
        P::Twelve => 12,
        P::Thirteen => 13,
        P::Fourteen => 14,
        P::Fifteen => 15,
        P::Unknown => return None,
    })
}

/// Clock-event (throttle) reasons as the names nvidia-smi -q uses, snake_cased.
pub fn clock_event_names(reasons: ThrottleReasons) -> Vec<String> {
    // In the order of `shared::telemetry::CLOCK_EVENT_NAMES`.
    const FLAGS: [ThrottleReasons; 9] = [
        ThrottleReasons::GPU_IDLE,
        ThrottleReasons::APPLICATIONS_CLOCKS_SETTING,
        ThrottleReasons::SW_POWER_CAP,
        ThrottleReasons::HW_SLOWDOWN,
        ThrottleReasons::SYNC_BOOST,
        ThrottleReasons::SW_THERMAL_SLOWDOWN,
        ThrottleReasons::HW_THERMAL_SLOWDOWN,
        ThrottleReasons::HW_POWER_BRAKE_SLOWDOWN,
        ThrottleReasons::DISPLAY_CLOCK_SETTING,
    ];
    FLAGS
        .iter()
        .zip(shared::telemetry::CLOCK_EVENT_NAMES)
        .filter(|(flag, _)| reasons.contains(**flag))
        .map(|(_, name)| name.to_owned())
        .collect()
}

pub(super) fn compute_mode_name(mode: &ComputeMode) -> &'static str {
    match mode {
        ComputeMode::Default => "default",
        ComputeMode::ExclusiveThread => "exclusive_thread",
        ComputeMode::Prohibited => "prohibited",
        ComputeMode::ExclusiveProcess => "exclusive_process",
    }
}
