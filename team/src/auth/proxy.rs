//! Sign-in by a trusted auth proxy (oauth2-proxy, authentik, nginx `auth_request`): the proxy signs
//! people in and names them in headers (`--auth-proxy-header`, `--auth-proxy-groups-header`), which
//! gpudash believes only from `--trusted-proxy` peers (and, on loopback with `--trusted-proxy-user`,
//! only from that user's sockets). Roles come from the groups by [`GroupRoles`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base::clock::Clock;
use base::sync::lock;

use super::groups::{GroupRoles, split_groups};
use super::names::UserMap;
use super::{Identity, valid_user};

/// A signed-in user is written to the audit log when first seen, when their role changes, and again
/// after this long (a proxy sends the headers with every request; one row per request would flood it).
const AUDIT_AGAIN_AFTER: Duration = Duration::from_secs(12 * 3600);
/// Users remembered for that; past it the memory starts over (at worst an extra audit row each).
const REMEMBERED: usize = 10_000;

/// The proxy's headers and the role rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyConfig {
    /// The header naming the signed-in user, lower case (e.g. `x-forwarded-user`).
    pub user_header: String,
    /// The header listing their groups, separated by ',' or '|', lower case (e.g. `x-forwarded-groups`).
    pub groups_header: String,
    pub roles: GroupRoles,
    /// Where the page's "Log out" goes (the proxy's sign-out, e.g. `/oauth2/sign_out`); `None`: no button.
    pub sign_out: Option<String>,
    /// `--user-map`: sign-in names to owner names.
    pub user_map: UserMap,
}

/// The default `--auth-proxy-groups-header`.
pub const DEFAULT_GROUPS_HEADER: &str = "X-Forwarded-Groups";

/// A header name as `--auth-proxy-header` and `--auth-proxy-groups-header` take it (an HTTP token), lower case.
pub fn parse_header_name(value: &str) -> Result<String, String> {
    let name = value.trim();
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || name.len() > 128 || !name.chars().all(token) {
        return Err(format!(
            "'{value}' is not an HTTP header name: give letters, digits and '-' (e.g. X-Forwarded-User)"
        ));
    }
    Ok(name.to_ascii_lowercase())
}

/// What a request's proxy headers hold: every value of the user header and of the groups header (a value
/// that is not text as `"\u{fffd}"`), as the web layer read them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Presented<'a> {
    pub user: Vec<&'a str>,
    pub groups: Vec<&'a str>,
}

/// `--auth-proxy-sign-out`: a path on this site ("/oauth2/sign_out") or an http(s) URL.
pub fn parse_sign_out(value: &str) -> Result<String, String> {
    let text = value.trim();
    let path = text.starts_with('/') && !text.starts_with("//");
    let url = url::Url::parse(text).is_ok_and(|u| matches!(u.scheme(), "http" | "https"));
    if (path || url) && text.len() <= 2048 && !text.chars().any(char::is_control) {
        Ok(text.to_owned())
    } else {
        Err(format!("'{value}' is not a sign-out address: give a path such as /oauth2/sign_out or an https:// URL"))
    }
}

/// Why the proxy's headers could be forged under these settings, if they could: no `--trusted-proxy` at
/// all, or a loopback one without `--trusted-proxy-user` (any local user could then name themselves root).
/// Start-up and `gpudash doctor` refuse both.
/// `trusted`: the `--trusted-proxy` networks; `users_named`: `--trusted-proxy-user` was given.
pub fn unbelievable(trusted: &[ipnet::IpNet], users_named: bool) -> Option<String> {
    if trusted.is_empty() {
        return Some(
            "--auth-proxy-header needs --trusted-proxy: name the auth proxy's address (e.g. --trusted-proxy 127.0.0.1), \
             since its user header is believed from nowhere else"
                .to_owned(),
        );
    }
    let loopback = trusted.iter().find(|net| {
        net.contains(&std::net::IpAddr::from([127, 0, 0, 1]))
            || net.contains(&std::net::IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]))
    });
    match loopback {
        Some(net) if !users_named => Some(format!(
            "--auth-proxy-header with the loopback --trusted-proxy {net} needs --trusted-proxy-user (the user the proxy \
             runs as, e.g. www-data): otherwise any user of this machine could send the user header from 127.0.0.1 \
             and name themselves an admin"
        )),
        _ => None,
    }
}

/// Someone the proxy signed in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyUser {
    pub identity: Identity,
    /// Their groups as the proxy sent them, for the audit log.
    pub groups: Vec<String>,
    /// First sight (or a new role, or a while since): worth an audit row.
    pub audit: bool,
}

