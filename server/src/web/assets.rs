//! The embedded browser app: served from memory, gzip when the browser takes it,
//! revalidated by ETag.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use super::ApiError;

/// One file of the browser app.
#[derive(Debug)]
pub struct Asset {
    pub path: &'static str,
    pub content_type: &'static str,
    pub etag: &'static str,
    pub body: &'static [u8],
    pub gzip: &'static [u8],
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
    } else if accepts_gzip(&headers) {
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

fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers.get_all(header::ACCEPT_ENCODING).iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).any(
        |coding| {
            let mut parts = coding.split(';');
            let name = parts.next().unwrap_or("").trim();
            let refused = parts.any(|p| matches!(p.trim(), "q=0" | "q=0.0" | "q=0.00" | "q=0.000"));
            (name.eq_ignore_ascii_case("gzip") || name == "*") && !refused
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encodings(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT_ENCODING, HeaderValue::from_str(value).unwrap());
        h
    }

    #[test]
    fn gzip_only_when_accepted() {
        assert!(accepts_gzip(&encodings("gzip, deflate, br")));
        assert!(accepts_gzip(&encodings("br;q=1.0, GZIP;q=0.5")));
        assert!(!accepts_gzip(&encodings("gzip;q=0")));
        assert!(!accepts_gzip(&encodings("br")));
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    #[test]
    fn the_app_is_embedded() {
        for path in ["/", "/assets/frontend.js", "/assets/frontend_bg.wasm", "/assets/style.css", "/assets/boot.js"] {
            let asset = ASSETS.iter().find(|a| a.path == path).unwrap_or_else(|| panic!("{path} missing"));
            assert!(!asset.body.is_empty() && asset.gzip.len() < asset.body.len() + 64, "{path}");
        }
        let wasm = ASSETS.iter().find(|a| a.path.ends_with(".wasm")).unwrap();
        assert_eq!(&wasm.body[..4], b"\0asm");
    }
}
