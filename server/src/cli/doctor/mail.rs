//! The `mail` check: the alerts file's `[smtp]` server, through which owners get job notices and
//! digests. With `--check-webhooks` it connects and greets it (TLS and sign-in as configured).

use team::alerts::AlertsConfig;

use super::Check;

pub(super) async fn smtp(alerts: &AlertsConfig, probe: bool) -> Check {
    let Some(smtp) = &alerts.jobs.smtp else {
        return Check::skip("mail", "no [smtp] in the alerts file: job notices and digests go only to job webhooks");
    };
    let server = smtp.server();
    if !probe {
        return Check::skip("mail", format!("{server} not probed: --check-webhooks also greets the mail server"));
    }
    match team::jobs::notify::mail::check(smtp).await {
        Ok(()) => Check::ok("mail", format!("{server} answered the greeting; e-mail goes out as {}", smtp.from)),
        Err(reason) => Check::warn(
            "mail",
            format!("the mail server cannot be reached: {reason}"),
            "check [smtp] url in the alerts file (smtps:// for TLS on 465, smtp://…?tls=required for STARTTLS on 587), \
             the firewall, and username and password_file if the server wants a sign-in",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::doctor::Status;

    fn with_smtp(port: u16) -> AlertsConfig {
        let text =
            format!("[smtp]\nurl = \"smtp://127.0.0.1:{port}\"\nfrom = \"g@gpu1.example.org\"\ntimeout = \"2s\"\n");
        AlertsConfig::parse(&text, "a.toml").expect("a valid alerts file")
    }

    #[tokio::test]
    async fn no_server_is_skipped_and_a_closed_port_warns() {
        assert_eq!(smtp(&AlertsConfig::default(), true).await.status, Status::Skip);
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        assert_eq!(smtp(&with_smtp(closed), false).await.status, Status::Skip, "not probed without the flag");
        let check = smtp(&with_smtp(closed), true).await;
        assert_eq!(check.status, Status::Warn, "{check:?}");
        assert!(check.summary.contains("smtp://127.0.0.1:"), "{}", check.summary);
    }
}
