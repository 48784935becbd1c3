//! Who a reported PID belongs to, and who may report for it: the one place that decides whose
//! process an attachment is (a rule for containers, whose PIDs this host cannot see, would go here).

use std::os::unix::fs::MetadataExt;

use super::BridgeError;

/// Who sends a report, as the server trusts them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reporter {
    /// The token user (on a server without tokens, the OS user gpudash runs as: `auth::local_user_name`).
    pub user: String,
    /// An admin may report for anyone's process; on a server without tokens everyone is one.
    pub admin: bool,
}

impl Reporter {
    /// A reporter without the admin role.
    pub fn user(user: &str) -> Self {
        Self { user: user.to_owned(), admin: false }
    }
}

/// The Unix user that process `pid` of this host runs as (the owner of `/proc/<pid>`, named by
/// uid through NSS, or the uid itself), or `None` when this host shows no such process (it exited,
/// or runs in another PID namespace). May block on NSS (LDAP): call it off the async runtime.
pub fn pid_owner(pid: u32) -> Option<String> {
    let uid = std::fs::metadata(format!("/proc/{pid}")).ok()?.uid();
    Some(uzers::get_user_by_uid(uid).map_or_else(|| uid.to_string(), |u| u.name().to_string_lossy().into_owned()))
}

/// Refuses `by`'s report for a process that runs as someone else on this host (admins may).
/// A PID this host does not show (`pid_owner` `None`) belongs to whoever attached it first.
pub(super) fn check(by: &Reporter, pid: u32, pid_owner: Option<&str>) -> Result<(), BridgeError> {
    match pid_owner {
        Some(owner) if owner != by.user && !by.admin => {
            Err(BridgeError::NotPidOwner { pid, owner: owner.to_owned(), user: by.user.clone() })
        }
        _ => Ok(()),
    }
}

/// Whom an entry created by `by`'s report belongs to: the PID's Unix user when this host shows
/// the process, else the reporter.
pub(super) fn bound_to(by: &Reporter, pid_owner: Option<&str>) -> String {
    pid_owner.unwrap_or(&by.user).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_belongs_to_the_user_running_the_tests() {
        let me = pid_owner(std::process::id()).expect("/proc shows this process");
        assert_eq!(pid_owner(std::process::id()), Some(me.clone()));
        assert_eq!(pid_owner(u32::MAX), None, "no such PID");
        assert!(check(&Reporter::user(&me), 1, Some(&me)).is_ok());
        let refused = check(&Reporter::user("eve"), 42, Some(&me)).unwrap_err();
        assert_eq!(refused, BridgeError::NotPidOwner { pid: 42, owner: me.clone(), user: "eve".into() });
        assert!(refused.to_string().contains(&format!("runs as Unix user '{me}'")), "{refused}");
        assert!(check(&Reporter { user: "ada".into(), admin: true }, 42, Some(&me)).is_ok(), "admins may");
        assert!(check(&Reporter::user("eve"), 42, None).is_ok(), "a PID this host does not show");
        assert_eq!(bound_to(&Reporter::user("eve"), None), "eve");
        assert_eq!(bound_to(&Reporter { user: "ada".into(), admin: true }, Some(&me)), me);
    }
}
