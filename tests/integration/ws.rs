//! The WebSocket: snapshot, ticks in order, resync, bad messages, shutdown.

use futures_util::{SinkExt, StreamExt};
use shared::{ServerMessage, Snapshot};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::support::{TestServer, connect, eventually, next_message};

#[tokio::test]
async fn snapshot_first_then_one_tick_per_period_in_order() {
    let server = TestServer::simulated(2, 100).await;
    let mut socket = connect(&server.ws_url()).await;
    let ServerMessage::Snapshot(Snapshot { seq, host, devices, .. }) = next_message(&mut socket, 5).await else {
        panic!("the first message must be a snapshot")
    };
    assert!(host.simulated);
    assert_eq!(devices.len(), 2);
    for expected in seq + 1..=seq + 10 {
        let ServerMessage::Tick(tick) = next_message(&mut socket, 5).await else { panic!("expected a tick") };
        assert_eq!(tick.seq, expected, "no gap, no repeat");
        assert_eq!(tick.samples.len(), 2);
        assert!(tick.samples.iter().all(|s| s.memory_used.is_some()));
    }
    server.stop().await;
}

#[tokio::test]
async fn a_reconnecting_client_gets_history_that_joins_its_ticks() {
    let server = TestServer::simulated(1, 100).await;
    // Reconnect until the server has half a second of history to hand over.
    let (mut socket, seq, history, latest) = eventually(10, "a snapshot with five points of history", || async {
        let mut socket = connect(&server.ws_url()).await;
        let ServerMessage::Snapshot(Snapshot { seq, history, latest, .. }) = next_message(&mut socket, 5).await else {
            panic!("snapshot first")
        };
        (history[0].points.len() >= 5).then_some((socket, seq, history, latest))
    })
    .await;
    let points = &history[0].points;
    assert!(points.windows(2).all(|w| w[0].timestamp_ms < w[1].timestamp_ms));
    assert_eq!(points.last().unwrap().timestamp_ms, latest[0].timestamp_ms, "history ends at the latest sample");
    let ServerMessage::Tick(tick) = next_message(&mut socket, 5).await else { panic!("tick") };
    assert_eq!(tick.seq, seq + 1);
    assert!(tick.samples[0].timestamp_ms > latest[0].timestamp_ms);
    server.stop().await;
}

#[tokio::test]
async fn resync_and_bad_messages_are_answered() {
    let server = TestServer::simulated(1, 1000).await;
    let mut socket = connect(&server.ws_url()).await;
    assert!(matches!(next_message(&mut socket, 5).await, ServerMessage::Snapshot(_)));

    socket.send(Message::text(r#"{"type":"resync"}"#)).await.unwrap();
    assert!(matches!(next_message(&mut socket, 5).await, ServerMessage::Snapshot(_)));

    for bad in [r#"{"type":"reboot"}"#, "not json", r#"{"type":"resync","extra":1}"#] {
        socket.send(Message::text(bad)).await.unwrap();
        let message = loop {
            match next_message(&mut socket, 5).await {
                ServerMessage::Error { message } => break message,
                ServerMessage::Tick(_) => {}
                other => panic!("unexpected {other:?}"),
            }
        };
        assert!(message.contains(r#"{"type":"resync"}"#), "{bad}: {message}");
    }
    socket.send(Message::binary(vec![1, 2, 3])).await.unwrap();
    loop {
        match next_message(&mut socket, 5).await {
            ServerMessage::Error { message } => {
                assert!(message.contains("binary"), "{message}");
                break;
            }
            ServerMessage::Tick(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    server.stop().await;
}

#[tokio::test]
async fn an_oversized_message_closes_the_socket_and_the_server_stays_up() {
    let server = TestServer::simulated(1, 1000).await;
    let mut socket = connect(&server.ws_url()).await;
    next_message(&mut socket, 5).await;
    let _ = socket.send(Message::text("x".repeat(64 * 1024))).await;
    let closed = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while let Some(Ok(frame)) = socket.next().await {
            if let Message::Close(frame) = frame {
                return frame.map(|f| f.code);
            }
        }
        None
    })
    .await
    .expect("closed in time");
    assert!(matches!(closed, Some(CloseCode::Size) | None), "{closed:?}");
    let mut fresh = connect(&server.ws_url()).await;
    assert!(matches!(next_message(&mut fresh, 5).await, ServerMessage::Snapshot(_)));
    server.stop().await;
}

#[tokio::test]
async fn shutdown_closes_sockets_with_going_away() {
    let server = TestServer::simulated(1, 100).await;
    let mut socket = connect(&server.ws_url()).await;
    next_message(&mut socket, 5).await;
    let stop = tokio::spawn(server.stop());
    let code = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        while let Some(Ok(frame)) = socket.next().await {
            if let Message::Close(frame) = frame {
                return frame.map(|f| (f.code, f.reason.to_string()));
            }
        }
        None
    })
    .await
    .expect("closed in time");
    let (code, reason) = code.expect("a close frame");
    assert_eq!(code, CloseCode::Away);
    assert!(reason.contains("shutting down"), "{reason}");
    stop.await.unwrap();
}