/// Why a request's proxy headers were not believed; each answers 403 and is audited.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProxyRefused {
    #[error(
        "the {header} header is believed only from a --trusted-proxy, and this request came from {peer} directly; \
         sign in through the proxy"
    )]
    Untrusted { header: String, peer: String },
    #[error("the auth proxy named the user '{value}' in {header}: a user name here is 1–64 letters, digits or . _ - @")]
    BadUser { header: String, value: String },
    #[error(
        "the request carries {header} more than once: the auth proxy must set it, replacing whatever the browser sent \
         (nginx: proxy_set_header)"
    )]
    Repeated { header: String },
    #[error(
        "'{user}' is in none of the groups that give a role here ({rule}) and --default-role none refuses everyone \
         else; their groups: {groups}"
    )]
    NoRole { user: String, rule: String, groups: String },
}

/// The proxy sign-in of one running server.
#[derive(Debug)]
pub struct ProxyAuth {
    config: ProxyConfig,
    /// When each user was last audited, and as what.
    seen: Mutex<HashMap<String, (shared::auth::Role, Instant)>>,
    clock: Clock,
}

impl ProxyAuth {
    pub fn new(config: ProxyConfig, clock: Clock) -> Self {
        Self { config, seen: Mutex::new(HashMap::new()), clock }
    }

    pub fn config(&self) -> &ProxyConfig {
        &self.config
    }

    /// Who the proxy says sent this request: `Ok(None)` when it names nobody (a script with a token, or a
    /// visitor who came around the proxy without the header), else the user or why they are refused.
    /// `trusted`: the peer is a trusted proxy (`web::site::Request::via_trusted_proxy`, the web crate).
    pub fn identify(
        &self,
        trusted: bool,
        peer: &str,
        presented: &Presented<'_>,
    ) -> Result<Option<ProxyUser>, ProxyRefused> {
        let header = &self.config.user_header;
        let Some(value) = presented.user.first() else { return Ok(None) };
        for (name, values) in [(header, &presented.user), (&self.config.groups_header, &presented.groups)] {
            if values.len() > 1 {
                return Err(ProxyRefused::Repeated { header: name.clone() });
            }
        }
        let user = value.trim();
        if !trusted {
            return Err(ProxyRefused::Untrusted { header: header.clone(), peer: peer.to_owned() });
        }
        if user.is_empty() {
            // nginx sends an empty header where its auth step set no user: nobody is named.
            return Ok(None);
        }
        if valid_user(user).is_err() {
            let value: String = user.chars().take(80).collect();
            return Err(ProxyRefused::BadUser { header: header.clone(), value });
        }
        let groups_text = presented.groups.first().copied().unwrap_or("");
        let groups = split_groups(groups_text);
        let Some(role) = self.config.roles.role(&groups) else {
            let listed = &groups[..groups.len().min(20)];
            return Err(ProxyRefused::NoRole {
                user: user.to_owned(),
                rule: self.config.roles.describe(),
                groups: if listed.is_empty() { "none".to_owned() } else { listed.join(", ") },
            });
        };
        let owner = self.config.user_map.owner(user);
        let audit = self.first_sight(user, role);
        let identity = Identity { user: owner.to_owned(), role, anonymous: false };
        Ok(Some(ProxyUser { identity, groups: groups.iter().take(50).map(|g| (*g).to_owned()).collect(), audit }))
    }

    /// Notes `user` as `role` now; true when that is news for the audit log.
    fn first_sight(&self, user: &str, role: shared::auth::Role) -> bool {
        let now = self.clock.now();
        let mut seen = lock(&self.seen);
        if let Some((was, at)) = seen.get(user)
            && *was == role
            && now.saturating_duration_since(*at) < AUDIT_AGAIN_AFTER
        {
            return false;
        }
        if seen.len() >= REMEMBERED {
            seen.clear();
        }
        seen.insert(user.to_owned(), (role, now));
        true
    }
}

#[cfg(test)]
mod tests {
    use shared::auth::Role;

    use super::*;

    fn proxy(others: Option<Role>, clock: &Clock) -> ProxyAuth {
        ProxyAuth::new(
            ProxyConfig {
                user_header: parse_header_name("X-Forwarded-User").unwrap(),
                groups_header: parse_header_name(DEFAULT_GROUPS_HEADER).unwrap(),
                roles: GroupRoles { admin: vec!["gpu-admins".into()], operator: vec!["gpu-users".into()], others },
                sign_out: None,
                user_map: UserMap::default(),
            },
            clock.clone(),
        )
    }

