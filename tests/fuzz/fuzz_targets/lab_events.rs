//! Fuzzes the decoding of what the lab pushes to every page: `LabEvent`, alone
//! and inside `{"type":"lab",…}`, tag first (see `shared::tagged`). Decoding must
//! never panic, and whatever decodes must encode and decode back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use shared::ServerMessage;
use shared::lab::LabEvent;

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
    round_trip::<LabEvent>(bytes);
    if let Ok(ServerMessage::Lab(event)) = serde_json::from_slice::<ServerMessage>(bytes) {
        // The page's path: the message, then the event it carries, encoded again as the server would.
        let again = serde_json::to_vec(&ServerMessage::Lab(event.clone())).expect("a lab message encodes");
        match serde_json::from_slice::<ServerMessage>(&again) {
            Ok(ServerMessage::Lab(back)) => assert_eq!(back, event),
            other => panic!("a lab message decoded as {other:?}"),
        }
    }
});
