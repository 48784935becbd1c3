//! Decoding of the internally tagged messages (`{"type":"tick", …}`) with the
//! tag read first and the rest handed straight to the variant's type.
//!
//! serde's derived decoder for `#[serde(tag = "…")]` cannot know where the tag
//! is, so it first copies the whole object into a generic buffer and decodes the
//! variant from there. That costs an allocation per value on every message and,
//! in the browser app, a second copy of every nested type's decoder (one for the
//! JSON reader, one for the buffer): 20 KiB of the gzip download. gpudash's
//! server always writes the tag first (serde's derived encoder does), so the
//! decoders here require it there and say so when it is not.

use serde::Deserialize;
use serde::de::{self, MapAccess};

/// Reads the map's first entry, which must be `tag`, and returns its value (the variant's name).
pub(crate) fn leading_tag<'de, A, T>(map: &mut A, tag: &'static str) -> Result<T, A::Error>
where
    A: MapAccess<'de>,
    T: Deserialize<'de>,
{
    match map.next_key::<String>()? {
        Some(key) if key == tag => map.next_value(),
        Some(key) => Err(de::Error::custom(format_args!("expected \"{tag}\" as the first key, found \"{key}\""))),
        None => Err(de::Error::missing_field(tag)),
    }
}

/// The rest of the map, for the variant's own decoder.
pub(crate) fn rest<'de, A: MapAccess<'de>>(map: A) -> de::value::MapAccessDeserializer<A> {
    de::value::MapAccessDeserializer::new(map)
}