    /// What the web layer reads from a request with these headers.
    fn headers<'a>(pairs: &[(&str, &'a str)]) -> Presented<'a> {
        let values = |name: &str| pairs.iter().filter(|(n, _)| *n == name).map(|(_, v)| *v).collect();
        Presented { user: values("x-forwarded-user"), groups: values("x-forwarded-groups") }
    }

    #[test]
    fn the_proxys_user_and_groups_make_the_identity() {
        let clock = Clock::manual();
        let proxy = proxy(Some(Role::Viewer), &clock);
        let ana = headers(&[("x-forwarded-user", "ana"), ("x-forwarded-groups", "staff,gpu-admins")]);
        let who = proxy.identify(true, "127.0.0.1", &ana).unwrap().unwrap();
        assert_eq!(
            (who.identity.user.as_str(), who.identity.role, who.identity.anonymous),
            ("ana", Role::Admin, false)
        );
        assert_eq!(who.groups, ["staff", "gpu-admins"]);
        assert!(who.audit, "first sight is audited");
        assert!(!proxy.identify(true, "127.0.0.1", &ana).unwrap().unwrap().audit, "the next request is not");
        clock.advance(AUDIT_AGAIN_AFTER);
        assert!(proxy.identify(true, "127.0.0.1", &ana).unwrap().unwrap().audit, "nor again until a while later");
        let demoted = headers(&[("x-forwarded-user", "ana"), ("x-forwarded-groups", "gpu-users")]);
        let who = proxy.identify(true, "127.0.0.1", &demoted).unwrap().unwrap();
        assert_eq!((who.identity.role, who.audit), (Role::Operator, true), "a new role is audited at once");
        let cy = headers(&[("x-forwarded-user", "cy")]);
        assert_eq!(proxy.identify(true, "127.0.0.1", &cy).unwrap().unwrap().identity.role, Role::Viewer);
    }

    #[test]
    fn the_user_map_turns_sign_in_names_into_owner_names() {
        let mut proxy = proxy(Some(Role::Viewer), &Clock::manual());
        let map = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(map.path(), "[users]\n\"ana@lab.example.org\" = \"ana\"\n").unwrap();
        proxy.config.user_map = UserMap::load(map.path()).unwrap();
        let mapped = headers(&[("x-forwarded-user", "ana@lab.example.org"), ("x-forwarded-groups", "gpu-users")]);
        let who = proxy.identify(true, "127.0.0.1", &mapped).unwrap().unwrap().identity;
        assert_eq!((who.user.as_str(), who.role), ("ana", Role::Operator));
        let unmapped = headers(&[("x-forwarded-user", "bo@lab.example.org")]);
        assert_eq!(proxy.identify(true, "127.0.0.1", &unmapped).unwrap().unwrap().identity.user, "bo@lab.example.org");
    }

    #[test]
    fn the_headers_are_believed_only_from_a_trusted_proxy() {
        let proxy = proxy(Some(Role::Viewer), &Clock::manual());
        let forged = headers(&[("x-forwarded-user", "root"), ("x-forwarded-groups", "gpu-admins")]);
        let refused = proxy.identify(false, "127.0.0.2", &forged).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "the x-forwarded-user header is believed only from a --trusted-proxy, and this request came from \
             127.0.0.2 directly; sign in through the proxy"
        );
        assert_eq!(proxy.identify(false, "127.0.0.2", &Presented::default()), Ok(None), "no header: tokens decide");
        assert_eq!(proxy.identify(true, "127.0.0.1", &headers(&[("x-forwarded-user", " ")])), Ok(None));
    }

    #[test]
    fn a_header_sent_twice_is_refused_and_loopback_proxies_need_their_user() {
        let proxy = proxy(Some(Role::Viewer), &Clock::manual());
        let twice = headers(&[("x-forwarded-user", "cy"), ("x-forwarded-user", "root")]);
        assert!(matches!(proxy.identify(true, "p", &twice), Err(ProxyRefused::Repeated { .. })));
        assert!(unbelievable(&[], false).unwrap().contains("needs --trusted-proxy"));
        let loopback = ["127.0.0.0/8".parse().unwrap()];
        assert!(unbelievable(&loopback, false).unwrap().contains("needs --trusted-proxy-user"));
        assert_eq!(unbelievable(&loopback, true), None);
        assert_eq!(unbelievable(&["10.0.0.5/32".parse().unwrap()], false), None, "another host: told apart by address");
    }

    #[test]
    fn bad_names_and_users_without_a_role_are_refused_with_the_rule() {
        let proxy = proxy(None, &Clock::manual());
        let spaced = headers(&[("x-forwarded-user", "ana smith")]);
        assert!(matches!(proxy.identify(true, "p", &spaced), Err(ProxyRefused::BadUser { .. })));
        let student = headers(&[("x-forwarded-user", "cy"), ("x-forwarded-groups", "students|staff")]);
        assert_eq!(
            proxy.identify(true, "p", &student).unwrap_err().to_string(),
            "'cy' is in none of the groups that give a role here (admin: gpu-admins; operator: gpu-users) and \
             --default-role none refuses everyone else; their groups: students, staff"
        );
    }

    #[test]
    fn flag_values_are_checked() {
        assert!(parse_header_name("X Forwarded").unwrap_err().contains("not an HTTP header name"));
        assert_eq!(parse_header_name(" X-Auth-Request-User ").unwrap(), "x-auth-request-user");
        assert_eq!(parse_sign_out("/oauth2/sign_out").unwrap(), "/oauth2/sign_out");
        assert!(parse_sign_out("https://login.example.com/logout").is_ok());
        assert!(parse_sign_out("//evil.example.com").is_err() && parse_sign_out("javascript:alert(1)").is_err());
    }
}
