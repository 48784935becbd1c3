//! Who is on the other end of a loopback connection. On Linux the kernel names the owner (uid)
//! of every TCP socket, one at a time through `NETLINK_SOCK_DIAG` ([`super::sock_diag`]) and all
//! at once in `/proc/net/tcp` and `/proc/net/tcp6` (read only when netlink cannot be used); the
//! client's socket of a loopback connection is one of them. Without tokens, only gpudash's own user (and the
//! `--local-user`s) is the "single local user"; and forwarded headers from a loopback proxy
//! are believed only from the `--trusted-proxy-user`s when those are named.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, OnceLock};

/// One connection's ends, with its client's owner looked up once, when first asked.
#[derive(Debug, Clone)]
pub struct ConnectionOwner {
    pub client: SocketAddr,
    pub server: SocketAddr,
    uid: Arc<OnceLock<Option<u32>>>,
}

impl ConnectionOwner {
    pub fn new(client: SocketAddr, server: SocketAddr) -> Self {
        Self { client, server, uid: Arc::default() }
    }

    /// The same, with the owner already known (looked up when the connection was accepted).
    pub fn known(client: SocketAddr, server: SocketAddr, uid: u32) -> Self {
        Self { client, server, uid: Arc::new(OnceLock::from(Some(uid))) }
    }

    /// The uid owning the client's socket: `None` unless the client is on this machine (and
    /// in this network namespace) and `/proc/net` can be read.
    pub fn uid(&self) -> Option<u32> {
        *self.uid.get_or_init(|| {
            if !self.client.ip().is_loopback() && canonical(self.client.ip()) != canonical(self.server.ip()) {
                return None;
            }
            super::sock_diag::owner(self.client, self.server).or_else(|| {
                ["/proc/net/tcp", "/proc/net/tcp6"].into_iter().find_map(|table| {
                    let text = std::fs::read_to_string(table).ok()?;
                    owner_in(&text, self.client, self.server)
                })
            })
        })
    }
}

/// The users trusted by uid: gpudash's own and those named on the command line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Users {
    pub uids: Vec<u32>,
}

impl Users {
    pub fn contains(&self, uid: u32) -> bool {
        self.uids.contains(&uid)
    }
}

/// gpudash's own uid.
pub fn own_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// A user's name for messages: "ana (uid 1000)", or the uid alone.
pub fn describe(uid: u32) -> String {
    match uzers::get_user_by_uid(uid) {
        Some(user) => format!("{} (uid {uid})", user.name().to_string_lossy()),
        None => format!("uid {uid}"),
    }
}

/// Why a `--local-user` or `--trusted-proxy-user` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no user '{0}' on this machine; give a user name or a numeric uid")]
pub struct UnknownUser(pub String);

/// A user name or numeric uid, as `--local-user` and `--trusted-proxy-user` take it.
pub fn parse_user(text: &str) -> Result<u32, UnknownUser> {
    let text = text.trim();
    if let Ok(uid) = text.parse::<u32>() {
        return Ok(uid);
    }
    uzers::get_user_by_name(text).map(|user| user.uid()).ok_or_else(|| UnknownUser(text.to_owned()))
}

/// IPv4-mapped IPv6 addresses as IPv4, so both tables compare alike.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 @ IpAddr::V4(_) => v4,
    }
}

/// The uid of the open socket whose local end is `client` and remote end `server`, in a
/// `/proc/net/tcp[6]` table. Only an established socket with an inode counts: once the client
/// closes, the kernel lists a TIME_WAIT entry for the same ends with uid 0 and inode 0, which
/// must never pass for root's.
fn owner_in(table: &str, client: SocketAddr, server: SocketAddr) -> Option<u32> {
    const ESTABLISHED: &str = "01";
    let same = |a: SocketAddr, b: SocketAddr| a.port() == b.port() && canonical(a.ip()) == canonical(b.ip());
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (local, remote, state) = (address(fields.get(1)?)?, address(fields.get(2)?)?, *fields.get(3)?);
        let (uid, inode) = (fields.get(7)?, *fields.get(9)?);
        let open = state == ESTABLISHED && inode != "0";
        (open && same(local, client) && same(remote, server)).then(|| uid.parse().ok()).flatten()
    })
}

/// `0100007F:1F90` (IPv4) or 32 hex digits and a port (IPv6), as the kernel writes them: each
/// 32-bit word of the address in the machine's byte order.
fn address(text: &str) -> Option<SocketAddr> {
    let (ip, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| u32::from_str_radix(ip.get(i * 8..i * 8 + 8)?, 16).ok().map(u32::to_ne_bytes);
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for i in 0..4 {
                bytes[i * 4..i * 4 + 4].copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_owner_of_the_client_socket_from_the_table() {
        // 127.0.0.1:45000 -> 127.0.0.1:7070 owned by 1001, and the server's side owned by 1000.
        let le = cfg!(target_endian = "little");
        let (lo, client, server) = if le { ("0100007F", "AFC8", "1B9E") } else { ("7F000001", "AFC8", "1B9E") };
        let table = format!(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
             \x20  0: {lo}:{server} {lo}:{client} 01 00000000:00000000 00:00000000 00000000  1000        0 1 1\n\
             \x20  1: {lo}:{client} {lo}:{server} 01 00000000:00000000 00:00000000 00000000  1001        0 2 1\n"
        );
        let (c, s) = ("127.0.0.1:45000".parse().unwrap(), "127.0.0.1:7070".parse().unwrap());
        assert_eq!(owner_in(&table, c, s), Some(1001));
        assert_eq!(owner_in(&table, s, c), Some(1000));
        assert_eq!(owner_in(&table, "127.0.0.1:45001".parse().unwrap(), s), None);
        assert_eq!(owner_in("garbage\nlines here", c, s), None);
        // Closed by the client: a TIME_WAIT entry (state 06, uid 0, inode 0) is nobody's, least of all root's.
        let closed = format!(
            "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
             \x20  1: {lo}:{client} {lo}:{server} 06 00000000:00000000 03:00000000 00000000     0        0 0\n"
        );
        assert_eq!(owner_in(&closed, c, s), None);
    }

    #[test]
    fn parses_ipv6_and_mapped_addresses() {
        if cfg!(target_endian = "little") {
            assert_eq!(address("00000000000000000000000001000000:1F90"), Some("[::1]:8080".parse().unwrap()));
            let mapped = address("0000000000000000FFFF00000100007F:1F90").unwrap();
            assert_eq!(canonical(mapped.ip()), IpAddr::V4(Ipv4Addr::LOCALHOST));
        }
        assert_eq!(address("nonsense"), None);
        assert_eq!(address("0100007F:ZZZZ"), None);
    }

    #[test]
    fn finds_the_owner_of_a_real_loopback_connection() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.local_addr().unwrap();
        let stream = std::net::TcpStream::connect(server).unwrap();
        let owner = ConnectionOwner::new(stream.local_addr().unwrap(), server);
        assert_eq!(owner.uid(), Some(own_uid()));
        assert_eq!(parse_user(&own_uid().to_string()), Ok(own_uid()));
        assert!(parse_user("no-such-user-here").unwrap_err().to_string().contains("numeric uid"));
    }
}
