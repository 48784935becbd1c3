use super::*;
use team::flags::ConfigError;

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("gpudash").chain(args.iter().copied()))
}

#[test]
fn defaults_are_loopback_and_one_second() {
    let cli = parse(&[]).unwrap();
    assert_eq!(cli.listen, "127.0.0.1:7070".parse().unwrap());
    assert_eq!(cli.interval, Duration::from_secs(1));
    assert_eq!(cli.simulate, None);
    assert_eq!(Config::from(cli).audit_retention, Duration::from_secs(180 * 24 * 3600));
}

#[test]
fn signals_are_off_unless_allowed() {
    assert!(!Config::from(parse(&[]).unwrap()).allow_signals);
    assert!(Config::from(parse(&["--allow-signals"]).unwrap()).allow_signals);
    assert!(parse(&["--allow-signals=yes"]).is_err(), "a switch takes no value");
}

#[test]
fn idle_flags_read_sizes_and_durations_and_refuse_nonsense() {
    let cli = parse(&[]).unwrap();
    assert_eq!((cli.idle_memory, cli.idle_after), (1 << 30, Duration::from_secs(1800)));
    let cli = parse(&["--idle-memory", "512MiB", "--idle-after", "90s"]).unwrap();
    assert_eq!((cli.idle_memory, cli.idle_after), (512 << 20, Duration::from_secs(90)));
    assert_eq!(parse_idle_memory("2 GB"), Ok(2_000_000_000));
    for bad in ["", "lots", "-1GiB", "1KiB", "99TiB", "NaNGiB"] {
        let err = parse_idle_memory(bad).unwrap_err().to_string();
        assert!(err.contains("e.g. 1GiB"), "{bad}: {err}");
    }
    for bad in ["1s", "8d", "soon"] {
        assert!(parse_idle_after(bad).is_err(), "{bad}");
    }
}

#[test]
fn alert_webhooks_repeat_and_the_export_is_a_subcommand() {
    let cli =
        parse(&["--alert-webhook", "http://127.0.0.1:9/a", "--alert-webhook", "https://h.example/b?t=1"]).unwrap();
    assert_eq!(Config::from(cli).alert_webhooks.len(), 2);
    let cli = parse(&["alerts", "export-prometheus", "--alerts-file", "a.toml", "-o", "r.yml"]).unwrap();
    let Some(crate::cli::Command::Alerts { command: crate::cli::alerts::AlertsCommand::ExportPrometheus(args) }) =
        cli.command
    else {
        panic!("not the export subcommand");
    };
    assert_eq!(args.alerts_file.as_deref(), Some(std::path::Path::new("a.toml")));
    assert_eq!(args.output.as_deref(), Some(std::path::Path::new("r.yml")));
}

#[test]
fn accepts_port_zero_ipv6_and_short_intervals() {
    let cli = parse(&["--listen", "[::1]:0", "--interval", "200ms", "--simulate", "8"]).unwrap();
    assert_eq!(cli.listen.port(), 0);
    assert_eq!(cli.interval, Duration::from_millis(200));
    assert_eq!(cli.simulate, Some(8));
}

