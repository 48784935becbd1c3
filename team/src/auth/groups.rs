//! Roles from an identity provider's groups (`--admin-group`, `--operator-group`, `--default-role`):
//! one rule for every sign-in that brings groups (a trusted auth proxy's header today).

use shared::auth::Role;

/// Which groups make an admin or an operator, and what everyone else gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRoles {
    /// Members of any of these are admins (`--admin-group`, repeatable).
    pub admin: Vec<String>,
    /// Members of any of these (and of no admin group) are operators (`--operator-group`).
    pub operator: Vec<String>,
    /// Everyone signed in who is in none of them (`--default-role`): a viewer, or `None`: refused.
    pub others: Option<Role>,
}

impl Default for GroupRoles {
    fn default() -> Self {
        Self { admin: Vec::new(), operator: Vec::new(), others: Some(Role::Viewer) }
    }
}

impl GroupRoles {
    /// The role of someone in `groups` (names compared exactly, case included); `None`: refused.
    pub fn role(&self, groups: &[&str]) -> Option<Role> {
        let member = |of: &[String]| groups.iter().any(|g| of.iter().any(|name| name == g));
        if member(&self.admin) {
            Some(Role::Admin)
        } else if member(&self.operator) {
            Some(Role::Operator)
        } else {
            self.others
        }
    }

    /// The rule in words, for a refusal: "admin: gpu-admins; operator: gpu-users, ml".
    pub fn describe(&self) -> String {
        let list = |names: &[String]| if names.is_empty() { "no group".to_owned() } else { names.join(", ") };
        format!("admin: {}; operator: {}", list(&self.admin), list(&self.operator))
    }
}

/// A group name as `--admin-group` and `--operator-group` take it: 1–256 printable characters, no comma
/// or '|' (the separators of a groups header).
pub fn parse_group(value: &str) -> Result<String, String> {
    let name = value.trim();
    if name.is_empty() || name.len() > 256 || name.chars().any(|c| c.is_control() || c == ',' || c == '|') {
        return Err(format!(
            "'{value}' is not a group name: give 1 to 256 printable characters without ',' or '|' (e.g. gpu-admins)"
        ));
    }
    Ok(name.to_owned())
}

/// `--default-role`: what someone signed in gets when in no listed group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefaultRole(pub Option<Role>);

/// `--default-role`: "viewer", or "none" to refuse whoever is in no listed group.
pub fn parse_default_role(value: &str) -> Result<DefaultRole, String> {
    match value.trim() {
        "viewer" => Ok(DefaultRole(Some(Role::Viewer))),
        "none" => Ok(DefaultRole(None)),
        _ => Err(format!(
            "'{value}' is not a default role: give viewer (everyone signed in may look) or none (only the listed groups \
             get in)"
        )),
    }
}

/// The groups in a header as oauth2-proxy (commas) or authentik ('|') send them, trimmed, empty ones dropped.
pub fn split_groups(header: &str) -> Vec<&str> {
    header.split([',', '|']).map(str::trim).filter(|g| !g.is_empty()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roles(others: Option<Role>) -> GroupRoles {
        GroupRoles { admin: vec!["gpu-admins".into()], operator: vec!["gpu-users".into(), "ml".into()], others }
    }

    #[test]
    fn the_highest_listed_group_decides_and_others_get_the_default() {
        let rule = roles(Some(Role::Viewer));
        assert_eq!(rule.role(&split_groups("staff, gpu-users,gpu-admins")), Some(Role::Admin));
        assert_eq!(rule.role(&split_groups("ml|staff")), Some(Role::Operator));
        assert_eq!(rule.role(&split_groups("students")), Some(Role::Viewer));
        assert_eq!(rule.role(&split_groups("")), Some(Role::Viewer));
        assert_eq!(rule.role(&split_groups("GPU-Admins")), Some(Role::Viewer), "names are compared exactly");
        assert_eq!(roles(None).role(&split_groups("students")), None, "--default-role none refuses");
        assert_eq!(rule.describe(), "admin: gpu-admins; operator: gpu-users, ml");
    }

    #[test]
    fn bad_flag_values_say_what_is_allowed() {
        assert_eq!(parse_group(" gpu-admins ").unwrap(), "gpu-admins");
        assert!(parse_group("a,b").unwrap_err().contains("without ',' or '|'"));
        assert!(parse_group("").is_err());
        assert_eq!(parse_default_role("none").unwrap(), DefaultRole(None));
        assert!(parse_default_role("admin").unwrap_err().contains("give viewer"));
    }
}
