//! Stop and Kill in the page's process table, on real child processes the simulator lists
//! (`pid:INDEX:PID`): both ask first (a cancelled question sends nothing), then end the process;
//! an idle process's alert card offers Stop too; without `--allow-signals` no button shows.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use fantoccini::{Client, Locator};
use gpudash::telemetry::IdleRule;
use gpudash::telemetry::simulator::Simulator;
use shared::alerts::AlertsResponse;

use crate::browser::{eventually, texts, with_browser};
use crate::signals::{Started, server, unix_user};
use crate::support::{TestServer, get_json};

async fn count(c: &Client, css: &str) -> usize {
    c.find_all(Locator::Css(css)).await.map(|v| v.len()).unwrap_or(0)
}

/// Clicks the element, scrolled to the middle of the window (clear of the sticky top bar). When the
/// page redraws the element between finding and clicking it (an alert list redrawn as another alert
/// fires), the click goes to the element now matching `css`, within 10 s.
async fn click(c: &Client, css: &str) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let element = c.wait().for_element(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}"));
        let arg = serde_json::to_value(&element).expect("webdriver answers");
        let clicked = match c.execute("arguments[0].scrollIntoView({block: 'center'})", vec![arg]).await {
            Ok(_) => element.click().await,
            Err(e) => Err(e),
        };
        match clicked {
            Ok(()) => return,
            Err(e) if is_stale(&e) && std::time::Instant::now() < deadline => continue,
            Err(e) => panic!("click {css}: {e}"),
        }
    }
}

fn is_stale(e: &fantoccini::error::CmdError) -> bool {
    matches!(e, fantoccini::error::CmdError::Standard(w) if w.error == fantoccini::error::ErrorStatus::StaleElementReference)
}

/// The text of the first element matching `css` that contains `part`.
async fn shown(c: &Client, css: &str, part: &str) -> Option<String> {
    texts(c, css).await.into_iter().find(|t| t.contains(part))
}

