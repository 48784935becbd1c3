//! Which site a request is for and where it comes from: the Host names the
//! dashboard answers to (against DNS rebinding), the public URLs it is served
//! under (`--public-url`), and the reverse proxies whose forwarded headers it
//! trusts (`--trusted-proxy`).

use std::net::{IpAddr, SocketAddr};

use axum::http::{HeaderMap, StatusCode, header};
use ipnet::IpNet;

use super::ApiError;

/// An origin the page is served under, from `--public-url`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicUrl {
    /// `http` or `https`.
    pub scheme: String,
    /// Lower-case host name or IP literal (IPv6 in brackets).
    pub host: String,
    /// The port as written, `None` for the scheme's default.
    pub port: Option<u16>,
}

impl PublicUrl {
    /// Parses `https://gpu1.example.com` or `http://gpu1:7070`; the page lives at the root.
    pub fn parse(text: &str) -> Result<Self, SiteError> {
        let wrong = |why: PublicUrlFault| SiteError::NotAPublicUrl { value: text.to_owned(), why };
        let url = url::Url::parse(text.trim()).map_err(|e| wrong(PublicUrlFault::Unparsable(e)))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(wrong(PublicUrlFault::Scheme));
        }
        if !url.username().is_empty() || url.password().is_some() {
            return Err(wrong(PublicUrlFault::Credentials));
        }
        if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
            return Err(wrong(PublicUrlFault::Path));
        }
        let host = match url.host() {
            Some(url::Host::Domain(name)) => name.to_ascii_lowercase(),
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => format!("[{ip}]"),
            None => return Err(wrong(PublicUrlFault::NoHost)),
        };
        Ok(Self { scheme: url.scheme().to_owned(), host, port: url.port() })
    }

    /// `scheme://host[:port]`, as a browser writes it in `Origin`.
    pub fn origin(&self) -> String {
        match self.port {
            Some(port) => format!("{}://{}:{port}", self.scheme, self.host),
            None => format!("{}://{}", self.scheme, self.host),
        }
    }

    fn is_https(&self) -> bool {
        self.scheme == "https"
    }

    /// This URL's host and port are `authority` (a Host header's value).
    fn matches(&self, authority: &Authority) -> bool {
        let default_port = if self.is_https() { 443 } else { 80 };
        authority.host == self.host && authority.port.unwrap_or(default_port) == self.port.unwrap_or(default_port)
    }
}

/// Why a `--public-url` or `--trusted-proxy` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SiteError {
    #[error(
        "'{value}' is not a public URL ({why}); use the address people open, e.g. https://gpu1.example.com or http://gpu1:7070"
    )]
    NotAPublicUrl { value: String, why: PublicUrlFault },
    #[error("'{value}' is not an IP address or network; use e.g. 127.0.0.1, ::1 or 10.0.0.0/8")]
    NotAProxy { value: String },
}

/// What is wrong with a `--public-url`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PublicUrlFault {
    #[error("{0}")]
    Unparsable(url::ParseError),
    #[error("the scheme must be http or https")]
    Scheme,
    #[error("no user name or password belongs in it")]
    Credentials,
    #[error("gpudash is served at the root of its host name, without a path")]
    Path,
    #[error("it names no host")]
    NoHost,
}

/// A trusted proxy's address or network, from `--trusted-proxy`.
pub fn parse_trusted_proxy(text: &str) -> Result<IpNet, SiteError> {
    let text = text.trim();
    text.parse::<IpNet>()
        .or_else(|_| text.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| SiteError::NotAProxy { value: text.to_owned() })
}

/// The names and proxies of one running dashboard.
#[derive(Debug, Clone, Default)]
pub struct Site {
    /// Served over TLS by gpudash itself.
    pub tls: bool,
    /// Every `--public-url`.
    pub public: Vec<PublicUrl>,
    /// Host names accepted besides IP literals, `localhost` and the public URLs' hosts:
    /// the OS host name and `--hostname`, lower case.
    pub names: Vec<String>,
    /// Peers whose `X-Forwarded-*` / `Forwarded` headers are believed.
    pub trusted_proxies: Vec<IpNet>,
    /// `--trusted-proxy-user`: when named, a loopback trusted proxy's headers are believed only
    /// from these users' sockets.
    pub proxy_users: super::local_user::Users,
    /// `--local-user`: without tokens, who besides gpudash's own user may use it from this machine.
    pub local_users: super::local_user::Users,
}

