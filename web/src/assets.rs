//! The embedded browser app: served from memory, compressed at build time
//! (brotli where the browser takes it, else gzip), revalidated by ETag.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use super::ApiError;

/// One file of the browser app.
#[derive(Debug)]
pub struct Asset {
    pub path: &'static str,
    pub content_type: &'static str,
    /// Fetched when a tab first needs it (a split module), not at the first load.
    pub lazy: bool,
    pub etag: &'static str,
    pub body: &'static [u8],
    pub gzip: &'static [u8],
    pub brotli: &'static [u8],
}

include!(concat!(env!("OUT_DIR"), "/assets.rs"));

/// Fallback handler: an asset by exact path, or a 404 that says what exists.
pub async fn serve(method: Method, uri: Uri, headers: HeaderMap) -> Response {
    let Some(asset) = ASSETS.iter().find(|a| a.path == uri.path()) else {
        return ApiError::not_found(format!("no page or file at '{}'; the dashboard is at /", uri.path()))
            .into_response();
    };
    if method != Method::GET && method != Method::HEAD {
        return (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, "GET, HEAD")]).into_response();
    }
    let mut response = if headers.get(header::IF_NONE_MATCH).is_some_and(|v| v.as_bytes() == asset.etag.as_bytes()) {
        StatusCode::NOT_MODIFIED.into_response()
    } else if accepts(&headers, "br") {
        let mut response = Body::from(asset.brotli).into_response();
        response.headers_mut().insert(header::CONTENT_ENCODING, HeaderValue::from_static("br"));
        response
    } else if accepts(&headers, "gzip") {
        let mut response = Body::from(asset.gzip).into_response();
        response.headers_mut().insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        response
    } else {
        Body::from(asset.body).into_response()
    };
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type));
    h.insert(header::ETAG, HeaderValue::from_static(asset.etag));
    h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    // Revalidate every time: names carry no hash, and a 304 costs one round trip.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// Whether `Accept-Encoding` takes `coding` (by name or `*`, and not refused with `q=0`).
fn accepts(headers: &HeaderMap, coding: &str) -> bool {
    headers.get_all(header::ACCEPT_ENCODING).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).any(
        |offered| {
            let mut parts = offered.split(';');
            let name = parts.next().unwrap_or("").trim();
            let refused = parts.any(|p| matches!(p.trim(), "q=0" | "q=0.0" | "q=0.00" | "q=0.000"));
            (name.eq_ignore_ascii_case(coding) || name == "*") && !refused
        },
    )
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use super::*;

    fn encodings(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn a_coding_only_when_accepted() {
        assert!(accepts(&encodings("gzip, deflate, br"), "gzip"));
        assert!(accepts(&encodings("gzip, deflate, br"), "br"));
        assert!(accepts(&encodings("br;q=1.0, GZIP;q=0.5"), "gzip"));
        assert!(!accepts(&encodings("gzip;q=0"), "gzip"));
        assert!(!accepts(&encodings("br;q=0, gzip"), "br"));
        assert!(!accepts(&encodings("br"), "gzip"));
        assert!(!accepts(&encodings("gzip"), "br"));
        assert!(accepts(&encodings("*"), "br"));
        assert!(!accepts(&HeaderMap::new(), "gzip"));
    }

    #[test]
    fn the_app_is_embedded() {
        for path in ["/", "/assets/frontend.js", "/assets/frontend_bg.wasm", "/assets/style.css", "/assets/boot.js"] {
            let asset = ASSETS.iter().find(|a| a.path == path).unwrap_or_else(|| panic!("{path} missing"));
            assert!(!asset.body.is_empty(), "{path}");
            let mut gunzipped = Vec::new();
            flate2::read::GzDecoder::new(asset.gzip).read_to_end(&mut gunzipped).unwrap();
            assert_eq!(gunzipped, asset.body, "{path}: the gzip is of the same file");
            let mut unbrotlied = Vec::new();
            brotli::Decompressor::new(asset.brotli, 4096).read_to_end(&mut unbrotlied).unwrap();
            assert_eq!(unbrotlied, asset.body, "{path}: the brotli is of the same file");
        }
        let wasm = ASSETS.iter().find(|a| a.path.ends_with(".wasm")).unwrap();
        assert_eq!(&wasm.body[..4], b"\0asm");
    }
}
