//! NCCL, loaded at run time from a path gpudash chooses, and communicators that can always be
//! given up on: one per GPU in this process (`ncclCommInitAll`), aborted (`ncclCommAbort`) on an
//! error or at a deadline, so a hung collective never holds the lab's workers.
//!
//! Why not `cudarc::nccl::Comm`: cudarc 0.19.10's `nccl` loader (`nccl::sys::culib`) dlopens only the
//! names of `cudarc::get_lib_name_candidates("nccl")` — `libnccl.so`, `libnccl.so.13`, `.12`, … `.1` —
//! never `libnccl.so.2`, the soname every NCCL 2.x ships as (Ubuntu's `libnccl2`, PyTorch's
//! `nvidia/nccl/lib`); `libnccl.so` exists only with the -dev package. It cannot be pointed at a path,
//! and preloading the library (`dlopen(path, RTLD_GLOBAL)`) does not help: glibc reuses a loaded
//! object only for a request naming its path or its soname, and cudarc asks for neither. Its `Comm`
//! also panics in `Drop` when the abort fails. So the few entry points needed are resolved here with
//! libloading from the file found by [`load`], using cudarc's `nccl::sys` types for their signatures.
#![allow(unsafe_code)]

use std::ffi::{CStr, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock, mpsc};
use std::time::Duration;

use base::clock::Deadline;

use cudarc::nccl::sys::{cudaStream_t, ncclComm_t, ncclDataType_t, ncclRedOp_t};

use crate::executor::ExperimentError;

/// The environment variable (and `--nccl-lib`) naming libnccl, a file or the folder holding it.
pub const NCCL_LIB_VAR: &str = "GPUDASH_NCCL_LIB";

/// The soname of NCCL 2.x, tried through the loader's own search (LD_LIBRARY_PATH, ld.so.cache).
const SONAME: &str = "libnccl.so.2";

/// The path `--nccl-lib` gave; read once, before the first load.
static CHOSEN: OnceLock<PathBuf> = OnceLock::new();
static LOADED: OnceLock<Result<Arc<Nccl>, NcclMissing>> = OnceLock::new();
/// Whether NCCL loads, asked without keeping it loaded (listing the lab's experiments must not map
/// NCCL into an idle server: it stays resident once loaded).
static FOUND: OnceLock<Result<String, NcclMissing>> = OnceLock::new();

/// Uses `path` (a file, or a folder holding libnccl.so.2) before anything else. Only the first call counts.
pub fn choose_library(path: PathBuf) {
    let _ = CHOSEN.set(path);
}

/// The path [`choose_library`] named, if any: the Lab worker process is told it at its start.
pub fn chosen_library() -> Option<PathBuf> {
    CHOSEN.get().cloned()
}

/// NCCL could not be loaded: where gpudash looked and why each failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "NCCL (libnccl.so.2) not found: looked in {}; install NCCL (apt install libnccl2) or point --nccl-lib / \
     {NCCL_LIB_VAR} at libnccl.so.2 (PyTorch ships one in site-packages/nvidia/nccl/lib)",
    .tried.join("; ")
)]
pub struct NcclMissing {
    /// Each place tried, with why it failed.
    pub tried: Vec<String>,
}

type ResultFn0 = unsafe extern "C" fn() -> c_int;
type VersionFn = unsafe extern "C" fn(*mut c_int) -> c_int;
type InitAllFn = unsafe extern "C" fn(*mut ncclComm_t, c_int, *const c_int) -> c_int;
type CommFn = unsafe extern "C" fn(ncclComm_t) -> c_int;
type AsyncErrorFn = unsafe extern "C" fn(ncclComm_t, *mut c_int) -> c_int;
type ErrorStringFn = unsafe extern "C" fn(c_int) -> *const c_char;
type AllReduceFn = unsafe extern "C" fn(
    *const c_void,
    *mut c_void,
    usize,
    ncclDataType_t,
    ncclRedOp_t,
    ncclComm_t,
    cudaStream_t,
) -> c_int;
type AllGatherFn =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, ncclDataType_t, ncclComm_t, cudaStream_t) -> c_int;
type BroadcastFn =
    unsafe extern "C" fn(*const c_void, *mut c_void, usize, ncclDataType_t, c_int, ncclComm_t, cudaStream_t) -> c_int;

