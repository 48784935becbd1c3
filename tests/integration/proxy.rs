//! docs/SECURITY.md's reverse-proxy setup, run for real: Debian's nginx with that page's own
//! `nginx` block terminating TLS in front of gpudash started with `--public-url` and
//! `--trusted-proxy`, as the page says. A login, a lab run, the WebSocket and a rebinding
//! attempt go through it.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use gpudash::web::site::{PublicUrl, parse_trusted_proxy};
use reqwest::StatusCode;
use reqwest::header::{COOKIE, HOST, ORIGIN, SET_COOKIE};
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::edge::server_with;
use crate::security::{ADMIN, OPERATOR};
use crate::support::{Said, TlsFiles, eventually_every};

/// The name docs/SECURITY.md's example serves under; the test resolves it to 127.0.0.1.
const NAME: &str = "gpu1.example.com";

/// Stops nginx when the test ends, however it ends.
struct Nginx(Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// docs/SECURITY.md's `nginx` code block, with the test's ports and certificate files.
fn readme_block(upstream_port: u16, listen_port: u16, tls: &TlsFiles) -> String {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/SECURITY.md")).unwrap();
    let start = readme.find("```nginx\n").expect("docs/SECURITY.md has an nginx example") + "```nginx\n".len();
    let block = &readme[start..start + readme[start..].find("```").unwrap()];
    for expected in
        ["listen 443 ssl;", "proxy_pass http://127.0.0.1:7070;", "ssl_certificate     ", "ssl_certificate_key "]
    {
        assert!(block.contains(expected), "docs/SECURITY.md's nginx block changed shape: {expected} missing");
    }
    block
        .replace("listen 443 ssl;", &format!("listen 127.0.0.1:{listen_port} ssl;"))
        .replace("127.0.0.1:7070", &format!("127.0.0.1:{upstream_port}"))
        .replace("/etc/ssl/gpu1.example.com.pem", tls.cert.to_str().unwrap())
        .replace("/etc/ssl/gpu1.example.com.key", tls.key.to_str().unwrap())
}

/// A client that trusts the test CA and resolves NAME to nginx on `port`, and the CA's PEM.
fn client_of(tls: &TlsFiles, port: u16) -> (reqwest::Client, Vec<u8>) {
    let ca = std::fs::read(&tls.ca).unwrap();
    let client = reqwest::Client::builder()
        .use_rustls_tls()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
        .resolve(NAME, ([127, 0, 0, 1], port).into())
        .build()
        .unwrap();
    (client, ca)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Starts nginx with `server_block`, returning once it accepts connections on `port`.
async fn start_nginx(dir: &Path, server_block: &str, port: u16) -> Nginx {
    let binary = ["/usr/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("nginx is not installed: `bash tests/run.sh` installs Debian's nginx (apt-get install nginx)");
    let d = dir.display();
    let config = format!(
        "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log info;\n\
         events {{ worker_connections 256; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n  \
         fastcgi_temp_path {d}/fastcgi;\n  uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n{server_block}\n}}\n"
    );
    let path = dir.join("nginx.conf");
    std::fs::write(&path, config).unwrap();
    let child = Command::new(binary)
        .arg("-p")
        .arg(dir)
        .arg("-c")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start nginx");
    let nginx = Nginx(child);
    let what = format!("nginx to listen on {port}");
    eventually_every(20, Duration::from_millis(50), &what, || async {
        match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            Ok(_) => Ok(()),
            Err(e) => Err(Said(format!(
                "{e}; its error.log:\n{}",
                std::fs::read_to_string(dir.join("error.log")).unwrap_or_default()
            ))),
        }
    })
    .await;
    nginx
}

#[tokio::test]
async fn the_readmes_tls_proxy_serves_logins_runs_and_the_live_socket() {
    let dir = tempfile::tempdir().unwrap();
    let tls = TlsFiles::generate_for(&[NAME], dir.path());
    let port = free_port();
    let public = format!("https://{NAME}:{port}");
    let server = server_with(true, |o| {
        o.site.public = vec![PublicUrl::parse(&public).unwrap()];
        o.site.trusted_proxies = vec![parse_trusted_proxy("127.0.0.1").unwrap()];
    })
    .await;
    let _nginx = start_nginx(dir.path(), &readme_block(server.running.addr().port(), port, &tls), port).await;

    let (client, ca) = client_of(&tls, port);

    // The browser's login: same-origin POST with the public Origin.
    let login = client
        .post(format!("{public}/api/login"))
        .header(ORIGIN, &public)
        .json(&json!({ "token": OPERATOR }))
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), StatusCode::OK, "{:?}", login.text().await);
    let set_cookie = login.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    assert!(set_cookie.starts_with("__Host-gpudash_session=") && set_cookie.contains("Secure"), "{set_cookie}");
    let session = set_cookie.split(';').next().unwrap().to_owned();

    let run = client
        .post(format!("{public}/api/runs"))
        .header(ORIGIN, &public)
        .header(COOKIE, &session)
        .json(&json!({ "device": 0, "params": { "kind": "latency" } }))
        .send()
        .await
        .unwrap();
    assert_eq!(run.status(), StatusCode::ACCEPTED, "{:?}", run.text().await);

    // A foreign page still cannot post through the proxy, and a rebound name is still refused.
    let foreign = client
        .post(format!("{public}/api/runs"))
        .header(ORIGIN, "https://evil.example")
        .header(COOKIE, &session)
        .json(&json!({ "device": 0, "params": { "kind": "latency" } }))
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status(), StatusCode::FORBIDDEN);
    let rebound = client.get(format!("{public}/api/devices")).header(HOST, "rebind.test").send().await.unwrap();
    assert_eq!(rebound.status(), StatusCode::MISDIRECTED_REQUEST);

    // The audit log has the client address nginx forwarded, not "unknown".
    let log: Value =
        client.get(format!("{public}/api/audit")).bearer_auth(ADMIN).send().await.unwrap().json().await.unwrap();
    let start = log.as_array().unwrap().iter().find(|e| e["action"] == "experiment.start").expect("the run is audited");
    assert_eq!(start["client"], "127.0.0.1");

    // The live view: a WebSocket upgrade through nginx over TLS, with the session cookie and the page's Origin.
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&ca) {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let mut request = format!("wss://{NAME}:{port}/ws").into_client_request().unwrap();
    request.headers_mut().insert("origin", public.parse().unwrap());
    request.headers_mut().insert("cookie", session.parse().unwrap());
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let connector = tokio_tungstenite::Connector::Rustls(Arc::new(config));
    let (mut socket, _) = tokio_tungstenite::client_async_tls_with_config(request, tcp, None, Some(connector))
        .await
        .expect("the WebSocket upgrades through the proxy");
    let first = tokio::time::timeout(Duration::from_secs(10), socket.next()).await.expect("a snapshot in time");
    assert!(matches!(first, Some(Ok(Message::Text(_)))), "{first:?}");
    drop(socket);
    server.stop().await;
}

