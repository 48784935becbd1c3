//! Sign-in with a real OpenID provider: npm's `oidc-provider` (OpenID certified), started by
//! `tests/oidc/provider.mjs` with three users (ana in gpu-admins, bo in gpu-users, cy in students), and
//! Chromium going through its sign-in pages. Roles from the groups claim, a user in no listed group
//! refused, logout here and at the provider, and ID tokens that are tampered, expired, from another
//! issuer or for another client each refused by the check that should refuse it.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use fantoccini::{Client, Locator};
use gpudash::auth::oidc::{Oidc, OidcConfig};
use gpudash::auth::{AuthConfig, GroupRoles};
use gpudash::telemetry::simulator::Simulator;
use serde_json::Value;
use shared::auth::Role;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::net::TcpListener;

use crate::auth_reload::{hangup, logged, start_on};
use crate::browser::{eventually, texts, with_browser};
use crate::support::{POLL, Said, TestServer, audit_triples, eventually_every};

const CLIENT_ID: &str = "gpudash";
const SECRET: &str = "test-client-secret-0123456789";

/// The provider's process (killed on drop) and its address.
struct Provider {
    _node: tokio::process::Child,
    issuer: String,
}

impl Provider {
    /// Starts `tests/oidc/provider.mjs` for a gpudash served at `dashboard` (its base URL).
    async fn start(dashboard: &str) -> Self {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("oidc");
        assert!(
            dir.join("node_modules/oidc-provider").is_dir(),
            "oidc-provider is not installed: run tests/run.sh, or `npm ci --prefix tests/oidc`"
        );
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut node = tokio::process::Command::new("node")
            .current_dir(&dir)
            .args(["provider.mjs", &port.to_string(), CLIENT_ID, SECRET])
            .arg(format!("{dashboard}/auth/oidc/callback"))
            .arg(format!("{dashboard}/"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start node (tests/run.sh installs it)");
        let mut lines = BufReader::new(node.stdout.take().expect("piped")).lines();
        let ready = tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await;
        assert!(matches!(ready, Ok(Ok(Some(ref line))) if line == "ready"), "the provider did not start: {ready:?}");
        // Whatever it prints later is read and dropped: a closed pipe would end it (EPIPE).
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Self { _node: node, issuer: format!("http://127.0.0.1:{port}") }
    }

    /// The next token answer carries an ID token spoiled this way (`provider.mjs` lists the ways).
    async fn spoil_next_id_token(&self, mode: &str) {
        let url = format!("{}/_test/next-id-token?mode={mode}", self.issuer);
        let answer = reqwest::Client::new().post(url).send().await.expect("the provider answers");
        assert_eq!(answer.status(), 204);
    }
}

/// A dashboard whose viewing needs a sign-in, signing people in with `provider`; `others` is `--default-role`.
async fn dashboard(others: Option<Role>) -> (TestServer, Provider) {
    dashboard_naming_by("preferred_username", others).await
}

/// [`dashboard`], naming people by the claim `user_claim`.
async fn dashboard_naming_by(user_claim: &str, others: Option<Role>) -> (TestServer, Provider) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let provider = Provider::start(&base).await;
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), format!("{SECRET}\n")).unwrap();
    let config = OidcConfig {
        issuer: provider.issuer.clone(),
        client_id: CLIENT_ID.to_owned(),
        client_secret_file: Some(secret.path().to_owned()),
        redirect_url: format!("{base}/auth/oidc/callback").parse().unwrap(),
        username_claim: user_claim.to_owned(),
        groups_claim: "groups".to_owned(),
        scopes: vec!["profile".to_owned(), "email".to_owned(), "groups".to_owned()],
        roles: GroupRoles { admin: vec!["gpu-admins".into()], operator: vec!["gpu-users".into()], others },
        user_map: gpudash::auth::names::UserMap::default(),
    };
    let oidc = Oidc::discover(config, gpudash::clock::Clock::system()).await.expect("discovery");
    let options = gpudash::Options {
        auth: AuthConfig { open_viewing: false, ..AuthConfig::default() },
        oidc: Some(Arc::new(oidc)),
        ..gpudash::Options::new(Duration::from_millis(500))
    };
    let running = gpudash::start_with(listener, Box::new(Simulator::new(2, 500)), options).await.unwrap();
    (TestServer { base, running }, provider)
}

/// Who the page's session is, by `/api/me` from the page.
async fn me(c: &Client) -> Value {
    let script = "const done = arguments[0]; fetch('/api/me').then(r => r.json()).then(done, e => done(String(e)));";
    c.execute_async(script, vec![]).await.expect("script runs")
}