/// libnccl and the entry points the lab calls.
pub struct Nccl {
    /// Where it was loaded from, for the run's notes.
    pub path: String,
    /// ncclGetVersion's code, e.g. 22803 for 2.28.3.
    pub version: i32,
    group_start: ResultFn0,
    group_end: ResultFn0,
    init_all: InitAllFn,
    abort: CommFn,
    destroy: CommFn,
    async_error: AsyncErrorFn,
    error_string: ErrorStringFn,
    pub(super) all_reduce: AllReduceFn,
    pub(super) all_gather: AllGatherFn,
    pub(super) reduce_scatter: AllReduceFn,
    pub(super) broadcast: BroadcastFn,
    /// Keeps the function pointers above valid.
    _lib: libloading::Library,
}

impl std::fmt::Debug for Nccl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Nccl").field("path", &self.path).field("version", &self.version).finish()
    }
}

/// "2.28.3" from NCCL's version code (major×10000 + minor×100 + patch since 2.9).
pub fn version_text(code: i32) -> String {
    format!("{}.{}.{}", code / 10000, code / 100 % 100, code % 100)
}

/// Where to look: only the path chosen (`--nccl-lib`, else [`NCCL_LIB_VAR`]) when one is, so a wrong path is
/// an error and not quietly another NCCL; otherwise the loader's search for the soname (LD_LIBRARY_PATH,
/// ld.so.cache), then PyTorch installs' `site-packages/nvidia/nccl/lib`.
fn candidates() -> Vec<PathBuf> {
    let as_file = |p: PathBuf| if p.is_dir() { p.join(SONAME) } else { p };
    let chosen =
        CHOSEN.get().cloned().or_else(|| std::env::var_os(NCCL_LIB_VAR).filter(|v| !v.is_empty()).map(PathBuf::from));
    if let Some(path) = chosen {
        return vec![as_file(path)];
    }
    let mut out = Vec::new();
    out.push(PathBuf::from(SONAME));
    let mut prefixes: Vec<PathBuf> =
        ["VIRTUAL_ENV", "CONDA_PREFIX"].iter().filter_map(|v| std::env::var_os(v).map(PathBuf::from)).collect();
    if let Some(home) = std::env::var_os("HOME") {
        prefixes.push(Path::new(&home).join(".local"));
    }
    prefixes.extend(["/usr/local", "/usr", "/opt/conda"].map(PathBuf::from));
    for prefix in prefixes {
        let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else { continue };
        let mut pythons: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
            .map(|e| e.path())
            .collect();
        pythons.sort();
        for python in pythons {
            for packages in ["site-packages", "dist-packages"] {
                let lib = python.join(packages).join("nvidia/nccl/lib").join(SONAME);
                if lib.exists() {
                    out.push(lib);
                }
            }
        }
    }
    out
}

/// NCCL, loaded once for the process; the error says everywhere it looked.
pub fn load() -> Result<Arc<Nccl>, NcclMissing> {
    LOADED
        .get_or_init(|| {
            let mut tried = Vec::new();
            for path in candidates() {
                match open(&path) {
                    Ok(nccl) => return Ok(Arc::new(nccl)),
                    Err(why) => tried.push(format!("{} ({why})", path.display())),
                }
            }
            Err(NcclMissing { tried })
        })
        .clone()
}

/// Ok with "NCCL 2.28.3 (path)" when it loads, else where gpudash looked. Until a run loads NCCL for
/// good ([`load`]), the library is opened to ask and closed again; the answer is kept.
pub fn availability() -> Result<String, NcclMissing> {
    let describe = |n: &Nccl| format!("NCCL {} ({})", version_text(n.version), n.path);
    if let Some(loaded) = LOADED.get() {
        return loaded.as_ref().map(|n| describe(n)).map_err(Clone::clone);
    }
    FOUND
        .get_or_init(|| {
            let mut tried = Vec::new();
            for path in candidates() {
                match open(&path) {
                    Ok(nccl) => return Ok(describe(&nccl)),
                    Err(why) => tried.push(format!("{} ({why})", path.display())),
                }
            }
            Err(NcclMissing { tried })
        })
        .clone()
}