#[test]
fn rejects_bad_values_with_what_is_allowed() {
    for (args, expected) in [
        (&["--listen", "localhost"][..], "use IP:PORT"),
        (&["--listen", "127.0.0.1:99999"][..], "use IP:PORT"),
        (&["--interval", "50ms"][..], "between 100ms and 60s"),
        (&["--interval", "2h"][..], "between 100ms and 60s"),
        (&["--interval", "fast"][..], "not a duration"),
        (&["--simulate", "0"][..], "from 1 to 64"),
        (&["--simulate=-3"][..], "from 1 to 64"),
        (&["--simulate", "65"][..], "from 1 to 64"),
        (&["--history-raw", "1s"][..], "from 10m to 10 years"),
        (&["--history-rollup", "forever"][..], "not a duration"),
        (&["--no-history", "--data-dir", "/tmp"][..], "cannot be used with"),
        (&["--simulate", "2", "--simulate-fault", "melt:1@2s"][..], "lost:INDEX@DELAY"),
        (&["--simulate", "2", "--simulate-fault", "pid:0:0"][..], "pid:INDEX:PID"),
        (&["--simulate-fault", "lost:1@2s"][..], "--simulate"),
        (&["--container-socket", "docker.sock"][..], "absolute path of at most 107 bytes"),
        (&["--pod-resources-socket", ""][..], "absolute path"),
        (&["--owner-label", "team name"][..], "1 to 128 letters, digits"),
        (&["--hostname", " "][..], "not a host name"),
        (&["--audit-days", "0"][..], "from 1 to 3650"),
        (&["--max-connections-per-client", "3"][..], "from 4 to 1000000"),
        (&["--local-user", "no-such-user-here"][..], "give a user name or a numeric uid"),
        (&["--trusted-proxy-user", ""][..], "give a user name or a numeric uid"),
        (&["--max-connections-per-client", "many"][..], "from 4 to 1000000"),
        (&["--audit-days", "3651"][..], "from 1 to 3650"),
        (&["--audit-days", "half a year"][..], "from 1 to 3650"),
        (&["--max-connections", "0"][..], "from 16 to 1000000"),
        (&["--max-connections", "many"][..], "from 16 to 1000000"),
        (&["--fleet-prometheus", "ftp://prom:9090"][..], "use http://HOST:PORT or https://"),
        (&["--fleet-prometheus-ca", "/etc/ssl/ca.pem"][..], "--fleet-prometheus"),
        (&["--lab-runs-kept", "0"][..], "from 10 to 1000000"),
        (&["--lab-queue-per-user", "0"][..], "runs per user; use a whole number from 1 to 1000"),
        (&["--lab-queue-per-user", "1001"][..], "from 1 to 1000"),
        (&["--fleet-prometheus-token", "t"][..], "--fleet-prometheus"),
        (&["--public-url", "gpu1.example.com"][..], "not a public URL"),
        (&["--public-url", "https://gpu1/dashboard"][..], "root of its host"),
        (&["--trusted-proxy", "proxy.local"][..], "not an IP address or network"),
        (&["--session-lifetime", "1s"][..], "from 5m to 30d"),
        (&["--admin-session-lifetime", "forever"][..], "not a duration"),
        (&["--fleet-prometheus", "http://p:9090", "--fleet-prometheus-user", "ana"][..], "PASSWORD"),
        (&["--alert-webhook", "hooks.example.org/x"][..], "is not a URL"),
        (&["--alert-webhook", "ftp://hooks.example.org/x"][..], "http(s) URL with a host"),
    ] {
        let err = parse(args).unwrap_err().to_string();
        assert!(err.contains(expected), "{args:?}: {err}");
    }
}

#[test]
fn refusals_keep_their_messages() {
    assert_eq!(
        parse_interval("50ms").unwrap_err().to_string(),
        "'50ms' is out of range; the interval must be between 100ms and 60s"
    );
    assert_eq!(
        parse_simulate("65").unwrap_err(),
        ConfigError::NotACount { value: "65".into(), what: "GPUs", min: 1, max: 64 }
    );
    assert_eq!(
        parse_simulate("65").unwrap_err().to_string(),
        "'65' is not a number of GPUs; use a whole number from 1 to 64"
    );
    assert!(matches!(parse_session("soon"), Err(ConfigError::NotADuration { examples: "30m, 2h or 7d", .. })));
}