/// Opens the sign-in (where "Sign in with …" goes) and goes through the provider's pages as `user` (its
/// development pages take any password) until the browser is back on the dashboard. A provider that
/// still has a session for someone sends the browser straight back.
async fn sign_in(c: &Client, base: &str, user: &str) {
    c.goto(&format!("{base}/auth/oidc/login")).await.unwrap();
    eventually_every(30, POLL, "the round trip through the provider", || async {
        let url = c.current_url().await.map_err(|e| Said(e.to_string()))?.to_string();
        if url.starts_with(base) {
            return Ok(());
        }
        if let Ok(login) = c.find(Locator::Css("input[name=login]")).await {
            let _ = login.send_keys(user).await;
            if let Ok(password) = c.find(Locator::Css("input[name=password]")).await {
                let _ = password.send_keys("any password").await;
            }
            if let Ok(submit) = c.find(Locator::Css("button[type=submit]")).await {
                let _ = submit.click().await;
            }
        } else if let Ok(consent) = c.find(Locator::Css("input[name=prompt][value=consent] ~ button")).await {
            let _ = consent.click().await;
        }
        let page = c.source().await.unwrap_or_default();
        Err(Said(format!(
            "at {url}: {}",
            page.find("ERR_").map_or_else(
                || page.chars().take(1500).collect::<String>(),
                |at| page[at..].chars().take(200).collect()
            )
        )))
    })
    .await;
}

async fn refusal(c: &Client) -> String {
    eventually(15, "the refusal page", || async { texts(c, "#sign-in-error").await.into_iter().next() }).await
}

#[tokio::test]
async fn people_sign_in_with_the_provider_and_their_groups_give_the_role() {
    let (server, _provider) = dashboard(Some(Role::Viewer)).await;
    let audit_url = server.url("/api/audit");
    with_browser(1280, 900, |c| async move {
        c.goto(&server.url("/")).await.unwrap();
        let offered = eventually(15, "#sso-login", || async { texts(&c, "#sso-login").await.into_iter().next() }).await;
        assert_eq!(offered, "Sign in with 127.0.0.1");
        let button = c.find(Locator::Css("#sso-login")).await.unwrap();
        assert_eq!(button.attr("href").await.unwrap().as_deref(), Some("/auth/oidc/login"));

        sign_in(&c, &server.base, "ana").await;
        let who = eventually(15, "ana's name in the header", || async {
            texts(&c, "#whoami").await.into_iter().find(|t| t.contains("ana"))
        })
        .await;
        assert_eq!(who, "ana (admin)", "gpu-admins makes an admin");
        let signed_in = me(&c).await;
        assert_eq!(
            (signed_in["role"].as_str(), &signed_in["sign_out"]),
            (Some("admin"), &Value::Null),
            "Log out posts"
        );
        // An admin reads the audit log from the page: the sign-in is in it, with the groups.
        let script = format!(
            "const done = arguments[0]; fetch('{audit_url}').then(r => r.json()).then(done, e => done(String(e)));"
        );
        let log = c.execute_async(&script, vec![]).await.unwrap();
        assert!(audit_triples(&log).contains(&("ana".into(), "login".into(), "ok".into())), "{log}");
        let row = log.as_array().unwrap().iter().find(|e| e["target"] == "oidc").unwrap().clone();
        assert!(row["detail"].as_str().unwrap().contains("groups: staff, gpu-admins"), "{row}");

        // Log out ends the session here and, through the provider's end-session page, there.
        c.find(Locator::Css("#logout")).await.unwrap().click().await.unwrap();
        eventually(15, "the provider's sign-out page", || async {
            let yes = c.find(Locator::Css("button[name=logout][value=yes]")).await.ok()?;
            yes.click().await.ok()
        })
        .await;
        eventually(15, "#login-required after logout", || async {
            let url = c.current_url().await.ok()?.to_string();
            (url.starts_with(&server.base) && !texts(&c, "#login-required").await.is_empty()).then_some(())
        })
        .await;
        assert_eq!(me(&c).await["role"], Value::Null, "the session ended");

        // The provider's session ended too: bo signs in afresh, as himself.
        sign_in(&c, &server.base, "bo").await;
        let who = eventually(15, "bo in the header", || async {
            texts(&c, "#whoami").await.into_iter().find(|t| t.contains("bo"))
        })
        .await;
        assert_eq!(who, "bo (operator)", "gpu-users makes an operator");
    })
    .await;
}