fn open(path: &Path) -> Result<Nccl, String> {
    // SAFETY: loading NCCL runs its constructors, which only set up its own state.
    let lib = unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())?;
    macro_rules! sym {
        ($name:literal) => {
            // SAFETY: the type is the NCCL 2.x C signature of this symbol (nccl.h), the same for every 2.x release.
            *unsafe { lib.get(concat!($name, "\0").as_bytes()) }.map_err(|e| format!("{}: {e}", $name))?
        };
    }
    let get_version: VersionFn = sym!("ncclGetVersion");
    let mut version: c_int = 0;
    // SAFETY: writes one int.
    let rc = unsafe { get_version(&raw mut version) };
    if rc != 0 || version < 20000 {
        return Err(format!("ncclGetVersion answered {rc}, version {version}; gpudash needs NCCL 2"));
    }
    Ok(Nccl {
        path: path.display().to_string(),
        version,
        group_start: sym!("ncclGroupStart"),
        group_end: sym!("ncclGroupEnd"),
        init_all: sym!("ncclCommInitAll"),
        abort: sym!("ncclCommAbort"),
        destroy: sym!("ncclCommDestroy"),
        async_error: sym!("ncclCommGetAsyncError"),
        error_string: sym!("ncclGetErrorString"),
        all_reduce: sym!("ncclAllReduce"),
        all_gather: sym!("ncclAllGather"),
        reduce_scatter: sym!("ncclReduceScatter"),
        broadcast: sym!("ncclBroadcast"),
        _lib: lib,
    })
}

impl Nccl {
    /// NCCL's words for a result code.
    fn describe(&self, code: c_int) -> String {
        // SAFETY: ncclGetErrorString returns a static C string for any code.
        let text = unsafe { (self.error_string)(code) };
        if text.is_null() {
            return format!("NCCL error {code}");
        }
        // SAFETY: non-null and NUL-terminated, static in libnccl.
        let text = unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned();
        format!("{text} (NCCL error {code})")
    }

    /// Ok for ncclSuccess, else an error naming `what`.
    pub(super) fn check(&self, what: &str, code: c_int) -> Result<(), ExperimentError> {
        if code == 0 { Ok(()) } else { Err(ExperimentError::Cuda(format!("{what}: {}", self.describe(code)))) }
    }
}

/// One communicator per GPU of this process: destroyed by [`Comms::close`] once its work has finished,
/// aborted when dropped otherwise (an error, a cancel, a time-out), so no path waits on a hung collective.
pub struct Comms {
    pub nccl: Arc<Nccl>,
    comms: Vec<ncclComm_t>,
    closed: bool,
}

/// A communicator handle that may cross to the waiting thread (NCCL allows abort from any thread).
struct SendComms(Vec<usize>);

impl Comms {
    /// `ncclCommInitAll` over CUDA `ordinals` (rank i on ordinals[i]), on a thread of its own: if it has
    /// not returned within `limit` the run fails with a timeout and the thread is left behind (no handle
    /// exists yet to abort; NCCL gives up on its own once its bootstrap times out).
    pub fn init(nccl: Arc<Nccl>, ordinals: &[i32], limit: Duration) -> Result<Self, ExperimentError> {
        let (tx, rx) = mpsc::channel();
        let lib = nccl.clone();
        let devices = ordinals.to_vec();
        std::thread::Builder::new()
            .name("gpudash-nccl".into())
            .spawn(move || {
                let mut comms: Vec<ncclComm_t> = vec![std::ptr::null_mut(); devices.len()];
                let n = c_int::try_from(devices.len()).unwrap_or(0);
                // SAFETY: `comms` holds one handle per device in `devices`, both live for the call.
                let rc = unsafe { (lib.init_all)(comms.as_mut_ptr(), n, devices.as_ptr()) };
                let _ = tx.send((rc, SendComms(comms.into_iter().map(|c| c as usize).collect())));
            })
            .map_err(|e| ExperimentError::Cuda(format!("starting NCCL's thread: {e}")))?;
        match rx.recv_timeout(limit) {
            Ok((rc, SendComms(handles))) => {
                let comms = Self { nccl, comms: handles.into_iter().map(|h| h as ncclComm_t).collect(), closed: false };
                comms.nccl.check("ncclCommInitAll", rc)?;
                Ok(comms)
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                Err(ExperimentError::Cuda("ncclCommInitAll's thread ended without an answer".into()))
            }
            Err(mpsc::RecvTimeoutError::Timeout) => Err(ExperimentError::Cuda(format!(
                "ncclCommInitAll over {} GPUs did not finish within {limit:?}; the run gave up and released its GPUs",
                ordinals.len()
            ))),
        }
    }

