//! Frames to one worker's stdin, written by a thread of their own: a worker that stops reading
//! fills its pipe and then this writer's few places, and the next send fails at once (the worker
//! is then killed, which ends the blocked write) instead of blocking the GPU's queue thread.

use std::io::Write;
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::thread::JoinHandle;

use super::protocol::{FrameError, ToWorker, encode_frame};

/// The writer of one worker's stdin (see the module's doc).
pub(super) struct FrameWriter {
    frames: SyncSender<Vec<u8>>,
    thread: JoinHandle<()>,
}

/// Frames waiting for a worker that does not read them before sending fails.
const FRAMES_TO_WORKER: usize = 4;

impl FrameWriter {
    pub(super) fn spawn(mut out: impl Write + Send + 'static, name: String) -> std::io::Result<Self> {
        let (frames, queued) = mpsc::sync_channel::<Vec<u8>>(FRAMES_TO_WORKER);
        let thread = std::thread::Builder::new().name(name).spawn(move || {
            for frame in queued {
                if out.write_all(&frame).and_then(|()| out.flush()).is_err() {
                    return;
                }
            }
        })?;
        Ok(Self { frames, thread })
    }

    pub(super) fn send(&self, message: &ToWorker) -> Result<(), FrameError> {
        let not_reading = || std::io::Error::other("the worker does not read its input");
        match self.frames.try_send(encode_frame(message)?) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(_)) => Err(FrameError::Io(not_reading())),
            Err(TrySendError::Disconnected(_)) => Err(FrameError::Truncated),
        }
    }

    /// Closes the worker's stdin once the queued frames are written; the thread to join after the
    /// worker has exited (a write blocked on a full pipe ends with it).
    pub(super) fn close(self) -> JoinHandle<()> {
        drop(self.frames);
        self.thread
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::mpsc::Receiver;
    use std::time::Duration;

    use base::clock::Stopwatch;

    use super::*;

    /// A worker that stops reading its input: once its writer's few places are full, sending fails
    /// at once instead of blocking the GPU's queue thread; closing waits only for the blocked write.
    #[test]
    fn a_worker_that_stops_reading_makes_sending_fail_at_once() {
        /// A pipe nobody reads: every write blocks until `release` says.
        struct Stuck(Receiver<()>);
        impl Write for Stuck {
            fn write(&mut self, _: &[u8]) -> std::io::Result<usize> {
                let _ = self.0.recv();
                Err(std::io::ErrorKind::BrokenPipe.into())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let (release, stuck) = mpsc::channel();
        let writer = FrameWriter::spawn(Stuck(stuck), "test-writer".into()).unwrap();
        let started = Stopwatch::start();
        let sent: Vec<bool> = (0..FRAMES_TO_WORKER + 3).map(|_| writer.send(&ToWorker::Pool).is_ok()).collect();
        assert!(started.elapsed() < Duration::from_secs(1), "no send blocked: {:?}", started.elapsed());
        assert!(sent.iter().filter(|ok| **ok).count() <= FRAMES_TO_WORKER + 1, "{sent:?}");
        let error = writer.send(&ToWorker::Pool).unwrap_err().to_string();
        assert_eq!(error, "the pipe failed: the worker does not read its input");
        // Killing the worker breaks the pipe: the blocked write returns and the thread ends.
        drop(release);
        writer.close().join().unwrap();
    }
}
