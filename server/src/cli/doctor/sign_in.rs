//! The doctor's check of the OIDC provider (`--oidc-issuer`): its discovery document, keys and the
//! client secret read as the server reads them at start, and this machine's clock against the
//! provider's (ID tokens carry times; clocks far apart refuse good tokens or accept stale ones).

use std::time::{Duration, UNIX_EPOCH};

use base::clock::Clock;

use super::Check;
use crate::config::Config;
use team::auth::oidc::{self, Oidc};

/// Clocks further apart than this fail the check: ID tokens often live five minutes.
pub const SKEW_FAILS: Duration = Duration::from_secs(60);
/// Further apart than this, a warning.
pub const SKEW_WARNS: Duration = Duration::from_secs(5);

pub(super) async fn oidc_provider(config: &Config) -> Check {
    let Some(settings) = config.oidc.clone() else {
        return Check::skip("oidc", "no OIDC provider (--oidc-issuer): people sign in with tokens or an auth proxy");
    };
    let issuer = settings.issuer.clone();
    let discovered = match Oidc::discover(settings, Clock::system()).await {
        Ok(discovered) => discovered,
        Err(e) => {
            return Check::fail(
                "oidc",
                format!("{e}: the dashboard would not start"),
                "check --oidc-issuer (the provider's issuer, exactly as its discovery document names it), the \
                 network path to it, and --oidc-client-secret-file",
            );
        }
    };
    let provider = discovered.provider_name();
    match skew(&issuer).await {
        Ok(skew) => judge(&provider, &discovered.config().redirect_url, skew),
        Err(reason) => Check::warn(
            "oidc",
            format!("the provider {provider} answers discovery, but its clock could not be read: {reason}"),
            "make sure this machine's clock is synchronized (chrony, systemd-timesyncd)",
        ),
    }
}

/// The verdict on a provider that answered, with the clocks `skew` seconds apart (signed: positive when
/// the provider is ahead).
fn judge(provider: &str, redirect: &url::Url, skew: i64) -> Check {
    let apart = Duration::from_secs(skew.unsigned_abs());
    let said = format!(
        "discovery, keys and client secret of {provider} read; sign-ins come back to {redirect}; clocks {} s apart",
        skew
    );
    if apart > SKEW_FAILS {
        return Check::fail(
            "oidc",
            format!(
                "{said}: over {} s, ID tokens would be refused as expired or from the future",
                SKEW_FAILS.as_secs()
            ),
            "synchronize the clocks of this machine and the provider (chrony, systemd-timesyncd)",
        );
    }
    if apart > SKEW_WARNS {
        return Check::warn(
            "oidc",
            format!("{said}: more than {} s", SKEW_WARNS.as_secs()),
            "synchronize this machine's clock (chrony, systemd-timesyncd)",
        );
    }
    Check::ok("oidc", said)
}

/// The provider's clock minus this machine's, in seconds, from the `Date` of its discovery answer
/// against the middle of the request (HTTP dates have whole seconds).
async fn skew(issuer: &str) -> Result<i64, String> {
    let client = oidc::http_client().map_err(|e| e.to_string())?;
    let url = format!("{}/.well-known/openid-configuration", issuer.trim_end_matches('/'));
    // This machine's wall clock is what is judged: the system's, not one a test could move.
    let clock = Clock::system();
    let (sent, started) = (UNIX_EPOCH + Duration::from_millis(clock.now_ms()), clock.now());
    let answer = client.get(url).send().await.map_err(|e| e.without_url().to_string())?;
    let took = clock.now().saturating_duration_since(started);
    let date = answer.headers().get(reqwest::header::DATE).ok_or("its answer has no Date header")?;
    let theirs = httpdate::parse_http_date(date.to_str().map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    let ours = sent + took / 2;
    Ok(match theirs.duration_since(ours) {
        Ok(ahead) => ahead.as_secs_f64().round() as i64,
        Err(behind) => -(behind.duration().as_secs_f64().round() as i64),
    })
}

#[cfg(test)]
mod tests {
    use super::super::Status;
    use super::*;

    #[test]
    fn clocks_far_apart_fail_and_a_little_apart_warn() {
        let back: url::Url = "https://gpu1.example.org/auth/oidc/callback".parse().unwrap();
        assert_eq!(judge("login.example.org", &back, 0).status, Status::Ok);
        assert_eq!(judge("login.example.org", &back, -3).status, Status::Ok);
        assert_eq!(judge("login.example.org", &back, 30).status, Status::Warn);
        let far = judge("login.example.org", &back, -61);
        assert_eq!(far.status, Status::Fail);
        assert!(far.summary.contains("clocks -61 s apart: over 60 s"), "{}", far.summary);
    }

    #[tokio::test]
    async fn without_a_provider_the_check_is_skipped_and_an_unreachable_one_fails() {
        let mut config =
            Config::from(<crate::cli::Cli as clap::Parser>::try_parse_from(["gpudash"]).expect("defaults parse"));
        assert_eq!(oidc_provider(&config).await.status, Status::Skip);
        config.oidc = Some(oidc::OidcConfig {
            issuer: "http://127.0.0.1:9".to_owned(),
            client_id: "gpudash".to_owned(),
            client_secret_file: None,
            redirect_url: "http://127.0.0.1:7070/auth/oidc/callback".parse().unwrap(),
            username_claim: oidc::DEFAULT_USERNAME_CLAIM.to_owned(),
            groups_claim: oidc::DEFAULT_GROUPS_CLAIM.to_owned(),
            scopes: Vec::new(),
            roles: team::auth::GroupRoles::default(),
            user_map: team::auth::names::UserMap::default(),
        });
        let check = oidc_provider(&config).await;
        assert_eq!(check.status, Status::Fail);
        assert!(check.summary.contains("cannot use the OIDC provider http://127.0.0.1:9"), "{}", check.summary);
    }
}