#[tokio::test]
async fn someone_in_no_listed_group_is_refused_and_a_callback_needs_its_browser() {
    let (server, _provider) = dashboard(None).await;
    let base = server.base.clone();
    let shared = &server;
    with_browser(1280, 900, |c| async move {
        sign_in(&c, &shared.base, "cy").await;
        let said = refusal(&c).await;
        assert_eq!(
            said,
            "'cy' is in none of the groups that give a role here (admin: gpu-admins; operator: gpu-users) and \
             --default-role none refuses everyone else; their groups: students"
        );
        assert_eq!(me(&c).await["role"], Value::Null, "no session for cy");
    })
    .await;
    // A callback that did not start in this browser (no state cookie: login CSRF) is refused.
    let answer = reqwest::get(format!("{base}/auth/oidc/callback?code=stolen&state=someone-elses")).await.unwrap();
    assert_eq!(answer.status(), 403);
    assert!(answer.text().await.unwrap().contains("this sign-in expired, was already used, or was started elsewhere"));
    let provider_error =
        reqwest::get(format!("{base}/auth/oidc/callback?error=access_denied&error_description=no")).await;
    assert_eq!(provider_error.unwrap().status(), 403);
    let bare = reqwest::get(format!("{base}/auth/oidc/callback")).await.unwrap();
    assert_eq!(bare.status(), 400);
    assert!(bare.text().await.unwrap().contains("to sign in, open /auth/oidc/login"));
    let twice = reqwest::get(format!("{base}/auth/oidc/callback?code=a&code=b&state=s")).await.unwrap();
    assert_eq!(twice.status(), 400);
    assert!(twice.text().await.unwrap().contains("'code' is longer than 4096 bytes or given twice"));
    let mixed_up =
        reqwest::get(format!("{base}/auth/oidc/callback?error=x&state=s&iss=https://evil.example.org")).await;
    let mixed_up = mixed_up.unwrap().text().await.unwrap();
    assert!(mixed_up.contains("started elsewhere") && !mixed_up.contains("evil"), "unbound: nothing of it is shown");
    // With the browser's state cookie, the provider's own answer is read: its refusal, or another issuer.
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let started = client.get(format!("{base}/auth/oidc/login")).send().await.unwrap();
    assert_eq!(started.status(), 303);
    let cookie = started.headers()["set-cookie"].to_str().unwrap().split(';').next().unwrap().to_owned();
    assert!(cookie.starts_with("gpudash_oidc_state="), "{cookie}");
    let to: url::Url = started.headers()["location"].to_str().unwrap().parse().unwrap();
    let state = to.query_pairs().find(|(k, _)| k == "state").unwrap().1.into_owned();
    assert!(to.query_pairs().any(|(k, v)| k == "code_challenge_method" && v == "S256"), "PKCE: {to}");
    let answer = |query: String| {
        let (client, cookie) = (client.clone(), cookie.clone());
        let url = format!("{base}/auth/oidc/callback?{query}");
        async move {
            let answer = client.get(url).header("cookie", cookie).send().await.unwrap();
            (answer.status().as_u16(), answer.text().await.unwrap())
        }
    };
    let (status, page) = answer(format!("error=access_denied&error_description=nope&state={state}")).await;
    assert_eq!(status, 403);
    assert!(page.contains("the identity provider refused the sign-in: access_denied (nope)"), "{page}");
    let (status, page) = answer(format!("code=x&state={state}&iss=https://evil.example.org")).await;
    assert_eq!(status, 403);
    assert!(page.contains("the answer came from the issuer https://evil.example.org, not --oidc-issuer"), "{page}");
    let (status, page) = answer("code=x&state=another".to_owned()).await;
    assert_eq!(status, 403, "the cookie's sign-in is not this state's");
    assert!(page.contains("started elsewhere"), "{page}");
    // Opened under another name than --oidc-redirect-url's, the sign-in starts over there (where its cookie must be).
    let elsewhere = base.replace("127.0.0.1", "localhost");
    let moved = client.get(format!("{elsewhere}/auth/oidc/login?next=/%23lab")).send().await.unwrap();
    assert_eq!(moved.status(), 303);
    assert_eq!(moved.headers()["location"], format!("{base}/auth/oidc/login?next=%2F%23lab").as_str());
}

