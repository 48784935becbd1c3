//! The doctor's checks of the GPUs and of what the server opens at start: the data directory,
//! the port, tokens, TLS and the alerts file. Each says what it found and, when it matters, the fix.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{Check, count, host};
use crate::config::Config;
use team::alerts::AlertsConfig;
use team::alerts::deliver::format::{redact_urls, target};
use telemetry::nvml::NvmlSource;
use telemetry::simulator::Simulator;
use telemetry::{GpuSource, now_ms};

/// How long a webhook has to answer the doctor's GET.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(3);

/// Every check, in the order they are printed.
pub(super) fn all(config: &Config, check_webhooks: bool) -> std::io::Result<Vec<Check>> {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let (driver, gpm) = gpus(config);
    let mut checks = vec![driver, gpm, host::processes()];
    checks.extend(runtime.block_on(host::workload_sources(&config.identity)));
    checks.push(data_dir(config.data_dir.as_deref()));
    // The server's own listen() needs the runtime's reactor.
    checks.push(runtime.block_on(async { listen(config.listen) }));
    checks.push(tokens(config));
    checks.push(tls(config));
    checks.push(metrics_access(config));
    checks.push(runtime.block_on(super::sign_in::oidc_provider(config)));
    let (alerts_file, alerts) = alerts_file(config.alerts_file.as_deref());
    checks.push(alerts_file);
    let alerts = alerts.unwrap_or_default();
    checks.push(runtime.block_on(super::mail::smtp(&alerts, check_webhooks)));
    let webhooks = team::alerts::deliver::webhooks_for(&alerts, &config.alert_webhooks);
    let urls: Vec<url::Url> = webhooks.into_iter().map(|w| w.url).collect();
    checks.push(runtime.block_on(webhooks_check(&urls, check_webhooks)));
    Ok(checks)
}

/// The driver (NVML) and the GPUs it lists, then GPM on each; simulated GPUs with `--simulate`.
fn gpus(config: &Config) -> (Check, Check) {
    let interval_ms = u64::try_from(config.interval.as_millis()).unwrap_or(u64::MAX);
    if let Some(n) = config.simulate {
        let names = models(&Simulator::new(n, interval_ms).devices());
        let driver = Check::ok(
            "driver",
            format!(
                "{} (--simulate {n}: {names}); no figure comes from hardware, the driver is not used",
                count(n as usize, "simulated GPU")
            ),
        );
        return (driver, Check::ok("gpm", "simulated GPUs report simulated SM and tensor activity"));
    }
    let source = match NvmlSource::open(interval_ms) {
        Ok(source) => source,
        Err(e) => {
            let driver = Check::fail(
                "driver",
                "no NVIDIA driver: NVML (libnvidia-ml.so.1) cannot be loaded, so no GPU can be shown",
                "install the NVIDIA driver and check that `nvidia-smi` lists the GPUs; in a container, give it the \
                 GPUs and the driver's libraries: `docker run --gpus all …` (NVIDIA Container Toolkit) or a CDI device \
                 (`--device nvidia.com/gpu=all`); `gpudash --simulate 4` shows a demo without GPUs",
            )
            .with_detail(e.to_string());
            return (driver, Check::skip("gpm", "no driver, so no GPM"));
        }
    };
    let host = source.host();
    let devices = source.devices();
    let versions = format!(
        "NVIDIA driver {}, NVML {}, CUDA {}",
        host.driver_version.as_deref().unwrap_or("(version unknown)"),
        source.query().nvml_version().as_deref().unwrap_or("(version unknown)"),
        host.cuda_driver_version.as_deref().unwrap_or("(unknown)"),
    );
    if devices.is_empty() {
        let driver = Check::fail(
            "driver",
            format!("{versions}, but NVML lists no GPU"),
            "check `nvidia-smi -L`; in a container, pass the GPUs with --gpus all or a CDI device",
        );
        return (driver, Check::skip("gpm", "no GPU, so no GPM"));
    }
    let detail: Vec<String> =
        devices.iter().map(|d| format!("GPU {}: {} ({}, {})", d.index, d.name, d.uuid, d.pci_bus_id)).collect();
    let driver = Check::ok("driver", format!("{versions}: {} ({})", count(devices.len(), "GPU"), models(&devices)))
        .with_detail(detail.join("\n"));
    // A first GPM sample per GPU: the GPUs that cannot take one say why.
    let refused: Vec<(u32, String)> = source
        .gpm_reader()
        .step(now_ms())
        .into_iter()
        .filter_map(|(index, activity)| activity.unavailable.map(|reason| (index, reason)))
        .collect();
    let gpm = if refused.is_empty() {
        let on = if devices.len() == 1 { "the GPU".to_owned() } else { format!("all {} GPUs", devices.len()) };
        Check::ok("gpm", format!("GPM answers on {on}: SM and tensor activity are shown"))
    } else {
        let indexes: Vec<String> = refused.iter().map(|(index, _)| index.to_string()).collect();
        Check::warn(
            "gpm",
            format!(
                "GPM cannot be read on GPU {} of {}: SM and tensor activity show n/a there (GPU busy % still shows)",
                indexes.join(", "),
                devices.len()
            ),
            "GPM needs a Hopper or newer GPU (H100, H200, GH200, B200) and a recent driver; stop a \
             profiler that holds it (DCGM's profiling module, Nsight); with MIG on, it is not read",
        )
        .with_detail(
            refused.iter().map(|(index, reason)| format!("GPU {index}: {reason}")).collect::<Vec<_>>().join("\n"),
        )
    };
    (driver, gpm)
}