/// What the edge learned about one request.
#[derive(Debug, Clone)]
pub struct Request {
    /// The client: the peer, or the address a trusted proxy forwarded.
    pub client: IpAddr,
    /// The page's scheme as the browser sees it: https under `--tls-cert`, behind a
    /// trusted proxy that says so, or under an https public URL.
    pub secure: bool,
    /// The request names this server by a loopback name or address (`localhost`, 127.0.0.1, ::1).
    pub loopback_host: bool,
    /// The request carries forwarding headers (it went through a proxy, trusted or not).
    pub forwarded: bool,
    /// The peer is a `--trusted-proxy` (and, on loopback with `--trusted-proxy-user`, that user's socket):
    /// its headers are believed, an auth proxy's user header included.
    pub via_trusted_proxy: bool,
    /// `scheme://host[:port]` this request was addressed to, for the Origin check.
    pub own_origin: Option<String>,
}

/// A Host header (or `X-Forwarded-Host`) split into a lower-case host and a port.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Authority {
    host: String,
    port: Option<u16>,
}

impl Authority {
    fn parse(text: &str) -> Option<Self> {
        let text = text.trim().to_ascii_lowercase();
        let (host, port) = if let Some(rest) = text.strip_prefix('[') {
            let (ip, after) = rest.split_once(']')?;
            ip.parse::<std::net::Ipv6Addr>().ok()?;
            let port = match after.strip_prefix(':') {
                Some(port) => Some(port.parse().ok()?),
                None if after.is_empty() => None,
                None => return None,
            };
            (format!("[{ip}]"), port)
        } else {
            match text.rsplit_once(':') {
                Some((host, port)) => (host.to_owned(), Some(port.parse().ok()?)),
                None => (text.clone(), None),
            }
        };
        let valid = !host.is_empty()
            && host.len() <= 253
            && host.chars().all(|c| c.is_ascii_alphanumeric() || "-._[]:".contains(c));
        valid.then_some(Self { host, port })
    }

    fn ip(&self) -> Option<IpAddr> {
        self.host.trim_start_matches('[').trim_end_matches(']').parse().ok()
    }

    fn is_loopback(&self) -> bool {
        self.host == "localhost" || self.host.ends_with(".localhost") || self.ip().is_some_and(|ip| ip.is_loopback())
    }

    fn text(&self) -> String {
        match self.port {
            Some(port) => format!("{}:{port}", self.host),
            None => self.host.clone(),
        }
    }
}

/// The headers a proxy adds; any of them means the request was forwarded.
const FORWARDING_HEADERS: [&str; 5] =
    ["forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-proto", "x-real-ip"];

impl Site {
    /// Accepts `peer`'s request for one of this dashboard's names, or refuses it with 421.
    pub fn check(&self, peer: SocketAddr, headers: &HeaderMap) -> Result<Request, ApiError> {
        self.check_from(peer, None, headers)
    }

    /// [`Site::check`], knowing the uid that owns a loopback peer's socket (`None`: unknown):
    /// with `--trusted-proxy-user`, only those users' loopback sockets are trusted proxies.
    pub fn check_from(&self, peer: SocketAddr, owner: Option<u32>, headers: &HeaderMap) -> Result<Request, ApiError> {
        let proxy_user = self.proxy_users.uids.is_empty()
            || !peer.ip().is_loopback()
            || owner.is_some_and(|uid| self.proxy_users.contains(uid));
        let trusted = self.trusts(peer.ip()) && proxy_user;
        let forwarded = FORWARDING_HEADERS.iter().any(|name| headers.contains_key(*name));
        let client =
            if trusted { forwarded_client(headers, &self.trusted_proxies).unwrap_or(peer.ip()) } else { peer.ip() };
        let forwarded_host = trusted.then(|| header_text(headers, "x-forwarded-host")).flatten();
        let host_header = forwarded_host.or_else(|| header_text(headers, header::HOST.as_str()));
        let Some(host_text) = host_header else {
            // HTTP/1.0 scripts may send no Host; a browser always does, so no page can rebind this way.
            let loopback_host = peer.ip().is_loopback();
            return Ok(Request {
                client,
                secure: self.tls,
                loopback_host,
                forwarded,
                via_trusted_proxy: trusted,
                own_origin: None,
            });
        };
        let authority = Authority::parse(host_text).ok_or_else(|| ApiError {
            status: StatusCode::BAD_REQUEST,
            message: format!("the Host header '{host_text}' is not a host name or address with an optional port"),
        })?;
        if !self.knows(&authority) {
            return Err(ApiError {
                status: StatusCode::MISDIRECTED_REQUEST,
                message: format!(
                    "this dashboard does not answer to the name '{}': a page on another site may be trying to reach it \
                     (DNS rebinding). If that is the name people use, start gpudash with --public-url {}://{}",
                    authority.host,
                    if self.tls { "https" } else { "http" },
                    authority.text(),
                ),
            });
        }
        let public = self.public.iter().find(|url| url.matches(&authority));
        let proto = trusted.then(|| header_text(headers, "x-forwarded-proto")).flatten();
        let secure = self.tls
            || proto.is_some_and(|p| p.trim().eq_ignore_ascii_case("https"))
            || (proto.is_none() && public.is_some_and(PublicUrl::is_https));
        let scheme = if secure { "https" } else { "http" };
        Ok(Request {
            client,
            secure,
            loopback_host: authority.is_loopback(),
            forwarded,
            via_trusted_proxy: trusted,
            own_origin: Some(format!("{scheme}://{}", authority.text())),
        })
    }