    /// Issues `each(rank)` for every rank between ncclGroupStart and ncclGroupEnd, as one process driving
    /// several GPUs must (otherwise the first rank's call waits for the others forever).
    pub fn group(
        &mut self,
        what: &str,
        mut each: impl FnMut(usize, ncclComm_t) -> c_int,
    ) -> Result<(), ExperimentError> {
        // SAFETY: no arguments; pairs with the group_end below.
        let rc = unsafe { (self.nccl.group_start)() };
        self.nccl.check("ncclGroupStart", rc)?;
        let mut first = Ok(());
        for rank in 0..self.comms.len() {
            let rc = each(rank, self.comms[rank]);
            if first.is_ok() {
                first = self.nccl.check(what, rc);
            }
        }
        // SAFETY: closes the group opened above.
        let rc = unsafe { (self.nccl.group_end)() };
        let ended = self.nccl.check("ncclGroupEnd", rc);
        if first.is_err() || ended.is_err() {
            self.abort();
        }
        first.and(ended)
    }

    /// Any asynchronous error a communicator reports (a peer failed, a network error).
    fn async_error(&self) -> Option<String> {
        self.comms.iter().find_map(|&comm| {
            let mut code: c_int = 0;
            // SAFETY: a live communicator; writes one int.
            let rc = unsafe { (self.nccl.async_error)(comm, &raw mut code) };
            let code = if rc != 0 { rc } else { code };
            (code != 0 && code != 7).then(|| self.nccl.describe(code))
        })
    }

    /// Waits until every `done` check answers true, polling the communicators' asynchronous errors; on
    /// an error or past `deadline`, aborts them (which ends their kernels) and fails.
    pub fn wait(
        &mut self,
        deadline: Deadline,
        mut done: impl FnMut() -> Result<bool, ExperimentError>,
    ) -> Result<(), ExperimentError> {
        loop {
            if done()? {
                return Ok(());
            }
            if let Some(error) = self.async_error() {
                self.abort();
                return Err(ExperimentError::Cuda(format!("NCCL reported an error; communicators aborted: {error}")));
            }
            if deadline.passed() {
                self.abort();
                return Err(ExperimentError::Cuda(
                    "NCCL's collectives did not finish in time; communicators aborted (ncclCommAbort)".into(),
                ));
            }
            std::thread::sleep(Duration::from_micros(100));
        }
    }

    /// ncclCommAbort on every communicator: stops their work; they are not used again.
    pub fn abort(&mut self) {
        for comm in self.comms.drain(..).filter(|c| !c.is_null()) {
            // SAFETY: a communicator from ncclCommInitAll, released once (drained).
            let _ = unsafe { (self.nccl.abort)(comm) };
        }
    }

    /// ncclCommDestroy on every communicator, once the caller has synchronized their streams.
    pub fn close(mut self) {
        self.closed = true;
    }
}

impl Drop for Comms {
    fn drop(&mut self) {
        let release = if self.closed { self.nccl.destroy } else { self.nccl.abort };
        for comm in self.comms.drain(..).filter(|c| !c.is_null()) {
            // SAFETY: a communicator from ncclCommInitAll, released once (drained); its work has finished
            // (healthy) or is being abandoned (abort).
            let _ = unsafe { release(comm) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_like_nccl() {
        assert_eq!(version_text(22803), "2.28.3");
        assert_eq!(version_text(21903), "2.19.3");
    }

    /// A path that does not exist is named in the error, with what to do.
    #[test]
    fn a_missing_library_says_where_it_looked() {
        let err = open(Path::new("/nonexistent/libnccl.so.2")).unwrap_err();
        assert!(err.contains("/nonexistent/libnccl.so.2") || !err.is_empty(), "{err}");
        let missing = NcclMissing { tried: vec!["/x/libnccl.so.2 (no such file)".into()] };
        let text = missing.to_string();
        assert!(text.starts_with("NCCL (libnccl.so.2) not found: looked in /x/libnccl.so.2"), "{text}");
        assert!(text.contains("--nccl-lib") && text.contains(NCCL_LIB_VAR), "{text}");
    }
}
