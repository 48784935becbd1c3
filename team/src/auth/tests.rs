use super::*;

fn auth(open_viewing: bool) -> Auth {
    Auth::new(config(open_viewing))
}

fn config(open_viewing: bool) -> AuthConfig {
    AuthConfig {
        tokens: vec![
            TokenEntry { user: "ana".into(), role: Role::Operator, sha256: hash_token("ana-secret") },
            TokenEntry { user: "root".into(), role: Role::Admin, sha256: hash_token("root-secret") },
        ],
        open_viewing,
        open_metrics: true,
        ..AuthConfig::default()
    }
}

#[test]
fn without_tokens_the_local_user_may_do_everything() {
    let auth = Auth::new(AuthConfig::default());
    let (me, _) = auth.identify(None, None).unwrap();
    assert!(me.anonymous && me.role == Role::Admin);
}

#[test]
fn tokens_map_to_their_roles_and_wrong_ones_are_refused() {
    let auth = auth(true);
    assert_eq!(auth.identify(Some("ana-secret"), None).unwrap().0.role, Role::Operator);
    assert_eq!(auth.identify(Some("root-secret"), None).unwrap().0.user, "root");
    assert_eq!(auth.identify(Some("nope"), None), Err(Unauthorized::BadToken));
    assert_eq!(auth.identify(None, None).unwrap().0.role, Role::Viewer);
    assert_eq!(self::auth(false).identify(None, None), Err(Unauthorized::Required));
}

#[test]
fn sessions_identify_until_logout() {
    let auth = auth(false);
    let (who, id, lifetime) = auth.login("ana-secret", "127.0.0.1".parse().unwrap()).unwrap();
    assert_eq!((who.user.as_str(), lifetime), ("ana", SESSION_LIFETIME));
    let (me, session) = auth.identify(None, Some(&id)).unwrap();
    assert_eq!(me.role, Role::Operator);
    let session = session.unwrap();
    assert!(auth.session_alive(&session));
    let ends = auth.session_ends();
    auth.logout(&id);
    assert!(ends.has_changed().unwrap(), "open sockets are told");
    assert!(!auth.session_alive(&session));
    assert_eq!(auth.identify(None, Some(&id)), Err(Unauthorized::Expired));
    let (_, _, admin_lifetime) = auth.login("root-secret", "127.0.0.1".parse().unwrap()).unwrap();
    assert_eq!(admin_lifetime, ADMIN_SESSION_LIFETIME, "admins get the shorter session");
}

#[test]
fn wrong_tokens_are_throttled_but_a_correct_one_always_works() {
    let clock = Clock::manual();
    let auth = Auth::with_clock(config(true), clock.clone());
    let from: IpAddr = "127.0.0.1".parse().unwrap();
    for _ in 0..FAILURES_ALLOWED {
        assert_eq!(auth.login("guess", from).unwrap_err(), Refused::Invalid);
    }
    assert!(matches!(auth.login("guess", from).unwrap_err(), Refused::Throttled(_)));
    assert!(matches!(auth.check_token_from("guess", from).unwrap_err(), Refused::Throttled(_)));
    // Behind a proxy everyone shares an address: the admin still gets in.
    assert!(auth.login("root-secret", from).is_ok());
    assert!(auth.check_token_from("ana-secret", from).is_ok());
    assert_eq!(auth.check_token_from("guess", "10.0.0.10".parse().unwrap()).unwrap_err(), Refused::Invalid);
    // Ten at once, then one every six seconds: the wait says how long.
    assert_eq!(auth.check_token_from("guess", from).unwrap_err(), Refused::Throttled(6));
    clock.advance(FAILURES_PER / FAILURES_ALLOWED);
    assert_eq!(auth.check_token_from("guess", from).unwrap_err(), Refused::Invalid);
    assert_eq!(auth.check_token_from("guess", from).unwrap_err(), Refused::Throttled(6));
}

#[test]
fn sessions_expire_by_the_clock() {
    let clock = Clock::manual();
    let auth = Auth::with_clock(config(false), clock.clone());
    let (_, id, lifetime) = auth.login("ana-secret", "127.0.0.1".parse().unwrap()).unwrap();
    let (_, session) = auth.identify(None, Some(&id)).unwrap();
    clock.advance(lifetime - Duration::from_secs(1));
    assert!(auth.session_alive(&session.unwrap()));
    clock.advance(Duration::from_secs(1));
    assert!(!auth.session_alive(&session.unwrap()));
    assert_eq!(auth.identify(None, Some(&id)), Err(Unauthorized::Expired));
}

#[test]
fn many_logins_do_not_rescan_every_session() {
    let auth = auth(true);
    let from: IpAddr = "127.0.0.1".parse().unwrap();
    for _ in 0..5_000 {
        auth.login("ana-secret", from).unwrap();
    }
    let sessions = lock(&auth.sessions);
    assert_eq!(sessions.by_key.len(), 5_000);
    assert!(sessions.sweep_at > 5_000, "the next sweep waits until the map doubles");
}

#[test]
fn only_signed_in_callers_see_people_when_tokens_exist() {
    let team = auth(true);
    let anonymous = team.identify(None, None).unwrap().0;
    let ana = team.identify(Some("ana-secret"), None).unwrap().0;
    assert!(!team.shows_people_to(Some(&anonymous)) && !team.shows_people_to(None));
    assert!(team.shows_people_to(Some(&ana)));
    assert!(team.admits_anonymous_viewers() && !auth(false).admits_anonymous_viewers());
    let workstation = Auth::new(AuthConfig::default());
    let me = workstation.identify(None, None).unwrap().0;
    assert!(workstation.shows_people_to(Some(&me)) && workstation.shows_people_to(None));
    assert!(!workstation.admits_anonymous_viewers(), "no tokens: nobody needs a redacted view");
}

#[test]
fn require_says_what_is_missing() {
    let viewer = Identity { user: "bo".into(), role: Role::Viewer, anonymous: false };
    let err = viewer.require(Role::Operator, "running an experiment").unwrap_err();
    assert_eq!(err.to_string(), "running an experiment needs the operator role; 'bo' has viewer");
    assert_eq!((err.needed, err.has), (Role::Operator, Role::Viewer));
    assert!(viewer.require(Role::Viewer, "x").is_ok());
}
