//! The alerts file: defaults, what a file may change, and how a bad one is refused.

use super::*;

#[test]
fn an_empty_file_keeps_every_rule_on_with_its_defaults() {
    let config = AlertsConfig::parse("", "a.toml").unwrap();
    assert_eq!(config, AlertsConfig::default());
    assert!(Rule::ALL.iter().all(|r| config.rules.rule(*r).enabled));
}

#[test]
fn a_file_changes_only_what_it_names() {
    let text = r#"
        [rules.temperature]
        celsius = 80
        for = "10s"
        [rules.gpu_free]
        enabled = false
        [rules.xid]
        ignore = [43]
        quiet = "1m"
        [[webhook]]
        url = "http://127.0.0.1:9/hook"
        format = "slack"
        min_severity = "critical"
        timeout = "2s"
    "#;
    let config = AlertsConfig::parse(text, "a.toml").unwrap();
    assert_eq!(config.rules.temperature.settings.celsius, 80);
    assert_eq!(config.rules.temperature.config.hold, Duration::from_secs(10));
    assert!(!config.rules.gpu_free.config.enabled);
    assert_eq!(
        (config.rules.xid.settings.ignore.clone(), config.rules.xid.settings.quiet),
        (vec![43], Duration::from_secs(60))
    );
    assert_eq!(config.rules.memory_full.settings.percent, 95.0);
    let hook = &config.webhooks[0];
    assert_eq!(
        (hook.format, hook.min_severity, hook.timeout),
        (WebhookFormat::Slack, Severity::Critical, Duration::from_secs(2))
    );
}

#[test]
fn a_refused_value_names_its_line() {
    let text = "[rules.gpu_free]\nfor = \"1s\"\n\n[rules.temperature]\nfor = \"1m\"\ncelsius = 300\n";
    let message = AlertsConfig::parse(text, "a.toml").unwrap_err().to_string();
    assert!(message.ends_with("(line 6)"), "{message}");
    let text = "[[webhook]]\nurl = \"http://a/\"\n[[webhook]]\nurl = \"http://b/\"\ntimeout = \"5m\"\n";
    let message = AlertsConfig::parse(text, "a.toml").unwrap_err().to_string();
    assert!(message.ends_with("(line 5)"), "the second webhook's timeout: {message}");
    let message = AlertsConfig::parse("[rules.xid]\ncelsius = 90\n", "a.toml").unwrap_err().to_string();
    assert!(message.contains("has no key 'celsius'") && message.ends_with("(line 2)"), "{message}");
    // The job tables, with a comment after the header as the docs write them.
    let text = "[rules.xid]\nignore = [43]\n[jobs]   # what owners are told\ndigest = \"daily\"\nnotices_per_day = 0\n";
    let message = AlertsConfig::parse(text, "a.toml").unwrap_err().to_string();
    assert!(message.contains("notices_per_day = 0 is out of range") && message.ends_with("(line 5)"), "{message}");
    let text = "[smtp]\nurl = \"smtps://m.example.org\"\nfrom = \"nobody\"\n";
    let message = AlertsConfig::parse(text, "a.toml").unwrap_err().to_string();
    assert!(message.contains("[smtp] from") && message.ends_with("(line 3)"), "{message}");
    let text =
        "[jobs]\n[jobs.mail]\nana = \"x\"\n[smtp]\nurl = \"smtps://m.example.org\"\nfrom = \"g@m.example.org\"\n";
    let message = AlertsConfig::parse(text, "a.toml").unwrap_err().to_string();
    assert!(message.contains("[jobs.mail] ana is not an e-mail address") && message.ends_with("(line 3)"), "{message}");
    let text = "[[webhook]]\nurl = \"http://a/\"\nalerts = false\n";
    let message = AlertsConfig::parse(text, "a.toml").unwrap_err().to_string();
    assert!(message.contains("it would get nothing") && message.ends_with("(line 3)"), "{message}");
}

