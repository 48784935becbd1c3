//! Signing in from the page: the login form where viewing needs a token,
//! what each role is offered, the admins' audit log, and the banner of a
//! dashboard open to the whole network.

use std::time::Duration;

use fantoccini::{Client, Locator};
use gpudash::telemetry::simulator::Simulator;
use tokio::net::TcpListener;

use crate::browser::{eventually, texts, with_browser};
use crate::support::TestServer;

const VIEWER: &str = "viewer-token-0123456789";
const OPERATOR: &str = "operator-token-0123456789";
const ADMIN: &str = "admin-token-0123456789";

/// Two simulated GPUs and three users; viewing is "open" or needs a "token" as `viewers` says.
async fn team_server(viewers: &str) -> TestServer {
    let tokens = format!("vera:viewer:{VIEWER},omar:operator:{OPERATOR},ada:admin:{ADMIN}");
    let file = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(file.path(), format!("viewers = \"{viewers}\"\n")).expect("write the access policy");
    let auth = gpudash::auth::AuthConfig::load(Some(file.path()), Some(&tokens)).expect("test tokens");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let options = gpudash::Options { auth, ..gpudash::Options::new(Duration::from_millis(500)) };
    let running = gpudash::start_with(listener, Box::new(Simulator::new(2, 500)), options).await.expect("start");
    TestServer { base: format!("http://{}", running.addr()), running }
}

/// Clicks the element, scrolled to the middle of the window (clear of the sticky top bar).
async fn click(c: &Client, css: &str) {
    let element = c.wait().for_element(Locator::Css(css)).await.unwrap_or_else(|e| panic!("{css}: {e}"));
    let arg = serde_json::to_value(&element).expect("webdriver answers");
    c.execute("arguments[0].scrollIntoView({block: 'center'})", vec![arg]).await.expect("webdriver answers");
    element.click().await.unwrap_or_else(|e| panic!("click {css}: {e}"));
}

async fn first_text(c: &Client, css: &str) -> Option<String> {
    texts(c, css).await.into_iter().find(|t| !t.is_empty())
}

async fn count(c: &Client, css: &str) -> usize {
    c.find_all(Locator::Css(css)).await.map(|v| v.len()).unwrap_or(0)
}

/// Types `token` into the login form and submits it.
async fn log_in(c: &Client, token: &str) {
    let input = c
        .wait()
        .for_element(Locator::Css("#login-form input#login-token[type=password]"))
        .await
        .expect("webdriver answers");
    input.clear().await.expect("webdriver answers");
    input.send_keys(token).await.expect("webdriver answers");
    click(c, "#login-form button[type=submit]").await;
}

/// Logs out and waits for the login form that replaces the dashboard.
async fn log_out(c: &Client) {
    click(c, "#logout").await;
    eventually(10, "#login-required after logout", || async { (count(c, "#login-required").await == 1).then_some(()) })
        .await;
}

async fn cards_appear(c: &Client) {
    eventually(15, "two GPU rows", || async { (count(c, "tr.gpu-row").await == 2).then_some(()) }).await;
}

