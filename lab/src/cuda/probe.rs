//! Whether the lab's CUDA libraries load: each is opened (dlopen) and closed again, and no CUDA
//! function is called.
//!
//! The dashboard asks a child process of its own binary ([`answer_probe`]): loading libcublas runs
//! constructors whose heap stays behind after dlclose (2.6 MiB of an idle server's resident memory
//! even after `malloc_trim`, docs/runs/rss/session17-rss-parts.log), and a library that crashes while
//! loading takes the child down, not the dashboard. Every command of the gpudash binary asks a child
//! (`gpudash bench` too); unit tests, whose binary is not gpudash, open them in their own process.
#![allow(clippy::print_stdout)]

use std::io::Read as _;
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use base::clock::Deadline;

use cudarc::driver::sys;

/// Set in the child's environment: the child prints which libraries loaded and exits.
const PROBE_VAR: &str = "GPUDASH_PROBE_CUDA_LIBRARIES";
/// The child's answer: this, a space, then `1` or `0` for each of [`LIBRARIES`] in order.
const ANSWER: &str = "gpudash cuda libraries loaded:";
/// A library whose constructors hang must not hold the dashboard's start for good.
const CHILD_DEADLINE: Duration = Duration::from_secs(30);

/// Set by [`answer_probe`]: this binary answers probes, so [`availability`] asks a child.
static ASK_A_CHILD: AtomicBool = AtomicBool::new(false);

/// What the lab needs, as the reason names it, and cudarc's short name for the file.
const LIBRARIES: [(&str, &str); 4] = [
    ("libcuda (the NVIDIA driver)", "cuda"),
    ("libcublas (CUDA 13 runtime libraries)", "cublas"),
    ("libcublasLt (CUDA 13 runtime libraries)", "cublasLt"),
    ("libnvrtc (CUDA 13 runtime libraries)", "nvrtc"),
];

/// The CUDA libraries the lab needs that could not be loaded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}; install them or add their folder to LD_LIBRARY_PATH", .missing.join(", "))]
pub struct MissingLibraries {
    /// Each library, with the file name tried first.
    pub missing: Vec<String>,
}

/// Call first in `main`. In the probe's child: opens the libraries, prints [`ANSWER`] and returns
/// the exit code. Otherwise notes that this binary answers probes and returns `None`.
pub fn answer_probe() -> Option<ExitCode> {
    ASK_A_CHILD.store(true, Ordering::Relaxed);
    std::env::var_os(PROBE_VAR)?;
    let loaded: String = open_each().iter().map(|&ok| if ok { '1' } else { '0' }).collect();
    println!("{ANSWER} {loaded}");
    Some(ExitCode::SUCCESS)
}

/// Ok when libcuda, libcublas, libcublasLt and libnvrtc can be loaded; otherwise what is missing.
pub fn availability() -> Result<(), MissingLibraries> {
    let loaded = if ASK_A_CHILD.load(Ordering::Relaxed) {
        match ask_a_child() {
            Ok(loaded) => loaded,
            Err(Unanswered::NotStarted(why)) => {
                tracing::debug!("checking the CUDA libraries in this process: {why}");
                open_here()
            }
            Err(Unanswered::Failed(why)) => return Err(MissingLibraries { missing: vec![why] }),
        }
    } else {
        open_here()
    };
    let missing: Vec<String> = LIBRARIES
        .iter()
        .zip(loaded)
        .filter(|(_, ok)| !ok)
        .map(|((what, lib), _)| {
            let tried = cudarc::get_lib_name_candidates(lib);
            format!("{what} not found (tried {})", tried.first().map_or("", String::as_str))
        })
        .collect();
    if missing.is_empty() { Ok(()) } else { Err(MissingLibraries { missing }) }
}

/// Why the child gave no answer.
enum Unanswered {
    /// It could not be started: the check runs in this process instead.
    NotStarted(String),
    /// It started and ended (or hung) without answering: loading the libraries is what broke it.
    Failed(String),
}

fn ask_a_child() -> Result<[bool; 4], Unanswered> {
    let exe = std::env::current_exe().map_err(|e| Unanswered::NotStarted(format!("no path to this binary: {e}")))?;
    let mut command = Command::new(&exe);
    command.env(PROBE_VAR, "1");
    ask(command, CHILD_DEADLINE)
}

