use super::*;

const HOME: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// Time between two events of a test, so "oldest" and "idle longest" are told by time, not by id.
const TICK: Duration = Duration::from_millis(1);

fn registry(max: usize, per_client: usize) -> Arc<Registry> {
    Arc::new(Registry::new(Limits { max, per_client, exempt: Vec::new() }, Clock::manual()))
}

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

#[test]
fn at_the_limit_the_connection_idle_longest_closes_and_signed_in_websockets_stay() {
    let registry = registry(3, 100);
    let websocket = registry.admit(HOME, None).unwrap();
    Busy::start(registry.clone(), websocket.id, false).upgraded(false);
    let oldest = registry.admit(HOME, None).unwrap();
    registry.clock.advance(TICK);
    let busy = registry.admit(HOME, None).unwrap();
    let request = Busy::start(registry.clone(), busy.id, false);

    let newcomer = registry.admit(HOME, None).expect("room made by closing an idle connection");
    assert_eq!(registry.state(oldest.id), Some(State::Closing));
    assert!(matches!(registry.state(websocket.id), Some(State::Upgraded { anonymous: false, .. })));
    assert_eq!(registry.state(busy.id), Some(State::Busy(1)));
    drop(oldest);

    // The newcomer is idle now: it goes next, then nothing is left to close.
    let another = registry.admit(HOME, None).unwrap();
    assert_eq!(registry.state(newcomer.id), Some(State::Closing));
    drop(newcomer);
    let second_request = Busy::start(registry.clone(), another.id, false);
    assert!(registry.admit(HOME, None).is_none(), "a signed-in WebSocket and two busy connections: refused");

    // A request that has been answered leaves its connection idle, so closable again.
    drop(request);
    assert!(matches!(registry.state(busy.id), Some(State::Idle(_))));
    assert!(registry.admit(HOME, None).is_some());
    assert_eq!(registry.state(busy.id), Some(State::Closing));
    assert_eq!(registry.state(another.id), Some(State::Busy(1)));
    drop(second_request);
}

#[test]
fn a_slow_body_then_an_anonymous_websocket_make_room_and_a_fresh_body_does_not() {
    let registry = registry(2, 100);
    let socket = registry.admit(HOME, None).unwrap();
    Busy::start(registry.clone(), socket.id, false).upgraded(true);
    let reading = registry.admit(HOME, None).unwrap();
    let body = Busy::start(registry.clone(), reading.id, true);
    // The body began just now: not slow yet, so the anonymous WebSocket goes.
    let first = registry.admit(HOME, None).unwrap();
    assert_eq!(registry.state(socket.id), Some(State::Closing));
    assert!(matches!(registry.state(reading.id), Some(State::Reading(_))));
    drop(socket);
    let _answering = Busy::start(registry.clone(), first.id, false);
    // A body trickling for over a second is closed to make room.
    registry.clock.advance(SLOW_BODY * 2);
    let _second = registry.admit(HOME, None).unwrap();
    assert_eq!(registry.state(reading.id), Some(State::Closing));
    // A body read in time leaves the connection busy, not closable.
    body.body_read();
    assert_eq!(registry.state(reading.id), Some(State::Closing), "closing stays closing");
}

#[test]
fn one_client_holds_at_most_its_share_and_others_still_get_in() {
    let registry = registry(100, 4);
    let attacker = ip("10.0.0.9");
    let mut held: Vec<_> = (0..4).map(|_| registry.admit(attacker, None).unwrap()).collect();
    // Busy ones cannot be closed: the fifth is refused.
    let requests: Vec<_> = held.iter().map(|s| Busy::start(registry.clone(), s.id, false)).collect();
    assert!(registry.admit(attacker, None).is_none());
    assert!(registry.admit(ip("10.0.0.10"), None).is_some(), "another client is not affected");
    // IPv6 clients count by /64.
    let v6: Vec<_> = (1..=4)
        .map(|i| {
            registry.clock.advance(TICK);
            registry.admit(ip(&format!("2001:db8::{i}")), None).unwrap()
        })
        .collect();
    assert!(registry.admit(ip("2001:db8::ffff"), None).is_some(), "its own idle oldest closes");
    assert_eq!(registry.state(v6[0].id), Some(State::Closing));
    drop(requests);
    // Once idle, the client's own oldest makes room for its newest.
    let fifth = registry.admit(attacker, None).unwrap();
    assert!(held.iter().any(|s| registry.state(s.id) == Some(State::Closing)));
    held.push(fifth);
}