#[tokio::test]
async fn stop_and_kill_ask_first_then_end_a_real_process() {
    let mut sleeper = Started::sleep();
    let mut stubborn = Started::shell("trap '' TERM; exec sleep 600");
    let (a, b) = (sleeper.pid(), stubborn.pid());
    let server = server(&[a, b], true, false).await;
    crate::signals::listed(&server, b, "sleep", None).await;
    let url = server.url("/");
    let user = unix_user();
    with_browser(1400, 1000, |c| async move {
        c.goto(&url).await.unwrap();
        let stop = format!("#processes tr[data-pid='{a}'] button.signal-term");
        eventually(15, "the Stop button of the sleep", || async { (count(&c, &stop).await == 1).then_some(()) }).await;
        click(&c, &stop).await;
        let question = eventually(10, "the SIGTERM question", || shown(&c, ".signal-confirm", "SIGTERM")).await;
        let named = format!("Send SIGTERM to PID {a} (sleep 600, {user}; running ");
        assert!(question.starts_with(&named) && question.contains("s; 1.00 GiB on GPU 0)?"), "{question}");
        click(&c, ".signal-confirm button.signal-cancel").await;
        eventually(5, "the question to close", || async { (count(&c, ".signal-confirm").await == 0).then_some(()) })
            .await;
        // Time for a signal that should not have gone out to end the sleep (the server waits 2 s for that).
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(sleeper.running(), "cancelled: nothing sent");
        assert_eq!(count(&c, ".signal-outcome").await, 0, "no outcome, as nothing was sent");
        click(&c, &stop).await;
        click(&c, ".signal-confirm button.signal-confirm-term").await;
        let outcome = eventually(10, "the outcome of SIGTERM", || shown(&c, ".signal-outcome", "SIGTERM")).await;
        assert_eq!(outcome, format!("SIGTERM sent to PID {a} (sleep 600, {user}): exited"));
        assert_eq!(sleeper.ended(10).await.signal(), Some(15), "it died of SIGTERM");
        let row = format!("#processes tr[data-pid='{a}']");
        eventually(15, "the row of the ended sleep to go", || async { (count(&c, &row).await == 0).then_some(()) })
            .await;

        click(&c, &format!("#processes tr[data-pid='{b}'] button.signal-kill")).await;
        let question = eventually(10, "the SIGKILL question", || shown(&c, ".signal-confirm", "SIGKILL")).await;
        assert!(question.starts_with(&format!("Send SIGKILL to PID {b} (sleep 600, {user}; running ")), "{question}");
        assert!(stubborn.running(), "nothing is sent before the confirmation");
        click(&c, ".signal-confirm button.signal-cancel").await;
        eventually(5, "the question to close", || async { (count(&c, ".signal-confirm").await == 0).then_some(()) })
            .await;
        assert!(stubborn.running(), "cancelled: nothing sent");
        click(&c, &format!("#processes tr[data-pid='{b}'] button.signal-kill")).await;
        click(&c, ".signal-confirm button.signal-confirm-kill").await;
        eventually(10, "the outcome of SIGKILL", || shown(&c, ".signal-outcome", "SIGKILL sent")).await;
        assert_eq!(stubborn.ended(10).await.signal(), Some(9), "it died of SIGKILL");
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn without_the_flag_the_table_has_no_signal_buttons() {
    let child = Started::sleep();
    let pid = child.pid();
    let server = server(&[pid], false, false).await;
    let url = server.url("/");
    with_browser(1400, 1000, |c| async move {
        c.goto(&url).await.unwrap();
        let row = format!("#processes tr[data-pid='{pid}']");
        eventually(15, "the row of the sleep", || async { (count(&c, &row).await == 1).then_some(()) }).await;
        assert_eq!(count(&c, "button.signal-term, button.signal-kill, th.col-actions").await, 0);
    })
    .await;
    drop(child);
    server.stop().await;
}

/// The real `sleep` on GPU 1 beside the simulator's idle notebook: its GPU computes nothing, so
/// it is flagged idle after a second (the 1 GiB it is listed with is the threshold) and fires an
/// idle_held alert of its own, whose card offers Stop.
#[tokio::test]
async fn an_idle_process_is_stopped_from_its_alert_card_after_a_confirmation() {
    let mut idle = Started::sleep();
    let pid = idle.pid();
    let source = Simulator::new(2, 200).with_idle_holder().with_fault(format!("pid:1:{pid}").parse().unwrap());
    let options = gpudash::Options {
        allow_signals: true,
        idle: IdleRule { memory: 1 << 30, after: Duration::from_secs(1) },
        ..gpudash::Options::new(Duration::from_millis(200))
    };
    let server = TestServer::with_options(Box::new(source), options).await;
    eventually(30, "the idle_held alert of the sleep", || async {
        let firing: AlertsResponse = get_json(&server, "/api/alerts?state=firing&rule=idle_held").await;
        firing.alerts.iter().any(|a| a.pid == Some(pid)).then_some(())
    })
    .await;
    let url = server.url("/#alerts");
    let user = unix_user();
    with_browser(1400, 1000, |c| async move {
        c.goto(&url).await.unwrap();
        let card = ".alert-row.alert-firing[data-rule='idle_held'][data-gpu='1']";
        let stop = format!("{card} .alert-signal button.signal-term[data-pid='{pid}']");
        eventually(15, "Stop on the sleep's alert card", || async { (count(&c, &stop).await == 1).then_some(()) })
            .await;
        click(&c, &stop).await;
        let asked = format!(".alert-row .signal-confirm[data-pid='{pid}']");
        let question = eventually(10, "the SIGTERM question on the card", || shown(&c, &asked, "SIGTERM")).await;
        assert!(question.starts_with(&format!("Send SIGTERM to PID {pid} (sleep 600, {user}; running ")), "{question}");
        assert!(idle.running(), "nothing is sent before the confirmation");
        click(&c, &format!("{asked} button.signal-confirm-term")).await;
        let outcome =
            eventually(10, "the outcome on the card", || shown(&c, ".alert-row .signal-outcome", "SIGTERM")).await;
        assert_eq!(outcome, format!("SIGTERM sent to PID {pid} (sleep 600, {user}): exited"));
        assert_eq!(idle.ended(10).await.signal(), Some(15), "it died of SIGTERM");
        let resolved = format!(".alert-row.alert-resolved[data-rule='idle_held'] .signal-outcome[data-pid='{pid}']");
        eventually(15, "the alert resolved, the outcome still on its card", || async {
            (count(&c, &resolved).await == 1).then_some(())
        })
        .await;
        assert_eq!(count(&c, &stop).await, 0, "no Stop for a process that is gone");
    })
    .await;
    server.stop().await;
}
