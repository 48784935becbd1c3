//! What one delivery sends: the body and headers of each webhook format, and the
//! receiver's address as status shows it (without the tokens that often live in it).

use shared::alerts::{Alert, AlertState, Severity};

use crate::alerts::config::WebhookFormat;

/// One request's body and extra headers, built once per alert and webhook.
#[derive(Debug, Clone, PartialEq)]
pub struct Payload {
    pub content_type: &'static str,
    pub body: String,
    /// Header names and values, already plain visible ASCII.
    pub headers: Vec<(&'static str, String)>,
}

/// The payload `format` sends for `alert` on `host`.
pub fn payload(format: WebhookFormat, host: &str, alert: &Alert) -> Payload {
    match format {
        WebhookFormat::Generic => generic(host, alert),
        WebhookFormat::Slack => slack(host, alert),
        WebhookFormat::Ntfy => ntfy(host, alert),
    }
}

/// `{"version":1,"host":…,"state":"firing"|"resolved","alert":{…}}`: the alert as the API shows it.
fn generic(host: &str, alert: &Alert) -> Payload {
    let body = serde_json::json!({
        "version": 1,
        "host": host,
        "state": alert.state().as_str(),
        "alert": alert,
    });
    Payload { content_type: "application/json", body: body.to_string(), headers: Vec::new() }
}

/// `{"text": "…"}` in Slack's mrkdwn, which Mattermost and Rocket.Chat read too.
fn slack(host: &str, alert: &Alert) -> Payload {
    let mut text = match alert.state() {
        AlertState::Firing => format!(
            "{} *{}: {}* on GPU {} ({})",
            severity_emoji(alert.severity),
            alert.severity.as_str().to_uppercase(),
            mrkdwn(alert.rule.title()),
            alert.gpu_index,
            mrkdwn(host)
        ),
        AlertState::Resolved => format!(
            ":white_check_mark: *Resolved: {}* on GPU {} ({})",
            mrkdwn(alert.rule.title()),
            alert.gpu_index,
            mrkdwn(host)
        ),
    };
    text.push('\n');
    text.push_str(&mrkdwn(&alert.message));
    if alert.state() == AlertState::Firing && !alert.action.is_empty() {
        text.push_str("\n_What to do:_ ");
        text.push_str(&mrkdwn(&alert.action));
    }
    let mut who = Vec::new();
    if let Some(user) = &alert.user {
        who.push(format!("user {}", mrkdwn(user)));
    }
    if let Some(pid) = alert.pid {
        who.push(format!("pid {pid}"));
    }
    who.push(format!("GPU {}", mrkdwn(&alert.gpu_uuid)));
    text.push('\n');
    text.push_str(&who.join(" · "));
    if alert.simulated {
        text.push_str("\n(simulated GPU)");
    }
    Payload {
        content_type: "application/json",
        body: serde_json::json!({ "text": text }).to_string(),
        headers: Vec::new(),
    }
}

/// The message and what to do as the body; title, priority and tags as ntfy's headers.
fn ntfy(host: &str, alert: &Alert) -> Payload {
    let resolved = alert.state() == AlertState::Resolved;
    let mut body = alert.message.clone();
    if !resolved && !alert.action.is_empty() {
        body.push_str("\nWhat to do: ");
        body.push_str(&alert.action);
    }
    if let Some(user) = &alert.user {
        body.push_str("\nUser: ");
        body.push_str(user);
    }
    let title = format!(
        "{}{} on GPU {} ({host}){}",
        if resolved { "Resolved: " } else { "" },
        alert.rule.title(),
        alert.gpu_index,
        if alert.simulated { " [simulated]" } else { "" }
    );
    let (priority, tag) = if resolved {
        ("3", "white_check_mark")
    } else {
        match alert.severity {
            Severity::Critical => ("5", "rotating_light"),
            Severity::Warning => ("4", "warning"),
            Severity::Info => ("3", "information_source"),
        }
    };
    let tags = format!("{tag},{},{}", alert.severity.as_str(), alert.rule.as_str());
    Payload {
        content_type: "text/plain; charset=utf-8",
        body,
        headers: vec![("Title", header_text(&title)), ("Priority", priority.to_owned()), ("Tags", tags)],
    }
}

fn severity_emoji(severity: Severity) -> &'static str {
    match severity {
        Severity::Critical => ":rotating_light:",
        Severity::Warning => ":warning:",
        Severity::Info => ":information_source:",
    }
}

