//! The Lab worker's wire: frames of a little-endian `u32` length then that many bytes of JSON, over
//! the child's stdin (dashboard → worker) and stdout (worker → dashboard), and the messages they carry.
//! A frame over [`MAX_FRAME`] either way is the other side misbehaving: the reader refuses it
//! without allocating it.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use shared::activity::Activity;
use shared::lab::{ExperimentParams, RunResult};
use shared::readings::{ComputeProcess, DeviceMemory, QueryError};
use shared::topology::Topology;

use crate::executor::{ExperimentError, PoolUsage};
use crate::guards::{DeviceProbe, HostMemory, LinkPeaks};

/// The largest frame either side sends or accepts: a run's result is kilobytes, 16 MiB is garbage.
pub const MAX_FRAME: u32 = 16 << 20;

/// Why a frame could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("the pipe failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("the stream ended inside a frame")]
    Truncated,
    #[error("a frame of {0} bytes, over the limit of 16 MiB")]
    TooBig(u64),
    #[error("a frame that is not a message: {0}")]
    Malformed(String),
}

/// What the worker runs on: the simulated executor (each step sleeps `step`) or CUDA.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum Engine {
    Simulated { step: Duration },
    Cuda,
}

/// The worker's first message: which GPU it serves and how.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Start {
    /// NVML index of the worker's GPU.
    pub device: u32,
    /// Its NVML UUID, to find it in CUDA's numbering.
    pub uuid: Option<String>,
    /// Every GPU (NVML index, UUID), for the experiments that use several.
    pub gpus: Vec<(u32, String)>,
    pub engine: Engine,
    /// `--nccl-lib`, which the dashboard read and the worker loads.
    pub nccl_library: Option<PathBuf>,
}

/// Dashboard → worker.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum ToWorker {
    Start(Start),
    /// Run one validated experiment; `remaining` is what is left of `limit` when it is sent.
    Run {
        params: ExperimentParams,
        limit: Duration,
        remaining: Duration,
        topology: Option<Topology>,
    },
    /// Stop the run in progress (read by the worker's reader thread, mid-run).
    Cancel,
    Pool,
    EmptyCache,
    /// Free everything and exit.
    Release,
    /// The answer to the worker's last [`FromWorker::Ask`].
    Answer(Answer),
}

/// Worker → dashboard.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum FromWorker {
    Progress {
        fraction: f64,
        message: String,
    },
    /// A question for the dashboard's probe (NVML stays in the dashboard).
    Ask(Question),
    /// The run's end.
    Done(Box<Result<RunResult, ExperimentError>>),
    Pool(Option<PoolUsage>),
    EmptyCache(Result<(), ExperimentError>),
}

/// One [`DeviceProbe`] call, asked across the pipe.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum Question {
    Memory(u32),
    ComputeProcesses(u32),
    Peaks(u32),
    HostMemory,
    InjectedFailure(u32),
    Activity(u32),
    PeerAccess(u32, u32),
    WrongResults(u32),
    WithoutNccl,
}

/// A [`Question`]'s answer from the dashboard's probe.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub enum Answer {
    Memory(Option<DeviceMemory>),
    ComputeProcesses(Result<Vec<ComputeProcess>, QueryError>),
    Peaks(LinkPeaks),
    /// `/proc/meminfo`'s figures, or why it could not be read (`None`: it has no MemAvailable).
    HostMemory(Result<HostMemory, Option<String>>),
    InjectedFailure(Option<String>),
    Activity(Option<Box<Activity>>),
    PeerAccess(Option<bool>),
    /// `WrongResults` and `WithoutNccl`.
    Flag(bool),
}

impl Question {
    /// Asks `probe` (the dashboard's own) this question.
    pub fn answer(&self, probe: &dyn DeviceProbe) -> Answer {
        match *self {
            Question::Memory(d) => Answer::Memory(probe.memory(d)),
            Question::ComputeProcesses(d) => Answer::ComputeProcesses(probe.compute_processes(d)),
            Question::Peaks(d) => Answer::Peaks(probe.peaks(d)),
            Question::HostMemory => Answer::HostMemory(probe.host_memory().map_err(|e| match e {
                crate::guards::MeminfoError::Read(io) => Some(io.to_string()),
                crate::guards::MeminfoError::Incomplete => None,
            })),
            Question::InjectedFailure(d) => Answer::InjectedFailure(probe.injected_failure(d)),
            Question::Activity(d) => Answer::Activity(probe.activity(d).map(Box::new)),
            Question::PeerAccess(a, b) => Answer::PeerAccess(probe.peer_access(a, b)),
            Question::WrongResults(d) => Answer::Flag(probe.wrong_results(d)),
            Question::WithoutNccl => Answer::Flag(probe.without_nccl()),
        }
    }
}

