//! History queries: `GET /api/history` (one GPU's metric), `GET /api/history/all`
//! (every metric of every GPU over one range) and the metrics they can chart.

use serde::{Deserialize, Serialize};

use crate::DeviceSample;

/// A gauge kept in the history database.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Bytes of device memory in use.
    MemoryUsed,
    /// Percent of time a kernel ran.
    GpuUtil,
    /// Percent of time memory was read or written.
    MemUtil,
    /// Watts.
    PowerDraw,
    /// Degrees Celsius.
    Temperature,
    /// MHz.
    SmClock,
    /// MHz.
    MemClock,
    /// Percent of time the SMs had a warp assigned (GPM).
    SmActive,
    /// Percent of time a tensor pipe was busy (GPM).
    TensorActive,
}

impl Metric {
    pub const ALL: [Metric; 9] = [
        Metric::MemoryUsed,
        Metric::GpuUtil,
        Metric::MemUtil,
        Metric::PowerDraw,
        Metric::Temperature,
        Metric::SmClock,
        Metric::MemClock,
        Metric::SmActive,
        Metric::TensorActive,
    ];

    /// The name used in URLs and JSON, e.g. "memory_used".
    pub fn name(self) -> &'static str {
        match self {
            Metric::MemoryUsed => "memory_used",
            Metric::GpuUtil => "gpu_util",
            Metric::MemUtil => "mem_util",
            Metric::PowerDraw => "power_draw",
            Metric::Temperature => "temperature",
            Metric::SmClock => "sm_clock",
            Metric::MemClock => "mem_clock",
            Metric::SmActive => "sm_active",
            Metric::TensorActive => "tensor_active",
        }
    }

    /// Unit of the values, e.g. "bytes", "%", "W".
    pub fn unit(self) -> &'static str {
        match self {
            Metric::MemoryUsed => "bytes",
            Metric::GpuUtil | Metric::MemUtil | Metric::SmActive | Metric::TensorActive => "%",
            Metric::PowerDraw => "W",
            Metric::Temperature => "°C",
            Metric::SmClock | Metric::MemClock => "MHz",
        }
    }

    /// A chart title, e.g. "Memory used".
    pub fn label(self) -> &'static str {
        match self {
            Metric::MemoryUsed => "Memory used",
            Metric::GpuUtil => "GPU utilization",
            Metric::MemUtil => "Memory utilization",
            Metric::PowerDraw => "Power draw",
            Metric::Temperature => "Temperature",
            Metric::SmClock => "SM clock",
            Metric::MemClock => "Memory clock",
            Metric::SmActive => "SM activity",
            Metric::TensorActive => "Tensor activity",
        }
    }

    pub fn from_name(name: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.name() == name)
    }

    /// A sample's value of this metric in its [`unit`](Self::unit): what the server
    /// stores and `/api/history` answers, and what the page merges in from live ticks.
    pub fn value(self, sample: &DeviceSample) -> Option<f64> {
        let value = match self {
            Metric::MemoryUsed => return sample.memory_used.map(|b| b as f64),
            Metric::GpuUtil => sample.gpu_util,
            Metric::MemUtil => sample.mem_util,
            Metric::PowerDraw => return sample.power_draw_mw.map(|mw| f64::from(mw) / 1000.0),
            Metric::Temperature => sample.temperature_c,
            Metric::SmClock => sample.sm_clock_mhz,
            Metric::MemClock => sample.mem_clock_mhz,
            Metric::SmActive => return sample.activity.as_ref()?.sm_active,
            Metric::TensorActive => return sample.activity.as_ref()?.tensor_active,
        };
        value.map(f64::from)
    }
}

/// One bucket of a downsampled series: the extremes survive, so spikes show.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq)]
pub struct HistoryPoint {
    /// Start of the bucket, ms since the Unix epoch.
    pub t: u64,
    pub min: f64,
    pub avg: f64,
    pub max: f64,
}

/// Where the points of a history answer were read from.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    /// Every sample (kept for the raw retention, 48 h by default).
    Raw,
    /// Per-minute min/avg/max rollups (kept for 30 days by default).
    Minute,
}

