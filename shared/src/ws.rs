//! Messages on the `/ws` WebSocket.
//!
//! The server sends a [`ServerMessage::Snapshot`] on connect (and again when a
//! client fell behind), then one [`ServerMessage::Tick`] per sampling period.
//! Ticks carry a sequence number so a client drops what it already has and a
//! reconnect neither loses nor repeats points.

use std::fmt;

use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

use crate::health::DeviceHealth;
use crate::processes::GpuProcess;
use crate::tagged::{leading_tag, rest};
use crate::telemetry::{DeviceInfo, DeviceSample, HostInfo, MemoryPoint};

/// One sampling period's readings of every device.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Tick {
    /// Increases by one per tick; starts at 1 when the server starts.
    pub seq: u64,
    pub samples: Vec<DeviceSample>,
}

/// The slower loop's readings of every device.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Default)]
pub struct Details {
    pub health: Vec<DeviceHealth>,
    pub processes: Vec<GpuProcess>,
    /// Workload sources (container engine, kubelet, Slurm's environment) that are configured or
    /// found but do not answer, one sentence each: `/healthz` and the page name them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workload_problems: Vec<String>,
    /// GPUs the kubelet says the scheduler gave to a pod, by index: for the server's lab guard;
    /// not sent (the page names pods from their processes).
    #[serde(skip)]
    pub scheduled: Vec<crate::workload::ScheduledGpu>,
}

/// Recent memory history of one device, oldest first.
///
/// On the wire it is columnar, with timestamps as deltas
/// (`{"index":0,"start_ms":…,"dt_ms":[0,1000,…],"memory_used":[…]}`): a third of the
/// bytes of one object per point. Every socket's write buffer grows to the largest
/// message it sent, and the snapshot is that message, so its size is the server's
/// memory per viewer.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(from = "CompactHistory", into = "CompactHistory")]
pub struct DeviceHistory {
    pub index: u32,
    pub points: Vec<MemoryPoint>,
}

#[derive(Serialize, Deserialize)]
struct CompactHistory {
    index: u32,
    start_ms: u64,
    dt_ms: Vec<u64>,
    memory_used: Vec<u64>,
}

impl From<DeviceHistory> for CompactHistory {
    fn from(history: DeviceHistory) -> Self {
        let start_ms = history.points.first().map_or(0, |p| p.timestamp_ms);
        let mut previous = start_ms;
        let dt_ms = history
            .points
            .iter()
            .map(|p| {
                let dt = p.timestamp_ms.saturating_sub(previous);
                previous = p.timestamp_ms;
                dt
            })
            .collect();
        Self {
            index: history.index,
            start_ms,
            dt_ms,
            memory_used: history.points.iter().map(|p| p.memory_used).collect(),
        }
    }
}

impl From<CompactHistory> for DeviceHistory {
    fn from(compact: CompactHistory) -> Self {
        let mut timestamp_ms = compact.start_ms;
        let points = compact
            .dt_ms
            .iter()
            .zip(&compact.memory_used)
            .map(|(dt, &memory_used)| {
                timestamp_ms = timestamp_ms.saturating_add(*dt);
                MemoryPoint { timestamp_ms, memory_used }
            })
            .collect();
        Self { index: compact.index, points }
    }
}

/// Everything a fresh page needs. `seq` is the last tick it includes.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub seq: u64,
    pub host: HostInfo,
    pub devices: Vec<DeviceInfo>,
    pub latest: Vec<DeviceSample>,
    pub history: Vec<DeviceHistory>,
    /// Latest slow-loop readings, one per device that has one.
    #[serde(default)]
    pub health: Vec<DeviceHealth>,
    /// Every GPU process right now.
    #[serde(default)]
    pub processes: Vec<GpuProcess>,
    /// As [`Details::workload_problems`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workload_problems: Vec<String>,
}

/// On the wire an object tagged by `"type"`, the tag first: `{"type":"tick","seq":7,…}`.
/// (Decoded by hand, tag first: see [`crate::tagged`].)
#[derive(Serialize, Debug, Clone, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMessage {
    Snapshot(Snapshot),
    Tick(Tick),
    /// Health and processes, sent when the slower loop has read them (every couple of seconds).
    Details(Details),
    /// The GPU lab: queue, progress and finished runs (see [`crate::lab::LabEvent`]).
    Lab(crate::lab::LabEvent),
    /// An alert fired, resolved or was silenced (see [`crate::alerts::AlertEvent`]).
    Alert(crate::alerts::AlertEvent),
    /// The client sent something the server does not accept.
    Error {
        message: String,
    },
}