/// "8 × NVIDIA H200" or "1 × NVIDIA A100, 1 × NVIDIA H100": each model once, with its count.
fn models(devices: &[shared::DeviceInfo]) -> String {
    let mut counted: Vec<(&str, usize)> = Vec::new();
    for d in devices {
        match counted.iter_mut().find(|(name, _)| *name == d.name) {
            Some((_, n)) => *n += 1,
            None => counted.push((&d.name, 1)),
        }
    }
    counted.iter().map(|(name, n)| format!("{n} × {name}")).collect::<Vec<_>>().join(", ")
}

/// The history directory: there or creatable, and writable. What it creates to find out, it removes.
pub(super) fn data_dir(dir: Option<&Path>) -> Check {
    let Some(dir) = dir else {
        return Check::skip("data-dir", "history is off (--no-history): nothing is written to disk");
    };
    let shown = dir.display();
    let fix = format!(
        "create it for gpudash's user (`sudo install -d -o USER {shown}`), or give another directory with --data-dir"
    );
    if dir.exists() && !dir.is_dir() {
        return Check::fail("data-dir", format!("the data directory '{shown}' is not a directory"), fix);
    }
    let missing: Vec<PathBuf> =
        dir.ancestors().take_while(|p| !p.as_os_str().is_empty() && !p.exists()).map(Path::to_owned).collect();
    if let Err(e) = std::fs::create_dir_all(dir) {
        return Check::fail("data-dir", format!("the data directory '{shown}' cannot be created: {e}"), fix);
    }
    let probe = dir.join(format!(".gpudash-doctor-{}", std::process::id()));
    let written = std::fs::File::create_new(&probe).and_then(|mut f| std::io::Write::write_all(&mut f, b"gpudash"));
    let _ = std::fs::remove_file(&probe);
    // Deepest first; remove_dir leaves anything not empty alone.
    for created in &missing {
        let _ = std::fs::remove_dir(created);
    }
    match written {
        Err(e) => Check::fail("data-dir", format!("the data directory '{shown}' is not writable: {e}"), fix),
        Ok(()) if missing.is_empty() => Check::ok("data-dir", format!("history is kept in {shown} (writable)")),
        Ok(()) => {
            Check::ok("data-dir", format!("history will be kept in {shown} (not there yet; gpudash can create it)"))
        }
    }
}

