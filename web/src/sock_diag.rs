//! The owner (uid) of one TCP socket, asked of the kernel through `NETLINK_SOCK_DIAG` by the
//! socket's exact ends: one request and one answer of under 100 bytes each, however many sockets
//! the machine has (reading `/proc/net/tcp` instead walks every one of them, which under a flood of
//! connections starved the accept loop). See sock_diag(7); the layouts are
//! `linux/inet_diag.h`'s `inet_diag_req_v2` and `inet_diag_msg`.

use std::net::{IpAddr, SocketAddr};

use rustix::net::{AddressFamily, RecvFlags, SendFlags, SocketFlags, SocketType, netlink};

/// `SOCK_DIAG_BY_FAMILY` (linux/sock_diag.h) and netlink's error answer (linux/netlink.h).
const SOCK_DIAG_BY_FAMILY: u16 = 20;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
/// `TCP_ESTABLISHED` in the kernel's socket states.
const TCP_ESTABLISHED: u8 = 1;
/// `IPPROTO_TCP`.
const TCP: u8 = 6;
/// `INET_DIAG_NOCOOKIE`: look the socket up by its ends alone.
const NO_COOKIE: u32 = u32::MAX;
/// The netlink header, then `inet_diag_req_v2`.
const HEADER: usize = 16;
const REQUEST: usize = HEADER + 56;
/// In the answer: the header, then `inet_diag_msg`, whose state is its second byte and whose uid
/// and inode follow the socket id (48 bytes) and three u32s.
const STATE_AT: usize = HEADER + 1;
const UID_AT: usize = HEADER + 4 + 48 + 12;
const INODE_AT: usize = UID_AT + 4;

/// The uid owning the open TCP socket whose local end is `local` and remote end `remote`; `None`
/// when there is no such established socket in this network namespace or netlink cannot be used.
/// A socket closed on its side (TIME_WAIT: uid 0, no inode) is nobody's, least of all root's.
pub fn owner(local: SocketAddr, remote: SocketAddr) -> Option<u32> {
    let request = request(local, remote)?;
    let socket = rustix::net::socket_with(
        AddressFamily::NETLINK,
        SocketType::DGRAM,
        SocketFlags::CLOEXEC,
        Some(netlink::SOCK_DIAG),
    )
    .ok()?;
    if rustix::net::send(&socket, &request, SendFlags::empty()).ok()? != request.len() {
        return None;
    }
    // The kernel answers while handling the request, so the answer is queued once `send` returns;
    // never wait for one that is not there.
    let mut answer = [0u8; 256];
    let (read, _) = rustix::net::recv(&socket, &mut answer[..], RecvFlags::DONTWAIT).ok()?;
    owner_in(answer.get(..read)?)
}

/// The request for the socket with these ends; `None` when the two are of different families.
fn request(local: SocketAddr, remote: SocketAddr) -> Option<[u8; REQUEST]> {
    let (family, source, destination) = match (local.ip().to_canonical(), remote.ip().to_canonical()) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (AddressFamily::INET, word_bytes(&a.octets()), word_bytes(&b.octets())),
        (IpAddr::V6(a), IpAddr::V6(b)) => (AddressFamily::INET6, a.octets(), b.octets()),
        _ => return None,
    };
    let mut out = [0u8; REQUEST];
    let length = u32::try_from(REQUEST).ok()?;
    out[0..4].copy_from_slice(&length.to_ne_bytes());
    out[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    out[6..8].copy_from_slice(&NLM_F_REQUEST.to_ne_bytes());
    // Sequence number and port id stay 0: one request per socket, answered by the kernel.
    let body = &mut out[HEADER..];
    body[0] = u8::try_from(family.as_raw()).ok()?;
    body[1] = TCP;
    // idiag_ext 0, pad 0; every state (the answer's state is checked).
    body[4..8].copy_from_slice(&u32::MAX.to_ne_bytes());
    // inet_diag_sockid: ports and addresses in network byte order.
    body[8..10].copy_from_slice(&local.port().to_be_bytes());
    body[10..12].copy_from_slice(&remote.port().to_be_bytes());
    body[12..28].copy_from_slice(&source);
    body[28..44].copy_from_slice(&destination);
    // idiag_if 0; the cookie says "by ends".
    body[48..52].copy_from_slice(&NO_COOKIE.to_ne_bytes());
    body[52..56].copy_from_slice(&NO_COOKIE.to_ne_bytes());
    Some(out)
}

/// An IPv4 address in the first of the id's four 32-bit words, the rest zero.
fn word_bytes(v4: &[u8; 4]) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..4].copy_from_slice(v4);
    out
}

/// The uid in an answer, when it names an established socket with an inode.
fn owner_in(answer: &[u8]) -> Option<u32> {
    let u16_at = |at: usize| answer.get(at..at + 2).and_then(|b| b.try_into().ok()).map(u16::from_ne_bytes);
    let u32_at = |at: usize| answer.get(at..at + 4).and_then(|b| b.try_into().ok()).map(u32::from_ne_bytes);
    let kind = u16_at(4)?;
    if kind == NLMSG_ERROR || kind != SOCK_DIAG_BY_FAMILY {
        return None;
    }
    let established = *answer.get(STATE_AT)? == TCP_ESTABLISHED;
    let inode = u32_at(INODE_AT)?;
    (established && inode != 0).then(|| u32_at(UID_AT)).flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn names_the_owner_of_each_end_of_a_real_loopback_connection() {
        for host in ["127.0.0.1:0", "[::1]:0"] {
            let Ok(listener) = TcpListener::bind(host) else { continue };
            let server = listener.local_addr().unwrap();
            let client = TcpStream::connect(server).unwrap();
            let (accepted, peer) = listener.accept().unwrap();
            let me = rustix::process::getuid().as_raw();
            assert_eq!(owner(client.local_addr().unwrap(), server), Some(me), "{host}: the client's end");
            assert_eq!(owner(server, peer), Some(me), "{host}: the server's end");
            // Ends that no socket has, and the wrong way round for a port nobody uses.
            let unused = SocketAddr::new(server.ip(), 1);
            assert_eq!(owner(unused, server), None, "{host}");
            drop(client);
            drop(accepted);
        }
    }

    #[test]
    fn a_closed_socket_is_nobodys() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let server = listener.local_addr().unwrap();
        let client = TcpStream::connect(server).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        let local = client.local_addr().unwrap();
        // The client closes first: its end lingers in TIME_WAIT (uid 0, no inode), never root's.
        drop(client);
        drop(accepted);
        assert_eq!(owner(local, server), None);
    }

    #[test]
    fn answers_that_are_errors_or_short_are_nobodys() {
        assert_eq!(owner_in(&[]), None);
        let mut error = [0u8; 100];
        error[4..6].copy_from_slice(&NLMSG_ERROR.to_ne_bytes());
        assert_eq!(owner_in(&error), None);
        let mut short = [0u8; UID_AT + 2];
        short[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
        assert_eq!(owner_in(&short), None);
        assert_eq!(request("127.0.0.1:1".parse().unwrap(), "[::1]:2".parse().unwrap()), None);
    }
}