/// docs/TEAM.md's auth-proxy `nginx` block (oauth2-proxy's `auth_request` setup), with the test's ports
/// and certificate files, and a stand-in for oauth2-proxy: it signs in whoever presents a `standin`
/// cookie (ana in staff and gpu-admins, bo in gpu-users, cy in students) and answers as oauth2-proxy
/// does with `--set-xauthrequest`.
fn auth_proxy_blocks(upstream_port: u16, listen_port: u16, stand_in_port: u16, tls: &TlsFiles) -> String {
    let team = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/TEAM.md")).unwrap();
    let start = team.find("```nginx\n").expect("docs/TEAM.md has the auth-proxy nginx example") + "```nginx\n".len();
    let block = &team[start..start + team[start..].find("```").unwrap()];
    for expected in [
        "listen 443 ssl;",
        "auth_request /oauth2/auth;",
        "proxy_pass http://127.0.0.1:4180;",
        "proxy_set_header X-Forwarded-User   $user;",
        "proxy_pass http://127.0.0.1:7070;",
    ] {
        assert!(block.contains(expected), "docs/TEAM.md's nginx block changed shape: {expected} missing");
    }
    let docs = block
        .replace("listen 443 ssl;", &format!("listen 127.0.0.1:{listen_port} ssl;"))
        .replace("127.0.0.1:7070", &format!("127.0.0.1:{upstream_port}"))
        .replace("127.0.0.1:4180", &format!("127.0.0.1:{stand_in_port}"))
        .replace("/etc/ssl/gpu1.example.com.pem", tls.cert.to_str().unwrap())
        .replace("/etc/ssl/gpu1.example.com.key", tls.key.to_str().unwrap());
    format!(
        "map $cookie_standin $standin_user {{ ana ana; bo bo; cy cy; default \"\"; }}\n\
         map $cookie_standin $standin_groups {{ ana \"staff,gpu-admins\"; bo gpu-users; cy students; default \"\"; }}\n\
         server {{\n  listen 127.0.0.1:{stand_in_port};\n  location = /oauth2/auth {{\n    \
         if ($standin_user = \"\") {{ return 401; }}\n    \
         add_header X-Auth-Request-Preferred-Username $standin_user always;\n    \
         add_header X-Auth-Request-Groups $standin_groups always;\n    return 200;\n  }}\n  \
         location / {{ return 403 \"stand-in identity provider: sign in first\\n\"; }}\n}}\n{docs}"
    )
}