    /// A browser's `Origin` is this dashboard: the request's own origin or a public URL.
    pub fn is_own_origin(&self, request: &Request, origin: &str) -> bool {
        let origin = origin.trim();
        request.own_origin.as_deref().is_some_and(|own| own.eq_ignore_ascii_case(origin))
            || self.public.iter().any(|url| url.origin().eq_ignore_ascii_case(origin))
    }

    fn trusts(&self, ip: IpAddr) -> bool {
        self.trusted_proxies.iter().any(|net| net.contains(&ip))
    }

    fn knows(&self, authority: &Authority) -> bool {
        // An IP literal is safe: a rebinding page's Host carries its own name, never our address.
        authority.ip().is_some()
            || authority.is_loopback()
            || self.names.contains(&authority.host)
            || self.public.iter().any(|url| url.host == authority.host)
    }

    /// The names accepted, for the start-up log.
    pub fn describe(&self) -> String {
        let mut names: Vec<String> = vec!["localhost".into(), "IP addresses".into()];
        names.extend(self.names.iter().cloned());
        names.extend(self.public.iter().map(PublicUrl::origin));
        names.join(", ")
    }
}

fn header_text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim).filter(|v| !v.is_empty())
}

/// The client behind trusted proxies: the right-most address in `X-Forwarded-For`
/// (or `Forwarded: for=`) that is not itself a trusted proxy.
fn forwarded_client(headers: &HeaderMap, trusted: &[IpNet]) -> Option<IpAddr> {
    let mut chain: Vec<IpAddr> = Vec::new();
    for value in headers.get_all("forwarded").iter().filter_map(|v| v.to_str().ok()) {
        for element in value.split(',') {
            for pair in element.split(';') {
                let Some((key, value)) = pair.trim().split_once('=') else { continue };
                if key.trim().eq_ignore_ascii_case("for") {
                    chain.extend(parse_node(value));
                }
            }
        }
    }
    if chain.is_empty() {
        for value in headers.get_all("x-forwarded-for").iter().filter_map(|v| v.to_str().ok()) {
            chain.extend(value.split(',').filter_map(parse_node));
        }
    }
    if chain.is_empty() {
        chain.extend(header_text(headers, "x-real-ip").and_then(parse_node));
    }
    chain.into_iter().rev().find(|ip| !trusted.iter().any(|net| net.contains(ip)))
}