/// Body of `GET /api/history`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct HistoryResponse {
    pub device: u32,
    pub metric: Metric,
    pub unit: String,
    pub from: u64,
    pub to: u64,
    /// Width of each bucket in ms.
    pub bucket_ms: u64,
    pub resolution: Resolution,
    /// True when the history comes from the simulator.
    pub simulated: bool,
    /// Oldest first, empty buckets left out.
    pub points: Vec<HistoryPoint>,
}

/// The time ranges the page offers and `GET /api/history/all?range=` takes.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HistoryRange {
    #[serde(rename = "5m")]
    FiveMinutes,
    #[serde(rename = "1h")]
    Hour,
    #[serde(rename = "24h")]
    Day,
    #[serde(rename = "7d")]
    Week,
}

impl HistoryRange {
    pub const ALL: [Self; 4] = [Self::FiveMinutes, Self::Hour, Self::Day, Self::Week];

    /// The name in URLs and on the page's buttons, e.g. "24h".
    pub fn key(self) -> &'static str {
        match self {
            Self::FiveMinutes => "5m",
            Self::Hour => "1h",
            Self::Day => "24h",
            Self::Week => "7d",
        }
    }

    pub fn from_key(key: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.key() == key)
    }

    pub fn millis(self) -> u64 {
        const MINUTE: u64 = 60_000;
        match self {
            Self::FiveMinutes => 5 * MINUTE,
            Self::Hour => 60 * MINUTE,
            Self::Day => 24 * 60 * MINUTE,
            Self::Week => 7 * 24 * 60 * MINUTE,
        }
    }
}

/// One GPU's metric in a [`HistoryAllResponse`].
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct HistoryLine {
    pub device: u32,
    pub metric: Metric,
    /// Oldest first, empty buckets left out.
    pub points: Vec<HistoryPoint>,
}

/// Body of `GET /api/history/all`: every metric of every GPU over one range, in one
/// answer, so the page makes one request per range picked.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct HistoryAllResponse {
    pub from: u64,
    pub to: u64,
    /// Width of each bucket in ms, the same for every line.
    pub bucket_ms: u64,
    /// `Minute` when any line was read from the minute rollups.
    pub resolution: Resolution,
    /// True when the history comes from the simulator.
    pub simulated: bool,
    /// Each GPU (by index) and, within it, each metric of [`Metric::ALL`] in order.
    pub lines: Vec<HistoryLine>,
}

impl HistoryAllResponse {
    /// The points of GPU `device`'s `metric`, if the answer has them.
    pub fn line(&self, device: u32, metric: Metric) -> Option<&[HistoryPoint]> {
        self.lines.iter().find(|l| l.device == device && l.metric == metric).map(|l| l.points.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_match_serde() {
        for metric in Metric::ALL {
            assert_eq!(Metric::from_name(metric.name()), Some(metric));
            assert_eq!(serde_json::to_string(&metric).unwrap(), format!("\"{}\"", metric.name()));
        }
        assert_eq!(Metric::from_name("fan"), None);
        for range in HistoryRange::ALL {
            assert_eq!(HistoryRange::from_key(range.key()), Some(range));
            assert_eq!(serde_json::to_string(&range).unwrap(), format!("\"{}\"", range.key()));
        }
        assert_eq!(HistoryRange::from_key("2w"), None);
    }

    #[test]
    fn values_are_in_the_metric_units() {
        let sample = DeviceSample {
            memory_used: Some(1 << 30),
            power_draw_mw: Some(312_500),
            temperature_c: Some(61),
            sm_clock_mhz: Some(1980),
            ..Default::default()
        };
        assert_eq!(Metric::MemoryUsed.value(&sample), Some(f64::from(1u32 << 30)));
        assert_eq!(Metric::PowerDraw.value(&sample), Some(312.5));
        assert_eq!(Metric::Temperature.value(&sample), Some(61.0));
        assert_eq!(Metric::SmClock.value(&sample), Some(1980.0));
        assert_eq!(Metric::GpuUtil.value(&sample), None);
    }
}