#[tokio::test]
async fn named_by_e_mail_only_a_verified_address_signs_in() {
    let (server, _provider) = dashboard_naming_by("email", Some(Role::Viewer)).await;
    let base = server.base.clone();
    with_browser(1280, 900, |c| async move {
        sign_in(&c, &base, "cy").await;
        let said = refusal(&c).await;
        assert!(said.contains("has not verified the e-mail address 'cy@lab.example.org'"), "{said}");
        assert_eq!(me(&c).await["role"], Value::Null);
    })
    .await;
    // A fresh browser (the provider's session there is cy's).
    with_browser(1280, 900, |c| async move {
        sign_in(&c, &server.base, "ana").await;
        assert_eq!(me(&c).await["user"], "ana@lab.example.org", "a verified address names her");
    })
    .await;
}

#[tokio::test]
async fn tampered_expired_and_misaddressed_id_tokens_are_refused() {
    let (server, provider) = dashboard(Some(Role::Viewer)).await;
    with_browser(1280, 900, |c| async move {
        for (mode, expected) in [
            ("tampered", "its signature does not verify with the provider's keys"),
            ("expired", "expired or not yet valid"),
            ("wrong-issuer", "it was issued by another issuer than --oidc-issuer"),
            ("wrong-audience", "it was not issued to this client (--oidc-client-id)"),
        ] {
            provider.spoil_next_id_token(mode).await;
            sign_in(&c, &server.base, "ana").await;
            let said = refusal(&c).await;
            assert!(said.starts_with("the identity provider's ID token was refused: "), "{mode}: {said}");
            assert!(said.contains(expected), "{mode}: {said}");
            assert_eq!(me(&c).await["role"], Value::Null, "{mode}: no session");
        }
        // The same sign-in with an untouched ID token goes through: the refusals were the tokens'.
        sign_in(&c, &server.base, "ana").await;
        let who = eventually(15, "ana signed in", || async {
            texts(&c, "#whoami").await.into_iter().find(|t| t.contains("ana"))
        })
        .await;
        assert_eq!(who, "ana (admin)");
    })
    .await;
}

/// SIGHUP reads the provider and the client secret file again, as `systemctl reload` does: a wrong secret
/// is refused by the provider, the right one works after SIGHUP, and a broken file keeps the one in force
/// and the sessions open.
#[tokio::test]
async fn sighup_reads_the_client_secret_again_and_sessions_stay() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let base = format!("http://127.0.0.1:{port}");
    let provider = Provider::start(&base).await;
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("oidc-secret");
    std::fs::write(&secret, "not-the-secret\n").unwrap();
    let (redirect, listen) = (format!("{base}/auth/oidc/callback"), format!("127.0.0.1:{port}"));
    let args = [
        "--oidc-issuer",
        &provider.issuer,
        "--oidc-client-id",
        CLIENT_ID,
        "--oidc-scope",
        "profile,groups",
        "--oidc-redirect-url",
        &redirect,
        "--admin-group",
        "gpu-admins",
        "--oidc-client-secret-file",
        secret.to_str().expect("a temporary path is text"),
    ];
    let args: Vec<&std::ffi::OsStr> = args.iter().map(std::ffi::OsStr::new).collect();
    let (server, rx) = start_on(&listen, &args);
    logged(&rx, "people sign in with the OIDC provider", 30);
    with_browser(1280, 900, |c| async move {
        sign_in(&c, &base, "ana").await;
        let said = refusal(&c).await;
        assert!(said.contains("the token endpoint answered invalid_client"), "{said}");

        std::fs::write(&secret, format!("{SECRET}\n")).unwrap();
        hangup(&server);
        logged(&rx, "reloaded", 15);
        sign_in(&c, &base, "ana").await;
        let who = eventually(15, "ana signed in", || async {
            texts(&c, "#whoami").await.into_iter().find(|t| t.contains("ana"))
        })
        .await;
        assert_eq!(who, "ana (admin)");

        std::fs::write(&secret, "").unwrap();
        hangup(&server);
        let kept = logged(&rx, "the OIDC settings already in force stay", 15);
        assert!(kept.contains("is empty"), "{kept}");
        assert_eq!(me(&c).await["role"], "admin", "the session stays open");
        // And the secret in force is the right one still: a fresh sign-in goes through.
        let script = "const done = arguments[0]; fetch('/api/logout', {method: 'POST'}).then(r => done(r.status));";
        assert_eq!(c.execute_async(script, vec![]).await.unwrap(), 200, "the provider's sign-out is named");
        sign_in(&c, &base, "ana").await;
        assert_eq!(me(&c).await["role"], "admin", "signed in again with the kept secret");
    })
    .await;
}