/// `1.2.3.4`, `"[2001:db8::1]:4711"`, `1.2.3.4:80`.
fn parse_node(text: &str) -> Option<IpAddr> {
    let text = text.trim().trim_matches('"');
    if let Ok(ip) = text.parse() {
        return Some(ip);
    }
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Some(addr.ip());
    }
    text.strip_prefix('[').and_then(|rest| rest.split_once(']')).and_then(|(ip, _)| ip.parse().ok())
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn peer(ip: &str) -> SocketAddr {
        SocketAddr::new(ip.parse().unwrap(), 50_000)
    }

    fn site() -> Site {
        Site {
            tls: false,
            public: vec![PublicUrl::parse("https://gpu1.example.com").unwrap()],
            names: vec!["gpu1".into()],
            trusted_proxies: vec![parse_trusted_proxy("127.0.0.1").unwrap()],
            ..Site::default()
        }
    }

    #[test]
    fn with_proxy_users_a_loopback_proxy_is_trusted_only_from_their_sockets() {
        let open = site();
        let site = Site { proxy_users: super::super::local_user::Users { uids: vec![33] }, ..site() };
        let mut forged = HeaderMap::new();
        forged.insert(header::HOST, "127.0.0.1:7070".parse().unwrap());
        forged.insert("x-forwarded-for", "203.0.113.9".parse().unwrap());
        let client = |owner| site.check_from(peer("127.0.0.1"), owner, &forged).unwrap().client.to_string();
        assert_eq!(client(Some(33)), "203.0.113.9", "the proxy's user");
        assert_eq!(client(Some(1001)), "127.0.0.1", "another local user cannot forge the client");
        assert_eq!(client(None), "127.0.0.1");
        let unnamed = open.check_from(peer("127.0.0.1"), Some(1001), &forged).unwrap();
        assert_eq!(unnamed.client.to_string(), "203.0.113.9", "without --trusted-proxy-user, as before");
    }

    #[test]
    fn foreign_names_are_refused_and_known_ones_pass() {
        let site = site();
        let err = site.check(peer("127.0.0.1"), &headers(&[("host", "rebind.test:7070")])).unwrap_err();
        assert_eq!(err.status, StatusCode::MISDIRECTED_REQUEST);
        assert!(err.message.contains("--public-url http://rebind.test:7070"), "{}", err.message);
        for host in ["127.0.0.1:7070", "localhost:7070", "[::1]:7070", "10.1.2.3", "GPU1:7070", "gpu1.example.com"] {
            assert!(site.check(peer("127.0.0.1"), &headers(&[("host", host)])).is_ok(), "{host}");
        }
        let err = site.check(peer("127.0.0.1"), &headers(&[("host", "a b")])).unwrap_err();
        assert_eq!(err.status, StatusCode::BAD_REQUEST);
    }

    #[test]
    fn forwarded_headers_count_only_from_trusted_proxies() {
        let site = site();
        let via_proxy = headers(&[
            ("host", "gpu1.example.com"),
            ("x-forwarded-for", "203.0.113.9, 10.9.9.9"),
            ("x-forwarded-proto", "https"),
        ]);
        let trusted = site.check(peer("127.0.0.1"), &via_proxy).unwrap();
        assert_eq!(trusted.client, "10.9.9.9".parse::<IpAddr>().unwrap(), "right-most untrusted hop");
        assert!(trusted.secure && trusted.forwarded);
        let direct = site.check(peer("192.0.2.7"), &via_proxy).unwrap();
        assert_eq!(direct.client, "192.0.2.7".parse::<IpAddr>().unwrap(), "an untrusted peer cannot pick its address");
        let rfc7239 = headers(&[("host", "gpu1"), ("forwarded", "for=\"[2001:db8::1]:4711\";proto=https")]);
        assert_eq!(site.check(peer("127.0.0.1"), &rfc7239).unwrap().client, "2001:db8::1".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn https_public_urls_make_requests_secure_and_their_origin_ours() {
        let site = site();
        let request = site.check(peer("127.0.0.1"), &headers(&[("host", "gpu1.example.com")])).unwrap();
        assert!(request.secure && !request.loopback_host);
        assert!(site.is_own_origin(&request, "https://gpu1.example.com"));
        assert!(!site.is_own_origin(&request, "https://evil.example"));
        let local = site.check(peer("127.0.0.1"), &headers(&[("host", "127.0.0.1:7070")])).unwrap();
        assert!(!local.secure && local.loopback_host);
        assert!(site.is_own_origin(&local, "http://127.0.0.1:7070"));
        assert!(!site.is_own_origin(&local, "https://127.0.0.1:7070"));
    }

    #[test]
    fn public_urls_and_proxies_are_validated() {
        assert_eq!(PublicUrl::parse("http://GPU1:7070").unwrap().origin(), "http://gpu1:7070");
        assert_eq!(PublicUrl::parse("https://[::1]").unwrap().origin(), "https://[::1]");
        for (bad, expected) in [
            ("gpu1:7070", "scheme must be http or https"),
            ("ftp://gpu1", "scheme must be http or https"),
            ("https://gpu1/dash", "root of its host"),
            ("https://ana:pw@gpu1", "no user name"),
            ("not a url", "not a public URL"),
        ] {
            let err = PublicUrl::parse(bad).unwrap_err().to_string();
            assert!(err.contains(expected), "{bad}: {err}");
        }
        assert_eq!(
            PublicUrl::parse("https://gpu1/dash").unwrap_err().to_string(),
            "'https://gpu1/dash' is not a public URL (gpudash is served at the root of its host name, without a path); \
             use the address people open, e.g. https://gpu1.example.com or http://gpu1:7070"
        );
        assert!(matches!(
            PublicUrl::parse("ftp://gpu1"),
            Err(SiteError::NotAPublicUrl { why: PublicUrlFault::Scheme, .. })
        ));
        assert!(parse_trusted_proxy("10.0.0.0/8").is_ok());
        assert!(parse_trusted_proxy("::1").is_ok());
        assert_eq!(
            parse_trusted_proxy(" proxy.local").unwrap_err().to_string(),
            "'proxy.local' is not an IP address or network; use e.g. 127.0.0.1, ::1 or 10.0.0.0/8"
        );
    }
}