#[test]
fn read_only_and_the_auth_proxy_flags_make_their_config() {
    assert!(!Config::from(parse(&[]).unwrap()).read_only);
    assert!(Config::from(parse(&["--read-only"]).unwrap()).read_only);
    assert_eq!(Config::from(parse(&[]).unwrap()).proxy, None);
    let cli = parse(&[
        "--trusted-proxy",
        "127.0.0.1",
        "--auth-proxy-header",
        "X-Auth-Request-User",
        "--admin-group",
        "gpu-admins,root",
        "--operator-group",
        "gpu-users",
        "--default-role",
        "none",
        "--auth-proxy-sign-out",
        "/oauth2/sign_out",
    ])
    .unwrap();
    let proxy = Config::from(cli).proxy.unwrap();
    assert_eq!(
        (proxy.user_header.as_str(), proxy.groups_header.as_str()),
        ("x-auth-request-user", "x-forwarded-groups")
    );
    assert_eq!(proxy.roles.admin, ["gpu-admins", "root"]);
    assert_eq!((proxy.roles.operator.as_slice(), proxy.roles.others), (["gpu-users".to_owned()].as_slice(), None));
    assert_eq!(proxy.sign_out.as_deref(), Some("/oauth2/sign_out"));
}

#[test]
fn auth_proxy_flags_refuse_bad_values_and_need_the_header() {
    for (args, says) in [
        (&["--auth-proxy-header", "X User"][..], "not an HTTP header name"),
        (&["--auth-proxy-header", "X-User", "--admin-group", ""][..], "not a group name"),
        (&["--auth-proxy-header", "X-User", "--default-role", "admin"][..], "give viewer"),
        (&["--auth-proxy-header", "X-User", "--auth-proxy-sign-out", "javascript:x"][..], "not a sign-out address"),
        (&["--admin-group", "gpu-admins"][..], "--auth-proxy-header"),
        (&["--user-map", "users.toml"][..], "--auth-proxy-header"),
        (&["--default-role", "none"][..], "--auth-proxy-header"),
    ] {
        let err = parse(args).unwrap_err().to_string();
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn oidc_flags_make_their_config_with_the_same_group_rule() {
    assert_eq!(Config::from(parse(&[]).unwrap()).oidc, None);
    let cli = parse(&[
        "--oidc-issuer",
        "https://login.example.org/realms/lab",
        "--oidc-client-id",
        "gpudash",
        "--oidc-redirect-url",
        "https://gpu1.example.org/auth/oidc/callback",
        "--oidc-admin-group",
        "gpu-admins",
        "--operator-group",
        "gpu-users",
        "--oidc-scope",
        "groups",
        "--oidc-groups-claim",
        "realm_access.roles",
    ])
    .unwrap();
    let oidc = Config::from(cli).oidc.unwrap();
    assert_eq!((oidc.issuer.as_str(), oidc.client_id.as_str()), ("https://login.example.org/realms/lab", "gpudash"));
    assert_eq!(oidc.roles.admin, ["gpu-admins"], "--oidc-admin-group is --admin-group");
    assert_eq!(oidc.roles.operator, ["gpu-users"]);
    assert_eq!(
        (oidc.username_claim.as_str(), oidc.groups_claim.as_str()),
        ("preferred_username", "realm_access.roles")
    );
    assert_eq!(oidc.scopes, ["groups"]);
    assert_eq!(oidc.client_secret_file, None);
}

#[test]
fn oidc_flags_refuse_bad_values_and_come_together() {
    let issuer = ["--oidc-issuer", "https://login.example.org", "--oidc-client-id", "gpudash"];
    for (args, says) in [
        (&["--oidc-issuer", "https://login.example.org"][..], "--oidc-client-id"),
        (&issuer[..], "--oidc-redirect-url"),
        (&["--oidc-client-id", "gpudash"][..], "--oidc-issuer"),
        (&["--oidc-issuer", "login.example.org"][..], "not an issuer URL"),
        (&[&issuer[..], &["--oidc-redirect-url", "https://gpu1/"]].concat()[..], "/auth/oidc/callback"),
        (&[&issuer[..], &["--oidc-username-claim", "a b"]].concat()[..], "not a claim name"),
        (&[&issuer[..], &["--oidc-scope", "a\"b"]].concat()[..], "not a scope"),
    ] {
        let err = parse(args).unwrap_err().to_string();
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