#[tokio::test]
async fn the_team_pages_auth_proxy_signs_people_in_by_their_groups() {
    let dir = tempfile::tempdir().unwrap();
    let tls = TlsFiles::generate_for(&[NAME], dir.path());
    let (port, stand_in) = (free_port(), free_port());
    let public = format!("https://{NAME}:{port}");
    // As docs/TEAM.md starts it (bar --trusted-proxy-user: the test's nginx runs as the test's user).
    let server = server_with(true, |o| {
        o.site.public = vec![PublicUrl::parse(&public).unwrap()];
        o.site.trusted_proxies = vec![parse_trusted_proxy("127.0.0.1").unwrap()];
        o.proxy = Some(gpudash::auth::ProxyConfig {
            user_header: gpudash::auth::proxy::parse_header_name("X-Forwarded-User").unwrap(),
            groups_header: gpudash::auth::proxy::parse_header_name("X-Forwarded-Groups").unwrap(),
            roles: gpudash::auth::GroupRoles {
                admin: vec!["gpu-admins".into()],
                operator: vec!["gpu-users".into()],
                others: Some(shared::auth::Role::Viewer),
            },
            sign_out: Some("/oauth2/sign_out".into()),
            user_map: gpudash::auth::names::UserMap::default(),
        });
    })
    .await;
    let blocks = auth_proxy_blocks(server.running.addr().port(), port, stand_in, &tls);
    let _nginx = start_nginx(dir.path(), &blocks, port).await;
    let (client, _) = client_of(&tls, port);
    let me = |who: &'static str| {
        let client = client.clone();
        let url = format!("{public}/api/me");
        async move {
            let response = client.get(url).header(COOKIE, format!("standin={who}")).send().await.unwrap();
            let status = response.status();
            (status, response.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    for (who, role) in [("ana", "admin"), ("bo", "operator"), ("cy", "viewer")] {
        let (status, body) = me(who).await;
        assert_eq!(status, StatusCode::OK, "{who}: {body}");
        assert_eq!((body["user"].as_str(), body["role"].as_str()), (Some(who), Some(role)), "{body}");
        assert_eq!((body["by_proxy"].as_bool(), body["sign_out"].as_str()), (Some(true), Some("/oauth2/sign_out")));
    }
    // Not signed in: the proxy sends the browser to its sign-in, and gpudash is never asked.
    let (status, _) = me("nobody").await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // The operator group runs; the viewer is refused by role; a header the browser forges is replaced.
    let run = json!({ "device": 0, "params": { "kind": "latency" } });
    let post = |who: &str, forged: Option<&str>| {
        let mut request = client
            .post(format!("{public}/api/runs"))
            .header(ORIGIN, &public)
            .header(COOKIE, format!("standin={who}"))
            .json(&run);
        if let Some(forged) = forged {
            request = request.header("X-Forwarded-User", forged).header("X-Forwarded-Groups", "gpu-admins");
        }
        request.send()
    };
    let started = post("bo", None).await.unwrap();
    assert_eq!(started.status(), StatusCode::ACCEPTED, "{:?}", started.text().await);
    let refused = post("cy", Some("ana")).await.unwrap();
    assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    let body: Value = refused.json().await.unwrap();
    assert_eq!(body["error"], "running an experiment needs the operator role; 'cy' has viewer", "{body}");

    // The same headers sent around the proxy, from another address: refused.
    let around = reqwest::Client::builder()
        .local_address(std::net::IpAddr::from([127, 0, 0, 2]))
        .build()
        .unwrap()
        .get(format!("{}/api/me", server.base))
        .header("X-Forwarded-User", "ana")
        .header("X-Forwarded-Groups", "gpu-admins")
        .send()
        .await
        .unwrap();
    assert_eq!(around.status(), StatusCode::FORBIDDEN);

    // The audit log (read as ana, an admin by her group) names bo's run and each sign-in, with the client
    // address nginx forwarded.
    let audit = client.get(format!("{public}/api/audit")).header(COOKIE, "standin=ana").send().await.unwrap();
    let log: Value = audit.json().await.unwrap();
    let entries = log.as_array().unwrap();
    let start = entries.iter().find(|e| e["action"] == "experiment.start" && e["outcome"] == "ok").expect("audited");
    assert_eq!((start["user"].as_str(), start["client"].as_str()), (Some("bo"), Some("127.0.0.1")));
    for who in ["ana", "bo", "cy"] {
        let signed_in = entries.iter().any(|e| e["action"] == "login" && e["target"] == "proxy" && e["user"] == who);
        assert!(signed_in, "{who}'s sign-in is not in {log}");
    }
    server.stop().await;
}