/// Runs `command` and reads its answer, stopping it after `deadline`.
fn ask(mut command: Command, deadline: Duration) -> Result<[bool; 4], Unanswered> {
    let program = command.get_program().to_string_lossy().into_owned();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Unanswered::NotStarted(format!("cannot start {program}: {e}")))?;
    let by = Deadline::after(deadline);
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if !by.passed() => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(Unanswered::Failed(format!(
                    "loading the CUDA libraries did not finish within {} ms (a child process tried; it was stopped)",
                    deadline.as_millis()
                )));
            }
            Err(e) => return Err(Unanswered::Failed(format!("waiting for the CUDA library check: {e}"))),
        }
    };
    let mut out = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = stdout.read_to_string(&mut out);
    }
    parse_answer(&out).ok_or_else(|| {
        Unanswered::Failed(format!("loading the CUDA libraries ended a child process ({status}) before it answered"))
    })
}

/// The child's `1`/`0` per library, from the line that starts with [`ANSWER`].
fn parse_answer(out: &str) -> Option<[bool; 4]> {
    let bits = out.lines().find_map(|line| line.strip_prefix(ANSWER))?.trim();
    let loaded: Option<Vec<bool>> = bits
        .chars()
        .map(|c| match c {
            '1' => Some(true),
            '0' => Some(false),
            _ => None,
        })
        .collect();
    loaded?.try_into().ok()
}

/// Opens each library in this process, then gives the heap their constructors freed back.
fn open_here() -> [bool; 4] {
    let loaded = open_each();
    give_back_freed_heap();
    loaded
}

fn open_each() -> [bool; 4] {
    // SAFETY: each check only tries to dlopen the library and closes it again; no CUDA function is called.
    unsafe {
        [
            sys::is_culib_present(),
            cudarc::cublas::sys::is_culib_present(),
            cudarc::cublaslt::sys::is_culib_present(),
            cudarc::nvrtc::sys::is_culib_present(),
        ]
    }
}

/// Loading libcublas runs its constructors, which free most of what they allocate only at dlclose,
/// leaving it cached in malloc's heaps: 5.7 MiB resident in an idle server, 4.2 MiB of it free
/// (docs/runs/rss/session17-rss-parts.log, H200). malloc_trim(0) hands the free pages back.
fn give_back_freed_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only returns free pages of glibc's heaps to the kernel.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shell(script: &str) -> Command {
        let mut command = Command::new("sh");
        command.args(["-c", script]);
        command
    }

    /// The dashboard's side of the check, on stand-in children: an answer, a crash, a hang, no child.
    #[test]
    fn a_child_that_answers_crashes_hangs_or_cannot_start_is_told_apart() {
        let enough = Duration::from_secs(10);
        let answered = ask(shell(&format!("echo 'chatter'; echo '{ANSWER} 1010'")), enough);
        assert!(matches!(answered, Ok([true, false, true, false])));
        match ask(shell("kill -SEGV $$"), enough) {
            Err(Unanswered::Failed(why)) => {
                assert!(why.contains("before it answered") && why.contains("SIGSEGV"), "{why}");
            }
            _ => panic!("a crash is a failure"),
        }
        match ask(shell("sleep 10"), Duration::from_millis(200)) {
            Err(Unanswered::Failed(why)) => assert!(why.contains("within 200 ms"), "{why}"),
            _ => panic!("a hang is a failure"),
        }
        assert!(matches!(ask(Command::new("/nonexistent/gpudash"), enough), Err(Unanswered::NotStarted(_))));
    }

    #[test]
    fn the_answer_is_one_bit_per_library_on_its_own_line() {
        assert_eq!(parse_answer(&format!("{ANSWER} 1011\n")), Some([true, false, true, true]));
        assert_eq!(parse_answer(&format!("a library's chatter\n{ANSWER} 0000")), Some([false; 4]));
        for broken in ["", "1111", &format!("{ANSWER} 111"), &format!("{ANSWER} 11111"), &format!("{ANSWER} 11x1")] {
            assert_eq!(parse_answer(broken), None, "{broken:?}");
        }
    }
}