/// Whether the server could listen on `addr`, asked through its own `listen`. Needs a runtime.
pub(super) fn listen(addr: SocketAddr) -> Check {
    let port = addr.port();
    let other_port = format!("choose another port with --listen {}:PORT", bracketed(addr));
    match web::serve::listen(addr) {
        Ok(_) if port == 0 => Check::ok("listen", format!("can listen on {addr}: a free port is picked at start")),
        Ok(_) if addr.ip().is_loopback() => {
            Check::ok("listen", format!("port {port} is free on {addr} (loopback: only this machine can connect)"))
        }
        Ok(_) => Check::ok("listen", format!("port {port} is free on {addr}")),
        Err(e) if e.kind() == ErrorKind::AddrInUse => Check::fail(
            "listen",
            format!("port {port} is in use by another process (cannot listen on {addr})"),
            format!("stop it (`ss -ltnp 'sport = :{port}'` names it: another gpudash?), or {other_port}"),
        ),
        Err(e) if e.kind() == ErrorKind::AddrNotAvailable => Check::fail(
            "listen",
            format!("{} is not an address of this machine", addr.ip()),
            "give one of its addresses with --listen, or 0.0.0.0:PORT for all of them",
        ),
        Err(e) if e.kind() == ErrorKind::PermissionDenied => Check::fail(
            "listen",
            format!("listening on port {port} is not permitted ({e})"),
            format!("ports below 1024 need root or CAP_NET_BIND_SERVICE: {other_port} of 1024 or more"),
        ),
        Err(e) => Check::fail("listen", format!("cannot listen on {addr}: {e}"), other_port),
    }
}

fn bracketed(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V4(a) => a.ip().to_string(),
        SocketAddr::V6(a) => format!("[{}]", a.ip()),
    }
}

/// Tokens: beyond loopback (or behind a public URL) the server refuses to start without any,
/// unless `--allow-anonymous`: [`Config::exposed`], the rule `gpudash::run` applies.
pub(super) fn tokens(config: &Config) -> Check {
    let env = std::env::var("GPUDASH_TOKENS").ok();
    let auth = match team::auth::AuthConfig::load(config.auth_file.as_deref(), env.as_deref()) {
        Ok(auth) => auth,
        Err(e) => {
            return Check::fail(
                "tokens",
                format!("the tokens are refused, so the dashboard would not start: {e}"),
                "correct the auth file (or GPUDASH_TOKENS); `gpudash token --user NAME --role ROLE` prints a good entry",
            );
        }
    };
    let exposed = config.exposed();
    let from = match &config.auth_file {
        Some(file) => format!("from {}", file.display()),
        None => "from GPUDASH_TOKENS".to_owned(),
    };
    if let Some(proxy) = &config.proxy {
        let users_named = !config.site.proxy_users.uids.is_empty();
        if let Some(refusal) = team::auth::proxy::unbelievable(&config.site.trusted_proxies, users_named) {
            return Check::fail(
                "tokens",
                "the auth proxy's headers could be forged: the dashboard would not start",
                refusal,
            );
        }
        if let Some(path) = &config.user_map
            && let Err(e) = team::auth::names::UserMap::load(path)
        {
            return Check::fail(
                "tokens",
                format!("{e}: the dashboard would not start"),
                "correct the user map or drop --user-map",
            );
        }
        let tokens = auth.tokens.len();
        return Check::ok(
            "tokens",
            format!(
                "people sign in through the auth proxy ({} names them, {} lists groups; {}; everyone else: {}), and \
                 {tokens} token{} {from}",
                proxy.user_header,
                proxy.groups_header,
                proxy.roles.describe(),
                proxy.roles.others.map_or("refused", |role| role.name()),
                if tokens == 1 { "" } else { "s" },
            ),
        );
    }
    match (auth.tokens.len(), exposed) {
        (0, true) if !config.allow_anonymous => Check::fail(
            "tokens",
            format!(
                "no tokens, yet the dashboard listens on {}{}: it refuses to start without authentication",
                config.listen,
                if config.site.public.is_empty() { "" } else { " and has public URLs" }
            ),
            "make a token per person with `gpudash token --user NAME --role ROLE` (viewer, operator or admin), put \
             the entries it prints in an auth file given with --auth-file; or --listen 127.0.0.1:PORT; or \
             --allow-anonymous if this network is trusted or a proxy in front authenticates everyone",
        ),
        (0, true) => Check::warn(
            "tokens",
            format!("no tokens on {} (--allow-anonymous): anyone who can reach it may do everything", config.listen),
            "make tokens with `gpudash token --user NAME --role ROLE` and give them with --auth-file",
        ),
        (0, false) => Check::ok(
            "tokens",
            "no tokens needed on loopback: the user running gpudash (and each --local-user) is admin from this machine",
        ),
        (n, _) => Check::ok("tokens", format!("{n} token{} {from}", if n == 1 { "" } else { "s" })),
    }
}