impl<'de> Deserialize<'de> for ServerMessage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "snake_case")]
        enum Type {
            Snapshot,
            Tick,
            Details,
            Lab,
            Alert,
            Error,
        }
        #[derive(Deserialize)]
        struct ErrorFields {
            message: String,
        }
        struct TagFirst;
        impl<'de> Visitor<'de> for TagFirst {
            type Value = ServerMessage;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a message: an object whose first key is \"type\"")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ServerMessage, A::Error> {
                let kind = leading_tag(&mut map, "type")?;
                let rest = rest(map);
                Ok(match kind {
                    Type::Snapshot => ServerMessage::Snapshot(Snapshot::deserialize(rest)?),
                    Type::Tick => ServerMessage::Tick(Tick::deserialize(rest)?),
                    Type::Details => ServerMessage::Details(Details::deserialize(rest)?),
                    Type::Lab => ServerMessage::Lab(crate::lab::LabEvent::deserialize(rest)?),
                    Type::Alert => ServerMessage::Alert(crate::alerts::AlertEvent::deserialize(rest)?),
                    Type::Error => ServerMessage::Error { message: ErrorFields::deserialize(rest)?.message },
                })
            }
        }
        deserializer.deserialize_map(TagFirst)
    }
}

/// What a browser may send. Anything else is answered with an error.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ClientMessage {
    /// Ask for a fresh snapshot (e.g. after the tab was hidden for a while).
    Resync {},
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_is_tagged() {
        let m = ServerMessage::Tick(Tick { seq: 7, samples: vec![] });
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(json, r#"{"type":"tick","seq":7,"samples":[]}"#);
        assert_eq!(serde_json::from_str::<ServerMessage>(&json).unwrap(), m);
    }

    #[test]
    fn history_is_columnar_on_the_wire_and_reads_back() {
        let history = DeviceHistory {
            index: 2,
            points: vec![
                MemoryPoint { timestamp_ms: 1_000_000, memory_used: 5 },
                MemoryPoint { timestamp_ms: 1_001_000, memory_used: 7 },
                MemoryPoint { timestamp_ms: 1_002_500, memory_used: 9 },
            ],
        };
        let json = serde_json::to_string(&history).unwrap();
        assert_eq!(json, r#"{"index":2,"start_ms":1000000,"dt_ms":[0,1000,1500],"memory_used":[5,7,9]}"#);
        assert_eq!(serde_json::from_str::<DeviceHistory>(&json).unwrap(), history);
        let empty = DeviceHistory { index: 0, points: vec![] };
        assert_eq!(serde_json::from_str::<DeviceHistory>(&serde_json::to_string(&empty).unwrap()).unwrap(), empty);
    }

    #[test]
    fn messages_decode_tag_first_and_say_when_the_tag_is_elsewhere() {
        let host = HostInfo {
            hostname: "h".into(),
            driver_version: None,
            cuda_driver_version: None,
            simulated: true,
            gpu_error: None,
            interval_ms: 100,
            version: "0".into(),
            history: false,
        };
        let snapshot = ServerMessage::Snapshot(Snapshot {
            seq: 3,
            host: host.clone(),
            devices: vec![],
            latest: vec![],
            history: vec![DeviceHistory { index: 0, points: vec![MemoryPoint { timestamp_ms: 5, memory_used: 9 }] }],
            health: vec![],
            processes: vec![],
            workload_problems: vec!["the container engine does not answer".into()],
        });
        let error = ServerMessage::Error { message: "too fast".into() };
        let details = ServerMessage::Details(Details::default());
        for message in [snapshot, error, details] {
            let json = serde_json::to_string(&message).unwrap();
            assert!(json.starts_with(r#"{"type":"#), "{json}");
            assert_eq!(serde_json::from_str::<ServerMessage>(&json).unwrap(), message);
        }
        // Fields left out take their defaults, as with serde's derive.
        let host = serde_json::to_string(&host).unwrap();
        let bare = format!(r#"{{"type":"snapshot","seq":1,"host":{host},"devices":[],"latest":[],"history":[]}}"#);
        assert!(matches!(serde_json::from_str::<ServerMessage>(&bare), Ok(ServerMessage::Snapshot(s)) if s.seq == 1));

        let late = serde_json::from_str::<ServerMessage>(r#"{"seq":7,"type":"tick","samples":[]}"#).unwrap_err();
        assert!(late.to_string().contains(r#"expected "type" as the first key, found "seq""#), "{late}");
        let unknown = serde_json::from_str::<ServerMessage>(r#"{"type":"reboot"}"#).unwrap_err();
        assert!(unknown.to_string().contains("unknown variant `reboot`"), "{unknown}");
        assert!(serde_json::from_str::<ServerMessage>("{}").unwrap_err().to_string().contains("missing field `type`"));
        assert!(serde_json::from_str::<ServerMessage>("[1]").is_err());
    }

    #[test]
    fn client_message_rejects_unknown_types_and_fields() {
        assert_eq!(serde_json::from_str::<ClientMessage>(r#"{"type":"resync"}"#).unwrap(), ClientMessage::Resync {});
        assert!(serde_json::from_str::<ClientMessage>(r#"{"type":"reboot"}"#).is_err());
        assert!(serde_json::from_str::<ClientMessage>(r#"{"type":"resync","x":1}"#).is_err());
    }
}