#[test]
fn on_the_machine_itself_each_user_is_a_client_of_their_own() {
    let registry = registry(100, 4);
    let (user, admin) = (Some(65534), Some(0));
    let flood: Vec<_> = (0..4).map(|_| registry.admit(HOME, user).unwrap()).collect();
    let requests: Vec<_> = flood.iter().map(|s| Busy::start(registry.clone(), s.id, false)).collect();
    assert!(registry.admit(HOME, user).is_none(), "the user's share is spent");
    let theirs = registry.admit(HOME, admin).expect("the admin's own share is untouched");
    assert!(matches!(registry.state(theirs.id), Some(State::Idle(_))));
    assert!(flood.iter().all(|s| registry.state(s.id) != Some(State::Closing)), "nor does the admin close theirs");
    // Elsewhere the uid is never part of the key: it is not known, and could not be trusted.
    assert_eq!(Client::new(ip("10.0.0.1"), Some(5)), Client::new(ip("10.0.0.1"), None));
    assert_eq!(Client::new(ip("::ffff:127.0.0.1"), Some(5)).to_string(), "127.0.0.1 (uid 5)");
    drop(requests);
}

#[test]
fn trusted_proxies_are_exempt_from_the_per_client_share() {
    let registry = Arc::new(Registry::new(
        Limits { max: 100, per_client: 2, exempt: vec!["10.9.0.0/16".parse().unwrap()] },
        Clock::manual(),
    ));
    let slots: Vec<_> = (0..10).map(|_| registry.admit(ip("10.9.0.1"), None).unwrap()).collect();
    assert!(slots.iter().all(|s| matches!(registry.state(s.id), Some(State::Idle(_)))));
    for slot in &slots {
        Busy::start(registry.clone(), slot.id, false).upgraded(true);
    }
    assert!(
        slots.iter().all(|s| matches!(registry.state(s.id), Some(State::Upgraded { .. }))),
        "the anonymous share is per client, and a proxy carries many"
    );
}

#[test]
fn the_last_slots_are_kept_for_loopback() {
    let registry = registry(32, 100); // a reserve of 2
    let outside: Vec<_> = (0..30).map(|i| registry.admit(ip(&format!("10.1.0.{i}")), None).unwrap()).collect();
    let requests: Vec<_> = outside.iter().map(|s| Busy::start(registry.clone(), s.id, false)).collect();
    assert!(registry.admit(ip("10.2.0.1"), None).is_none(), "the reserve is not for outside clients");
    let home: Vec<_> = (0..2).map(|_| registry.admit(HOME, None).expect("loopback takes a reserved slot")).collect();
    assert!(registry.admit(ip("10.3.0.1"), None).is_none(), "an outside newcomer never closes the admin's idle one");
    assert!(matches!(registry.state(home[0].id), Some(State::Idle(_))));
    let _busy: Vec<_> = home.iter().map(|s| Busy::start(registry.clone(), s.id, false)).collect();
    assert!(registry.admit(HOME, None).is_none(), "the limit holds for loopback too");
    drop(requests);
}

#[test]
fn a_client_keeps_its_share_of_anonymous_websockets_and_the_oldest_goes() {
    let registry = registry(100, 8); // two anonymous WebSockets each
    let client = ip("10.0.0.7");
    let sockets: Vec<_> = (0..3).map(|_| registry.admit(client, None).unwrap()).collect();
    for s in &sockets {
        registry.clock.advance(TICK);
        Busy::start(registry.clone(), s.id, false).upgraded(true);
    }
    assert_eq!(registry.state(sockets[0].id), Some(State::Closing));
    assert!(matches!(registry.state(sockets[2].id), Some(State::Upgraded { anonymous: true, .. })));
    let signed_in = registry.admit(client, None).unwrap();
    Busy::start(registry.clone(), signed_in.id, false).upgraded(false);
    assert!(matches!(registry.state(sockets[1].id), Some(State::Upgraded { .. })), "signed-in ones not counted");
}
