//! A sign-in under way, sealed into the browser's state cookie: the `state` the provider must send back,
//! and what only gpudash may know of it (the PKCE verifier, the nonce, where to go afterwards), encrypted
//! and authenticated (ChaCha20-Poly1305, `ring`) with a key made at start. The server keeps nothing per
//! sign-in, so starting sign-ins costs it no memory; a restart ends the sign-ins under way.

use base64::Engine as _;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use serde::{Deserialize, Serialize};

/// What the callback needs of a sign-in it did not see start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// The `state` sent to the provider, which must come back with the browser.
    #[serde(rename = "s")]
    pub state: String,
    /// The PKCE code verifier (its S256 challenge went to the provider).
    #[serde(rename = "v")]
    pub verifier: String,
    /// The nonce the ID token must carry.
    #[serde(rename = "n")]
    pub nonce: String,
    /// The page to open after signing in (a path on this site).
    #[serde(rename = "x")]
    pub next: String,
    /// When it started (ms since the epoch).
    #[serde(rename = "t")]
    pub started_ms: u64,
}

/// What the cookie is bound to, besides its key: a sealed value of another purpose never opens here.
const PURPOSE: &[u8] = b"gpudash oidc sign-in v1";

/// The key of one running server.
pub struct Sealer {
    key: LessSafeKey,
}

impl Sealer {
    pub fn new() -> Self {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).expect("the OS random number generator is available");
        let key = UnboundKey::new(&CHACHA20_POLY1305, &bytes).expect("a 32-byte key is ChaCha20-Poly1305's size");
        Self { key: LessSafeKey::new(key) }
    }

    /// The cookie value: base64url of a random nonce and the sealed JSON.
    pub fn seal(&self, pending: &Pending) -> String {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce).expect("the OS random number generator is available");
        let mut sealed = serde_json::to_vec(pending).expect("plain strings and a number serialize");
        self.key
            .seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(PURPOSE), &mut sealed)
            .expect("a cookie's few hundred bytes are far within ChaCha20-Poly1305's limit");
        let mut value = nonce.to_vec();
        value.extend_from_slice(&sealed);
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value)
    }

    /// The sign-in in a cookie value this server sealed; `None` for anything else (altered, another key).
    pub fn open(&self, value: &str) -> Option<Pending> {
        if value.len() > 8192 {
            return None;
        }
        let mut bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(value).ok()?;
        if bytes.len() <= NONCE_LEN {
            return None;
        }
        let mut sealed = bytes.split_off(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(&bytes).ok()?;
        let plain = self.key.open_in_place(nonce, Aad::from(PURPOSE), &mut sealed).ok()?;
        serde_json::from_slice(plain).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending() -> Pending {
        Pending { state: "st".into(), verifier: "ve".into(), nonce: "no".into(), next: "/#lab".into(), started_ms: 7 }
    }

    #[test]
    fn a_sealed_sign_in_opens_only_here_and_unaltered() {
        let sealer = Sealer::new();
        let value = sealer.seal(&pending());
        assert_eq!(sealer.open(&value), Some(pending()));
        assert!(!value.contains("ve") || sealer.seal(&pending()) != value, "sealed anew each time, never in clear");
        assert_eq!(Sealer::new().open(&value), None, "another server's key");
        let mut altered = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(&value).unwrap();
        let last = altered.len() - 1;
        altered[last] ^= 1;
        assert_eq!(sealer.open(&base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(altered)), None);
        assert_eq!(sealer.open(""), None);
        assert_eq!(sealer.open("not base64!"), None);
        assert_eq!(sealer.open(&"A".repeat(9000)), None);
    }
}