/// Writes `message` as one frame and flushes it.
pub fn write_frame(out: &mut impl Write, message: &impl Serialize) -> Result<(), FrameError> {
    out.write_all(&encode_frame(message)?)?;
    out.flush()?;
    Ok(())
}

/// One message as the bytes of its frame.
pub fn encode_frame(message: &impl Serialize) -> Result<Vec<u8>, FrameError> {
    let body = serde_json::to_vec(message).map_err(|e| FrameError::Malformed(e.to_string()))?;
    let too_big = || FrameError::TooBig(body.len() as u64);
    let length = u32::try_from(body.len()).ok().filter(|&n| n <= MAX_FRAME).ok_or_else(too_big)?;
    let mut frame = Vec::with_capacity(body.len() + 4);
    frame.extend_from_slice(&length.to_le_bytes());
    frame.extend_from_slice(&body);
    Ok(frame)
}

/// Reads one frame: `Ok(None)` when the stream ends between frames (the other side closed it),
/// an error when it ends inside one, or the frame is too big or not a message.
pub fn read_frame<T: DeserializeOwned>(input: &mut impl Read) -> Result<Option<T>, FrameError> {
    let mut head = [0_u8; 4];
    match read_full(input, &mut head)? {
        0 => return Ok(None),
        4 => {}
        _ => return Err(FrameError::Truncated),
    }
    let length = u32::from_le_bytes(head);
    if length > MAX_FRAME {
        return Err(FrameError::TooBig(length.into()));
    }
    let mut body = vec![0_u8; length as usize];
    if read_full(input, &mut body)? < body.len() {
        return Err(FrameError::Truncated);
    }
    serde_json::from_slice(&body).map(Some).map_err(|e| FrameError::Malformed(e.to_string()))
}

/// Fills `buf` unless the stream ends first; how many bytes were read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn framed(message: &impl Serialize) -> Vec<u8> {
        let mut out = Vec::new();
        write_frame(&mut out, message).unwrap();
        out
    }

    #[test]
    fn messages_survive_the_round_trip_in_order() {
        let run = ToWorker::Run {
            params: serde_json::from_str(r#"{"kind":"transfer","sizes":[4096]}"#).unwrap(),
            limit: Duration::from_secs(120),
            remaining: Duration::from_millis(119_500),
            topology: None,
        };
        let mut stream = framed(&run);
        stream.extend(framed(&ToWorker::Cancel));
        stream.extend(framed(&ToWorker::Answer(Answer::HostMemory(Ok(HostMemory { total: 8, available: 4 })))));
        let mut input = stream.as_slice();
        assert_eq!(read_frame::<ToWorker>(&mut input).unwrap(), Some(run));
        assert_eq!(read_frame::<ToWorker>(&mut input).unwrap(), Some(ToWorker::Cancel));
        assert!(matches!(read_frame::<ToWorker>(&mut input).unwrap(), Some(ToWorker::Answer(Answer::HostMemory(_)))));
        assert_eq!(read_frame::<ToWorker>(&mut input).unwrap(), None, "the end between frames is a clean end");

        let died = FromWorker::Done(Box::new(Err(ExperimentError::TimedOut(Duration::from_secs(2)))));
        assert_eq!(read_frame::<FromWorker>(&mut framed(&died).as_slice()).unwrap(), Some(died));
    }

    #[test]
    fn an_oversized_frame_is_refused_both_ways_without_reading_it() {
        let mut input: &[u8] = &(MAX_FRAME + 1).to_le_bytes();
        assert!(
            matches!(read_frame::<ToWorker>(&mut input), Err(FrameError::TooBig(n)) if n == u64::from(MAX_FRAME) + 1)
        );
        let huge = "x".repeat(MAX_FRAME as usize);
        let mut out = Vec::new();
        assert!(matches!(write_frame(&mut out, &huge), Err(FrameError::TooBig(_))));
        assert!(out.is_empty(), "nothing of a refused frame is written");
    }

    #[test]
    fn a_truncated_or_garbled_stream_is_an_error_not_a_hang() {
        let whole = framed(&FromWorker::Pool(None));
        for cut in [1, 3, 4, whole.len() - 1] {
            let mut input = &whole[..cut];
            assert!(matches!(read_frame::<FromWorker>(&mut input), Err(FrameError::Truncated)), "cut at {cut}");
        }
        let mut garbage: &[u8] = b"\x05\x00\x00\x00hello";
        assert!(matches!(read_frame::<FromWorker>(&mut garbage), Err(FrameError::Malformed(_))));
    }
}
