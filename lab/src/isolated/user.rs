//! Who the Lab worker runs as: when the dashboard runs as root, an unprivileged user
//! (`--lab-user`, default `nobody`), so CUDA and its libraries never run with root's powers.

use std::os::unix::process::CommandExt as _;
use std::process::Command;

/// The user a worker started by root switches to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAs {
    pub name: String,
    pub uid: u32,
    /// The user's primary group.
    pub gid: u32,
}

/// `--lab-user` names no user on this host.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--lab-user '{0}' is no user on this host: the Lab's worker process runs as it when gpudash runs as root; \
     name an existing unprivileged user (e.g. nobody) or create one"
)]
pub struct UnknownUser(pub String);

/// The user `name` (through NSS, as the rest of gpudash reads users: /etc/passwd, LDAP), or why not.
pub fn look_up(name: &str) -> Result<RunAs, UnknownUser> {
    let user = uzers::get_user_by_name(name).ok_or_else(|| UnknownUser(name.to_owned()))?;
    Ok(RunAs { name: name.to_owned(), uid: user.uid(), gid: user.primary_group_id() })
}

/// Who the worker runs as: `name` when this process runs as root (euid 0), else `None` (no switch:
/// the worker keeps this process's user).
pub fn lab_user(name: &str) -> Result<Option<RunAs>, UnknownUser> {
    if !rustix::process::geteuid().is_root() {
        return Ok(None);
    }
    look_up(name).map(Some)
}

/// Makes `command` run as `user` (if any), with no supplementary group, and die with the thread that
/// started it (the GPU's Lab thread, which outlives every run).
#[allow(unsafe_code)]
pub fn apply(command: &mut Command, user: Option<&RunAs>) {
    let dropping = user.is_some();
    if let Some(user) = user {
        // std sets the group, then clears the supplementary groups (setgroups(0)) and sets the user.
        command.uid(user.uid).gid(user.gid);
    }
    // SAFETY: the closure runs in the forked child before exec and makes only async-signal-safe
    // system calls (getgroups, prctl twice); it allocates nothing and takes no lock.
    unsafe {
        command.pre_exec(move || {
            // std ignores a refused setgroups (EPERM); a worker that kept root's groups does not start.
            // getgroups with a size of 0 only counts the groups: it writes through no pointer.
            if dropping && libc::getgroups(0, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::other("the Lab worker kept supplementary groups"));
            }
            // No ambient capability (a non-root dashboard may hold CAP_KILL for --allow-signals) crosses
            // into the worker's exec. EINVAL where the kernel has no ambient set: nothing to clear.
            libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
            // Set after the user switch (which clears it): the worker dies with the dashboard.
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))?;
            Ok(())
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn users_are_found_by_name_and_unknown_ones_refused_with_what_to_do() {
        let root = look_up("root").unwrap();
        assert_eq!((root.uid, root.gid), (0, 0));
        if let Ok(nobody) = look_up("nobody") {
            assert_ne!(nobody.uid, 0, "nobody is not root");
        }
        let refused = look_up("no-such-user-gpudash").unwrap_err().to_string();
        assert!(refused.contains("'no-such-user-gpudash' is no user on this host") && refused.contains("nobody"));
    }

    #[test]
    fn only_root_switches_user() {
        let switched = lab_user("root").unwrap();
        assert_eq!(switched.is_some(), rustix::process::geteuid().is_root());
        if !rustix::process::geteuid().is_root() {
            assert_eq!(lab_user("no-such-user-gpudash"), Ok(None), "no lookup when there is nothing to drop");
        }
    }
}
