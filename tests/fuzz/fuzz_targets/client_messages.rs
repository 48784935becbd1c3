//! Fuzzes the decoding of everything a client can send: WebSocket messages,
//! lab run requests, logins and history metric names. Decoding must never
//! panic, and whatever decodes must encode and decode back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shared::auth::LoginRequest;
use shared::history::Metric;
use shared::lab::RunRequest;
use shared::{ClientMessage, ServerMessage};

fn round_trip<T>(bytes: &[u8])
where
    T: serde::de::DeserializeOwned + serde::Serialize + PartialEq + std::fmt::Debug,
{
    if let Ok(value) = serde_json::from_slice::<T>(bytes) {
        let again = serde_json::to_vec(&value).expect("a decoded value encodes");
        let back: T = serde_json::from_slice(&again).expect("an encoded value decodes");
        assert_eq!(back, value);
    }
}

fuzz_target!(|bytes: &[u8]| {
    round_trip::<ClientMessage>(bytes);
    round_trip::<LoginRequest>(bytes);
    let _ = serde_json::from_slice::<RunRequest>(bytes);
    let _ = serde_json::from_slice::<ServerMessage>(bytes);
    if let Ok(text) = std::str::from_utf8(bytes) {
        let _ = Metric::from_name(text);
        let _ = shared::auth::Role::parse(text);
    }
});