#[test]
fn bad_files_say_where_and_what_is_allowed() {
    let cases = [
        ("[rules.temperature]\ncelsius = 300", "use 30 to 120"),
        ("[rules.hot]\ncelsius = 90", "[rules.hot] is not a rule; use temperature, clock_events"),
        ("[rules.temperature]\npercent = 90", "it takes enabled, severity, for, celsius"),
        ("[rules.memory_full]\nfor = \"soon\"", "not a duration"),
        ("[rules.ecc]\nseverity = \"loud\"", "use info, warning or critical"),
        ("[rules.clock_events]\nreasons = [\"melting\"]", "is not a clock event; use"),
        ("[rules.xid]\nquiet = \"0s\"", "at least 1s"),
        ("[rules.xid]\nfor = \"1m\"", "for does not apply"),
        ("[[webhook]]\nurl = \"ftp://x/y\"", "http(s) URL"),
        ("[[webhook]]\nurl = \"http://x/\"\nformat = \"teams\"", "unknown variant `teams`"),
        ("[[webhook]]\nurl = \"http://x/\"\ntimeout = \"5m\"", "100ms to 60s"),
        ("[rules.temperature\n", "line 1"),
        ("[rules.ecc]\nenabled = \"yes\"", "[rules.ecc] enabled = \"yes\" is not true or false (line 2)"),
        ("[rules.temperature]\ncelsius = \"hot\"", "celsius = \"hot\" is not a number; use 30 to 120 (line 2)"),
        ("[rules.temperature]\ncelsius = 85.5", "not a whole number of degrees"),
        (
            "[rules]\ntemperature = 5",
            "[rules] temperature = 5 is not a table of settings; write [rules.temperature] (line 2)",
        ),
        ("[rules.xid]\nignore = [\"43\"]", "holds \"43\", which is not one of the XID codes"),
        ("[rules.xid]\nquiet = \"9d\"", "too long; use at most 7d"),
    ];
    for (text, expected) in cases {
        let message = AlertsConfig::parse(text, "alerts.toml").unwrap_err().to_string();
        assert!(message.contains(expected) && message.contains("alerts.toml"), "{text:?}: {message}");
    }
}

#[test]
fn the_oom_rule_takes_quiet_and_refuses_for() {
    let config = AlertsConfig::parse("[rules.oom]\nquiet = \"5m\"\nseverity = \"warning\"\n", "a.toml").unwrap();
    assert_eq!(config.rules.oom.settings.quiet, Duration::from_secs(300));
    assert_eq!(config.rules.xid.settings.quiet, Rules::default().xid.settings.quiet, "the XID rule's quiet is its own");
    assert_eq!(config.rules.oom.config.severity, Severity::Warning);
    let refused = AlertsConfig::parse("[rules.oom]\nfor = \"1m\"\n", "a.toml").unwrap_err().to_string();
    assert!(refused.contains("for does not apply"), "{refused}");
    let refused = AlertsConfig::parse("[rules.oom]\nquiet = \"0s\"\n", "a.toml").unwrap_err().to_string();
    assert!(refused.contains("[rules.oom] quiet = \"0s\" would resolve"), "{refused}");
    assert_eq!(
        Rules::default().oom.config,
        RuleConfig { enabled: true, severity: Severity::Critical, hold: Duration::ZERO }
    );
}

#[test]
fn refusals_never_quote_a_webhooks_token() {
    let secret = "T0AAA/B0BBB/XOXB-SECRET";
    let cases = [
        // The URL itself is bad: a port out of range, a scheme not http(s), no scheme at all.
        (format!("[[webhook]]\nurl = \"https://hooks.slack.com:99999/services/{secret}\"\n"), "invalid port number"),
        (format!("[[webhook]]\nurl = \"ftp://bot:pw@hooks.example.org/{secret}\"\n"), "not an http(s) URL"),
        (format!("[[webhook]]\nurl = \"hooks.slack.com/services/{secret}\"\n"), "not a URL"),
        // TOML syntax on the line holding the URL: toml's own message quotes that line.
        (format!("[[webhook]]\nurl = \"https://hooks.slack.com/services/{secret}\" format = \"slack\"\n"), "line 2"),
        (format!("[[webhook]]\nurl = \"https://hooks.slack.com/services/{secret}\n"), "line 2"),
        (format!("[[webhook]]\nurl = https://hooks.slack.com/services/{secret}\n"), "line 2"),
    ];
    for (text, expected) in &cases {
        let message = AlertsConfig::parse(text, "alerts.toml").unwrap_err().to_string();
        assert!(!message.contains("SECRET") && !message.contains("B0BBB"), "{text:?}: {message}");
        assert!(message.contains(expected) && message.contains("alerts.toml"), "{text:?}: {message}");
    }
    let message = AlertsConfig::parse(&cases[0].0, "alerts.toml").unwrap_err().to_string();
    assert!(message.contains("'https://hooks.slack.com:99999/…'") && message.ends_with("(line 2)"), "{message}");
    let message = parse_webhook_url(&format!("https://hooks.slack.com/services/{secret}?x")).unwrap();
    assert!(message.as_str().contains("SECRET"), "a good URL is kept whole: only messages hide it");
}
