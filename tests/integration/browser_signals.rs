//! Stop and Kill in the page's process table, on real child processes the simulator lists
//! (`pid:INDEX:PID`): Stop ends one, Kill asks first, and without `--allow-signals` no button shows.

use std::os::unix::process::ExitStatusExt;

use fantoccini::{Client, Locator};

use crate::browser::{eventually, texts, with_browser};
use crate::signals::{Started, server, unix_user};

async fn count(c: &Client, css: &str) -> usize {
    c.find_all(Locator::Css(css)).await.map(|v| v.len()).unwrap_or(0)
}

/// Clicks the element, scrolled to the middle of the window (clear of the sticky top bar).
async fn click(c: &Client, css: &str) {
    let element = c.wait().for_element(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}"));
    let arg = serde_json::to_value(&element).expect("webdriver answers");
    c.execute("arguments[0].scrollIntoView({block: 'center'})", vec![arg]).await.expect("webdriver answers");
    element.click().await.unwrap_or_else(|e| panic!("click {css}: {e}"));
}

/// The text of the first element matching `css` that contains `part`.
async fn shown(c: &Client, css: &str, part: &str) -> Option<String> {
    texts(c, css).await.into_iter().find(|t| t.contains(part))
}

#[tokio::test]
async fn stop_ends_a_real_process_and_kill_asks_first() {
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
        let outcome = eventually(10, "the outcome of SIGTERM", || shown(&c, ".signal-outcome", "SIGTERM")).await;
        assert_eq!(outcome, format!("SIGTERM sent to PID {a} (sleep 600, {user}): exited"));
        assert_eq!(sleeper.ended(10).await.signal(), Some(15), "it died of SIGTERM");
        let row = format!("#processes tr[data-pid='{a}']");
        eventually(15, "the row of the ended sleep to go", || async { (count(&c, &row).await == 0).then_some(()) })
            .await;

        click(&c, &format!("#processes tr[data-pid='{b}'] button.signal-kill")).await;
        let question = eventually(10, "the SIGKILL question", || shown(&c, ".signal-confirm", "SIGKILL")).await;
        assert!(question.contains(&format!("Send SIGKILL to PID {b} (sleep 600, {user})?")), "{question}");
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