#[tokio::test]
async fn viewing_needs_a_token_and_each_role_sees_its_own_buttons() {
    let server = team_server("token").await;
    let url = server.url("/");
    with_browser(1400, 1000, |c| async move {
        c.goto(&url).await.unwrap();
        eventually(10, "#login-required", || first_text(&c, "#login-required")).await;
        assert_eq!(count(&c, ".gpu-card").await + count(&c, "tr.gpu-row").await, 0, "nothing shows before login");
        assert_eq!(count(&c, "#tab-lab").await, 0);

        log_in(&c, "not-a-token-at-all").await;
        let error = eventually(10, "the login error", || first_text(&c, "#login-form .login-error")).await;
        assert!(error.contains("invalid token"), "{error}");

        // An operator sees the cards, runs experiments and empties the cache.
        log_in(&c, OPERATOR).await;
        cards_appear(&c).await;
        assert_eq!(first_text(&c, "#whoami").await.as_deref(), Some("omar (operator)"));
        eventually(10, "status 'live'", || async { (first_text(&c, "#conn-status").await? == "live").then_some(()) })
            .await;
        // empty_cache empties the lab's pool, not a process's: it left the dashboard for the Lab (issue 19),
        // where the Lab's tests check it by role.
        assert_eq!(count(&c, "button.empty-cache").await, 0, "no empty_cache on the dashboard");
        click(&c, "#tab-lab").await;
        eventually(10, "Run buttons", || async { (count(&c, "button.run-button").await >= 5).then_some(()) }).await;
        eventually(10, "empty_cache on the Lab's pool panel", || async {
            (count(&c, "#lab-pool button.empty-cache").await == 2).then_some(())
        })
        .await;
        assert_eq!(count(&c, "#tab-audit").await, 0, "the audit log is for admins");
        log_out(&c).await;

        // A viewer sees the same figures with no buttons to act.
        log_in(&c, VIEWER).await;
        eventually(10, "the viewer's lab", || async { (count(&c, "form.lab-form").await >= 5).then_some(()) }).await;
        assert_eq!(first_text(&c, "#whoami").await.as_deref(), Some("vera (viewer)"));
        assert_eq!(count(&c, "button.run-button").await, 0);
        assert_eq!(count(&c, "#lab-pool").await, 1, "the viewer's Lab is drawn");
        assert_eq!(count(&c, "button.empty-cache").await, 0, "with no button to act");
        assert!(first_text(&c, ".role-hint").await.unwrap().contains("operator role"));
        click(&c, "#tab-dashboard").await;
        cards_appear(&c).await;
        assert_eq!(count(&c, "button.empty-cache").await, 0);
        log_out(&c).await;

        // The admin reads who logged in, and the failed attempt.
        log_in(&c, ADMIN).await;
        click(&c, "#tab-audit").await;
        let rows = eventually(10, "the audit log", || async {
            let rows = texts(&c, "#audit-log tbody tr").await;
            (rows.iter().filter(|r| r.contains("logged in") || r.contains("logging in")).count() >= 4).then_some(rows)
        })
        .await;
        for user in ["omar", "vera", "ada"] {
            assert!(
                rows.iter().any(|r| r.contains(&format!("{user} logged in")) && r.contains("ok")),
                "{user}: {rows:?}"
            );
        }
        assert!(rows.iter().any(|r| r.contains("was refused logging in") && r.contains("denied")), "{rows:?}");
        let headers = texts(&c, "#audit-log thead th").await;
        // The time column names the viewer's zone (one time format, named once per page).
        assert!(headers.first().is_some_and(|h| h.starts_with("TIME (UTC")), "{headers:?}");
        assert_eq!(headers[1..], ["USER", "CLIENT", "WHAT HAPPENED", "TARGET", "OUTCOME", "DETAIL"]);

        // Filters: only the denied entries, then only vera's successful ones.
        let outcome = c.find(Locator::Css("select#audit-filter-outcome")).await.expect("the outcome filter");
        outcome.select_by_value("denied").await.expect("webdriver answers");
        eventually(10, "only denied entries", || async {
            let outcomes = texts(&c, "#audit-log tbody .audit-outcome").await;
            (!outcomes.is_empty() && outcomes.iter().all(|o| o.eq_ignore_ascii_case("denied"))).then_some(())
        })
        .await;
        outcome.select_by_value("ok").await.expect("webdriver answers");
        let user = c.find(Locator::Css("label.audit-filter input#audit-filter-user")).await.expect("the user filter");
        user.send_keys("vera").await.expect("webdriver answers");
        click(&c, "#audit-filters button[type=submit]").await;
        eventually(10, "only vera's successful entries", || async {
            let users = texts(&c, "#audit-log tbody .audit-user").await;
            let outcomes = texts(&c, "#audit-log tbody .audit-outcome").await;
            (!users.is_empty()
                && users.iter().all(|u| u == "vera")
                && outcomes.iter().all(|o| o.eq_ignore_ascii_case("ok")))
            .then_some(())
        })
        .await;
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn where_viewing_is_open_anyone_sees_the_cards_and_may_log_in() {
    let server = team_server("open").await;
    let url = server.url("/");
    with_browser(1280, 900, |c| async move {
        c.goto(&url).await.unwrap();
        cards_appear(&c).await;
        assert_eq!(count(&c, "button.empty-cache").await, 0, "anonymous viewers cannot act");
        // GPU 0 runs a job from the start: anonymous viewers see the row, not who runs what.
        eventually(10, "a redacted process row", || async {
            (texts(&c, ".process-table tr.process-row[data-gpu='0'] td.user").await == ["sign in to see"]).then_some(())
        })
        .await;
        assert_eq!(first_text(&c, "#usage-hidden").await.as_deref(), Some("Sign in to see who uses which GPU."));
        click(&c, "#login-open").await;
        log_in(&c, OPERATOR).await;
        eventually(10, "#whoami", || async { first_text(&c, "#whoami").await.filter(|t| t.contains("omar")) }).await;
        eventually(10, "the user of GPU 0's job after login", || async {
            let users = texts(&c, ".process-table tr.process-row[data-gpu='0'] td.user").await;
            (users.len() == 1 && users[0] != "sign in to see" && users[0] != "?").then_some(())
        })
        .await;
        assert_eq!(count(&c, "#usage-hidden").await, 0);
        assert_eq!(count(&c, "button.empty-cache").await, 0, "empty_cache is the Lab's, not the dashboard's");
        click(&c, "#tab-lab").await;
        eventually(10, "empty_cache on the Lab after login", || async {
            (count(&c, "#lab-pool button.empty-cache").await == 2).then_some(())
        })
        .await;
        assert_eq!(count(&c, "#login-form").await, 0, "the form closes after login");
    })
    .await;
    server.stop().await;
}

#[tokio::test]
async fn a_dashboard_open_to_the_network_says_so_in_red() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let options = gpudash::Options { exposed_without_auth: true, ..gpudash::Options::new(Duration::from_millis(500)) };
    let running = gpudash::start_with(listener, Box::new(Simulator::new(1, 500)), options).await.unwrap();
    let server = TestServer { base: format!("http://{}", running.addr()), running };
    let url = server.url("/");
    with_browser(1280, 900, |c| async move {
        c.goto(&url).await.unwrap();
        let banner = eventually(10, "#anonymous-banner", || first_text(&c, "#anonymous-banner")).await;
        assert_eq!(
            banner,
            "This dashboard is open to anyone on the network: no tokens are configured (--allow-anonymous)."
        );
        let color = c
            .execute("return getComputedStyle(document.querySelector('#anonymous-banner')).backgroundColor", vec![])
            .await
            .unwrap();
        let rgb: Vec<u32> = color
            .as_str()
            .unwrap_or_default()
            .trim_start_matches("rgb(")
            .trim_end_matches(')')
            .split(',')
            .filter_map(|v| v.trim().parse().ok())
            .collect();
        assert!(rgb.len() == 3 && rgb[0] > 150 && rgb[1] < 120, "the banner is red: {color}");
        cards_appear_one(&c).await;
        assert_eq!(count(&c, "#login-open").await, 0, "no tokens, no login");
    })
    .await;
    server.stop().await;
}

async fn cards_appear_one(c: &Client) {
    eventually(15, "the GPU row", || async { (count(c, "tr.gpu-row").await == 1).then_some(()) }).await;
}

#[tokio::test]
async fn read_only_shows_its_badge_and_offers_no_action_even_to_an_admin() {
    let tokens = format!("ada:admin:{ADMIN}");
    let auth = gpudash::auth::AuthConfig::load(None, Some(&tokens)).expect("test tokens");
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let options = gpudash::Options {
        auth,
        read_only: true,
        allow_signals: true,
        ..gpudash::Options::new(Duration::from_millis(500))
    };
    let running = gpudash::start_with(listener, Box::new(Simulator::new(2, 500)), options).await.expect("start");
    let server = TestServer { base: format!("http://{}", running.addr()), running };
    let url = server.url("/");
    with_browser(1400, 1000, |c| async move {
        c.goto(&url).await.unwrap();
        click(&c, "#login-open").await;
        log_in(&c, ADMIN).await;
        cards_appear(&c).await;
        assert_eq!(first_text(&c, "#whoami").await.as_deref(), Some("ada (admin)"));
        assert_eq!(first_text(&c, "#read-only").await.as_deref(), Some("read-only"));
        assert_eq!(count(&c, "#tab-audit").await, 1, "an admin still reads the audit log");
        eventually(10, "the process rows", || async {
            (count(&c, "#processes tr.process-row").await >= 1).then_some(())
        })
        .await;
        assert_eq!(count(&c, "button.signal-term, button.signal-kill").await, 0, "no signals");
        click(&c, "#tab-lab").await;
        eventually(10, "the Lab's forms", || async { (count(&c, "form.lab-form").await >= 5).then_some(()) }).await;
        eventually(10, "the Lab's pool panel", || async { (count(&c, "#lab-pool").await == 1).then_some(()) }).await;
        assert_eq!(count(&c, "button.run-button").await, 0, "no Run for an admin either");
        assert_eq!(count(&c, "button.empty-cache").await, 0);
        let hint = first_text(&c, ".role-hint").await.unwrap();
        assert!(hint.contains("read-only"), "{hint}");
    })
    .await;
    server.stop().await;
}