/// Who may scrape `/metrics`: the web config file read as the server reads it.
pub(super) fn metrics_access(config: &Config) -> Check {
    let users = match config.web_config_file.as_deref().map(team::auth::ScrapeUsers::load).transpose() {
        Ok(users) => users,
        Err(e) => {
            return Check::fail(
                "metrics",
                format!("{e}: the dashboard would not start"),
                "correct the web config file (`htpasswd -nBC 10 USER` prints a user and hash), or drop --web-config-file",
            );
        }
    };
    let mut ways = Vec::new();
    if let Some(users) = &users {
        ways.push(format!("basic auth from {} account(s) of the web config file", users.len()));
    }
    if config.metrics_client_ca.is_some() {
        ways.push("client certificates of --metrics-client-ca".to_owned());
    }
    if ways.is_empty() {
        return Check::skip("metrics", "/metrics as the auth file's `metrics` says (open, or a token)");
    }
    Check::ok("metrics", format!("/metrics takes {}, or a token", ways.join(" and ")))
}

/// The TLS certificate and key, read as the server reads them; plain HTTP beyond loopback warns.
pub(super) fn tls(config: &Config) -> Check {
    if let (Some(cert), Some(key)) = (&config.tls_cert, &config.tls_key) {
        return match web::tls::acceptor_with(cert, key, config.metrics_client_ca.as_deref()) {
            Ok(_) => Check::ok("tls", format!("HTTPS with {} and its key {}", cert.display(), key.display())),
            Err(e) => Check::fail(
                "tls",
                format!("{e}: the dashboard would not start"),
                "give a PEM certificate chain with --tls-cert and its PEM private key with --tls-key, readable by gpudash's user",
            ),
        };
    }
    let proxied = config.site.public.iter().any(|p| p.scheme == "https");
    if config.listen.ip().is_loopback() || proxied {
        let why = if proxied { "TLS ends at the proxy of the public URL" } else { "loopback only" };
        return Check::skip("tls", format!("plain HTTP ({why})"));
    }
    Check::warn(
        "tls",
        format!("plain HTTP on {}: tokens and session cookies cross the network unencrypted", config.listen),
        "give --tls-cert and --tls-key, or put a TLS proxy in front and name it with --public-url https://HOST",
    )
}

/// The alerts file, read as the server reads it at start (a refused one stops the server).
fn alerts_file(path: Option<&Path>) -> (Check, Option<AlertsConfig>) {
    let Some(path) = path else {
        return (Check::skip("alerts-file", "no alerts file: the built-in rules"), None);
    };
    match AlertsConfig::load(path) {
        Ok(config) => {
            let n = config.webhooks.len();
            (
                Check::ok("alerts-file", format!("rules and {} from {}", count(n, "webhook"), path.display())),
                Some(config),
            )
        }
        Err(e) => {
            let check = Check::fail(
                "alerts-file",
                format!("{}: the dashboard would not start", redact_urls(&e.to_string())),
                "correct the file (team/src/alerts/config.rs describes it), or leave --alerts-file out for the built-in rules",
            );
            (check, None)
        }
    }
}