/// Slack's three control characters in text: `&`, `<` and `>`.
pub(crate) fn mrkdwn(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// A header value of visible ASCII: other characters (a host name in UTF-8, a newline) become '?'
/// or a space, so no header is refused and none can be split.
pub(crate) fn header_text(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            ' '..='~' => c,
            '\t' | '\n' | '\r' => ' ',
            _ => '?',
        })
        .collect()
}

/// The receiver as status and logs show it: scheme, host and port, with user info, path and
/// query (where tokens live) left out, e.g. `https://hooks.slack.com:443/…`.
pub fn target(url: &url::Url) -> String {
    let host = match url.host() {
        Some(url::Host::Ipv6(ip)) => format!("[{ip}]"),
        Some(host) => host.to_string(),
        None => String::new(),
    };
    let port = url.port_or_known_default().map(|p| format!(":{p}")).unwrap_or_default();
    let hidden = url.path() != "/" || url.query().is_some() || url.fragment().is_some();
    format!("{}://{host}{port}/{}", url.scheme(), if hidden { "…" } else { "" })
}

/// A webhook URL as written (in a file, on the command line), shown as [`target`] shows a parsed
/// one. Text that is no URL keeps only its scheme, host and a port of digits (a malformed port is
/// often what is wrong); text without `scheme://` shows as "…".
pub fn target_text(text: &str) -> String {
    let text = text.trim();
    if let Ok(url) = url::Url::parse(text)
        && url.host().is_some()
    {
        return target(&url);
    }
    let Some((scheme, rest)) = text.split_once("://") else { return "…".to_owned() };
    if scheme.is_empty() || scheme.len() > 16 || !scheme.chars().all(scheme_char) {
        return "…".to_owned();
    }
    let end = rest.find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace()).unwrap_or(rest.len());
    let authority = &rest[..end];
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, after)| after);
    let (host, port) = match host_port.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or((host_port, ""), |(ip, port)| (&host_port[..ip.len() + 2], port)),
        None => host_port.split_once(':').map_or((host_port, ""), |(host, port)| (host, port)),
    };
    let port = port.strip_prefix(':').unwrap_or(port);
    let port = if !port.is_empty() && port.len() <= 6 && port.bytes().all(|b| b.is_ascii_digit()) {
        format!(":{port}")
    } else {
        String::new()
    };
    let hidden = end < rest.len() || host_port.len() > host.len() + port.len() || authority.len() > host_port.len();
    format!("{scheme}://{host}{port}/{}", if hidden { "…" } else { "" })
}

