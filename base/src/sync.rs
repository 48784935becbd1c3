//! The one way the server takes a `std::sync` lock, and the one way it waits across threads.
//!
//! Locks: a thread that panicked while holding one leaves the data as it was at the panic; every
//! value behind these locks stays valid between statements (copies, pushes, whole replacements),
//! so the next holder carries on with it rather than failing every request after one bug.
//!
//! Waiting: [`off_runtime`] runs a blocking call on tokio's blocking threads; [`wait`] blocks a
//! plain thread on a future (a store's oneshot answer).

use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::Duration;

/// Locks `mutex`, carrying on past a poisoned lock (see the module's note).
pub fn lock<T: ?Sized>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Reads `lock`, carrying on past a poisoned lock.
pub fn read<T: ?Sized>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read().unwrap_or_else(PoisonError::into_inner)
}

/// Writes `lock`, carrying on past a poisoned lock.
pub fn write<T: ?Sized>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write().unwrap_or_else(PoisonError::into_inner)
}

/// Waits on `condvar` for at most `timeout`, carrying on past a poisoned lock; the guard back.
pub fn wait_timeout<'a, T>(condvar: &Condvar, guard: MutexGuard<'a, T>, timeout: Duration) -> MutexGuard<'a, T> {
    condvar.wait_timeout(guard, timeout).unwrap_or_else(PoisonError::into_inner).0
}

/// Wakes the thread that [`wait`]s.
struct Unpark(Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

/// Waits on this thread for `future` (an answer from another thread: a store's oneshot). It
/// blocks, so call it off the async runtime, like any blocking call; unlike tokio's
/// `blocking_recv` it does not panic when a runtime happens to be current.
pub fn wait<F: Future>(future: F) -> F::Output {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        match future.as_mut().poll(&mut context) {
            Poll::Ready(output) => return output,
            Poll::Pending => std::thread::park(),
        }
    }
}

/// A blocking call (SQLite, NVML, a lock held across I/O) run on tokio's blocking threads, so no
/// runtime worker waits; `Err` only when the call panicked.
pub async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    tokio::task::spawn_blocking(f).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_still_gives_its_value() {
        let mutex = Arc::new(Mutex::new(1));
        let poisoner = mutex.clone();
        let _ = std::thread::spawn(move || {
            let _guard = poisoner.lock();
            panic!("poison it");
        })
        .join();
        assert!(mutex.is_poisoned());
        *lock(&mutex) += 1;
        assert_eq!(*lock(&mutex), 2);
        let rw = RwLock::new(3);
        *write(&rw) += 1;
        assert_eq!(*read(&rw), 4);
    }

    #[test]
    fn wait_gets_an_answer_sent_from_another_thread() {
        let (reply, answer) = tokio::sync::oneshot::channel();
        let sender = std::thread::spawn(move || reply.send(7));
        assert_eq!(wait(answer), Ok(7));
        assert_eq!(sender.join().unwrap(), Ok(()));
    }
}