/// Each webhook's answer to a GET, when asked to probe them; never an alert.
async fn webhooks_check(urls: &[url::Url], probe: bool) -> Check {
    if urls.is_empty() {
        return Check::skip("webhooks", "no webhooks (--alert-webhook, or [[webhook]] in the alerts file)");
    }
    if !probe {
        return Check::skip(
            "webhooks",
            format!("{} not probed: --check-webhooks sends each a GET", count(urls.len(), "webhook")),
        );
    }
    let client = match reqwest::Client::builder()
        .user_agent(concat!("gpudash-doctor/", env!("CARGO_PKG_VERSION")))
        .redirect(reqwest::redirect::Policy::none())
        .timeout(WEBHOOK_TIMEOUT)
        .build()
    {
        Ok(client) => client,
        Err(e) => return Check::fail("webhooks", format!("cannot start the HTTP client: {e}"), "report this as a bug"),
    };
    let answers = futures_util::future::join_all(urls.iter().map(|url| {
        let client = client.clone();
        async move { (target(url), client.get(url.clone()).send().await) }
    }))
    .await;
    let mut lines = Vec::new();
    let mut unreachable = 0;
    for (shown, answer) in answers {
        match answer {
            Ok(response) => lines.push(format!("{shown}: answers HTTP {} to a GET", response.status())),
            Err(e) => {
                unreachable += 1;
                lines.push(format!("{shown}: {}", base::error::chain(&e.without_url())));
            }
        }
    }
    let detail = lines.join("\n");
    if unreachable == 0 {
        Check::ok("webhooks", format!("{} answered: {}", count(urls.len(), "webhook"), lines.join("; ")))
            .with_detail(detail)
    } else {
        Check::warn(
            "webhooks",
            format!("{unreachable} of {} cannot be reached: their alerts would be lost", count(urls.len(), "webhook")),
            "check the URL and that this machine reaches it (proxy, firewall, DNS)",
        )
        .with_detail(detail)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Status;
    use super::*;

    fn config(args: &[&str]) -> Config {
        let cli = super::super::parse_from(["gpudash", "doctor"].iter().chain(args)).unwrap();
        let Some(crate::cli::Command::Doctor(doctor)) = cli.command else { panic!("not the doctor") };
        Config::from(*doctor.server.unwrap())
    }

    #[test]
    fn doctor_applies_the_servers_token_rule() {
        let check = tokens(&config(&["--listen", "0.0.0.0:7070"]));
        assert_eq!(check.status, Status::Fail, "{check:?}");
        assert!(check.summary.contains("refuses to start"), "{check:?}");
        assert!(check.fix.unwrap().contains("gpudash token --user NAME --role ROLE"));
        let behind_proxy = tokens(&config(&["--public-url", "https://gpu1.example.com"]));
        assert_eq!(behind_proxy.status, Status::Fail, "a public URL needs tokens too: {behind_proxy:?}");
        assert_eq!(tokens(&config(&["--listen", "0.0.0.0:7070", "--allow-anonymous"])).status, Status::Warn);
        assert_eq!(tokens(&config(&[])).status, Status::Ok);
        let web = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(web.path(), "basic_auth_users:\n  prometheus: not-a-hash\n").unwrap();
        let check = metrics_access(&config(&["--web-config-file", web.path().to_str().unwrap()]));
        assert_eq!(check.status, Status::Fail, "{check:?}");
        assert!(check.summary.contains("not a bcrypt hash"), "{check:?}");
        std::fs::write(web.path(), format!("basic_auth_users:\n  prometheus: '{}'\n", bcrypt::hash("x", 4).unwrap()))
            .unwrap();
        let check = metrics_access(&config(&["--web-config-file", web.path().to_str().unwrap()]));
        assert_eq!(check.status, Status::Ok, "{check:?}");
        let unbelieved = tokens(&config(&["--listen", "0.0.0.0:7070", "--auth-proxy-header", "X-Forwarded-User"]));
        assert_eq!(unbelieved.status, Status::Fail, "{unbelieved:?}");
        assert!(unbelieved.fix.unwrap().contains("--trusted-proxy"));
        let forgeable = ["--auth-proxy-header", "X-Forwarded-User", "--trusted-proxy", "127.0.0.1"];
        let check = tokens(&config(&forgeable));
        assert_eq!(check.status, Status::Fail, "any local user could forge the header: {check:?}");
        assert!(check.fix.unwrap().contains("--trusted-proxy-user"));
        let proxied =
            ["--listen", "0.0.0.0:7070", "--auth-proxy-header", "X-Forwarded-User", "--trusted-proxy", "10.0.0.1"];
        let check = tokens(&config(&[&proxied[..], &["--admin-group", "gpu-admins"]].concat()));
        assert_eq!(check.status, Status::Ok, "an auth proxy signs people in without tokens: {check:?}");
        assert!(check.summary.contains("x-forwarded-user names them") && check.summary.contains("admin: gpu-admins"));
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("auth.toml");
        let hash = team::auth::tokens_hex(&team::auth::hash_token("a-long-enough-token-1234"));
        std::fs::write(&file, format!("[[token]]\nuser = \"ana\"\nrole = \"admin\"\nsha256 = \"{hash}\"\n")).unwrap();
        let path = file.to_str().unwrap();
        let check = tokens(&config(&["--listen", "0.0.0.0:7070", "--auth-file", path]));
        assert_eq!((check.status, check.summary.as_str()), (Status::Ok, format!("1 token from {path}").as_str()));
        std::fs::write(&file, "[[token]]\nuser = \"ana\"\n").unwrap();
        assert_eq!(
            tokens(&config(&["--auth-file", path])).status,
            Status::Fail,
            "a refused auth file stops the server"
        );
    }

    #[test]
    fn doctor_reads_the_tls_files_as_the_server_does() {
        let certified = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&cert, certified.cert.pem()).unwrap();
        std::fs::write(&key, certified.signing_key.serialize_pem()).unwrap();
        let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
        let check = tls(&config(&["--tls-cert", cert, "--tls-key", key]));
        assert_eq!(check.status, Status::Ok, "{check:?}");
        // The key given as the certificate: it holds no certificate.
        let check = tls(&config(&["--tls-cert", key, "--tls-key", key]));
        assert_eq!(check.status, Status::Fail, "{check:?}");
        assert!(check.summary.contains("holds no certificate") && check.summary.contains(key), "{check:?}");
        assert_eq!(tls(&config(&[])).status, Status::Skip);
        assert_eq!(tls(&config(&["--listen", "0.0.0.0:7070"])).status, Status::Warn);
    }

    #[test]
    fn doctor_data_dir_is_created_and_removed_again() {
        let parent = tempfile::tempdir().unwrap();
        let dir = parent.path().join("a/b");
        let check = data_dir(Some(&dir));
        assert_eq!(check.status, Status::Ok, "{check:?}");
        assert!(!parent.path().join("a").exists(), "what the doctor created to try it, it removed");
        let check = data_dir(Some(parent.path()));
        assert!(check.summary.contains("(writable)"), "{check:?}");
        assert_eq!(std::fs::read_dir(parent.path()).unwrap().count(), 0, "no probe file is left");
        let file = parent.path().join("f");
        std::fs::write(&file, "").unwrap();
        assert_eq!(data_dir(Some(&file)).status, Status::Fail);
    }

    #[tokio::test]
    async fn doctor_names_a_port_in_use() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let check = listen(addr);
        assert_eq!(check.status, Status::Fail);
        assert!(check.summary.contains(&format!("port {} is in use", addr.port())), "{check:?}");
        drop(taken);
        assert_eq!(listen(addr).status, Status::Ok);
    }
}