/// `message` with every URL in it (`scheme://…` up to a space or a quote) shown as
/// [`target_text`] shows it: what the alerts file's refusals go through before anyone sees them.
pub fn redact_urls(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find("://") {
        let start = rest[..at].char_indices().rev().take_while(|&(_, c)| scheme_char(c)).last().map_or(at, |(i, _)| i);
        let after = &rest[at + 3..];
        let end = at
            + 3
            + after
                .find(|c: char| c.is_whitespace() || matches!(c, '\'' | '"' | '`' | '<' | '>'))
                .unwrap_or(after.len());
        out.push_str(&rest[..start]);
        out.push_str(&target_text(&rest[start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

fn scheme_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::alerts::Rule;

    pub(crate) fn alert() -> Alert {
        Alert {
            id: 7,
            rule: Rule::IdleHeld,
            severity: Severity::Warning,
            gpu_index: 2,
            gpu_uuid: "GPU-abc".into(),
            pid: Some(4242),
            user: Some("ana<&>".into()),
            message: "pid 4242 holds 40 GiB on GPU 2 and computes nothing for 31 min".into(),
            action: "ask ana to free it".into(),
            fired_ms: 1_000,
            resolved_ms: None,
            silenced: None,
            simulated: false,
            redacted: false,
        }
    }

    #[test]
    fn generic_carries_the_alert_as_the_api_shows_it() {
        let p = payload(WebhookFormat::Generic, "node-7", &alert());
        let v: serde_json::Value = serde_json::from_str(&p.body).unwrap();
        assert_eq!(
            (v["version"].as_u64(), v["host"].as_str(), v["state"].as_str()),
            (Some(1), Some("node-7"), Some("firing"))
        );
        assert_eq!(serde_json::from_value::<Alert>(v["alert"].clone()).unwrap(), alert());
    }

    #[test]
    fn slack_escapes_its_control_characters_and_says_what_to_do() {
        let p = payload(WebhookFormat::Slack, "node-7", &alert());
        let v: serde_json::Value = serde_json::from_str(&p.body).unwrap();
        let text = v["text"].as_str().unwrap();
        assert!(text.starts_with(":warning: *WARNING: Held but idle* on GPU 2 (node-7)\n"), "{text}");
        assert!(text.contains("user ana&lt;&amp;&gt;") && text.contains("_What to do:_ ask ana"), "{text}");
        let mut resolved = alert();
        resolved.resolved_ms = Some(2_000);
        let p = payload(WebhookFormat::Slack, "node-7", &resolved);
        assert!(p.body.contains(":white_check_mark: *Resolved: Held but idle*") && !p.body.contains("What to do"));
    }

    #[test]
    fn ntfy_headers_are_ascii_and_priorities_follow_severity() {
        let mut a = alert();
        a.severity = Severity::Critical;
        let p = payload(WebhookFormat::Ntfy, "nœud\n7", &a);
        assert_eq!(p.headers[0], ("Title", "Held but idle on GPU 2 (n?ud 7)".to_owned()));
        assert_eq!(p.headers[1], ("Priority", "5".to_owned()));
        assert_eq!(p.headers[2], ("Tags", "rotating_light,critical,idle_held".to_owned()));
        assert!(p.body.starts_with("pid 4242") && p.body.contains("\nWhat to do: ask ana"));
    }

    #[test]
    fn targets_leave_out_user_info_path_and_query() {
        let t = |s: &str| target(&url::Url::parse(s).unwrap());
        assert_eq!(t("https://bot:s3cret@hooks.example.org/T0/B1/XYZ?token=1"), "https://hooks.example.org:443/…");
        assert_eq!(t("http://127.0.0.1:9000/"), "http://127.0.0.1:9000/");
        assert_eq!(t("http://[::1]:8080/x"), "http://[::1]:8080/…");
    }

    #[test]
    fn written_urls_show_like_targets_even_when_they_are_no_urls() {
        let slack = "https://hooks.slack.com/services/T000/B000/XOXB-SECRET";
        assert_eq!(target_text(slack), "https://hooks.slack.com:443/…");
        assert_eq!(target_text("ftp://bot:pw@hooks.example.org/t/SECRET"), "ftp://hooks.example.org:21/…");
        assert_eq!(target_text("https://hooks.slack.com:99999/services/SECRET"), "https://hooks.slack.com:99999/…");
        assert_eq!(target_text("https://bot:SECRET@hooks example/x"), "https://hooks/…");
        assert_eq!(target_text("https://hooks:SECRET/x"), "https://hooks/…", "a port of letters is left out");
        assert_eq!(target_text("http://[::1:9/SECRET"), "http://[::1:9/…");
        assert_eq!(target_text("hooks.slack.com/services/SECRET"), "…");
        assert_eq!(target_text("xoxb-SECRET"), "…");
        let message =
            format!("url = '{slack}' is wrong; see `https://x.org/a?token=SECRET`, or \"ftp://u:SECRET@h/\".");
        let shown = redact_urls(&message);
        assert!(!shown.contains("SECRET"), "{shown}");
        assert_eq!(
            shown,
            "url = 'https://hooks.slack.com:443/…' is wrong; see `https://x.org:443/…`, or \"ftp://h:21/\"."
        );
        assert_eq!(redact_urls("no address here: line 3"), "no address here: line 3");
        assert_eq!(redact_urls("ünï ://SECRET/x"), "ünï …");
    }
}
