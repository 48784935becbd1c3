//! The Jobs tab's "Your notices": whether the caller gets an end-of-job notice when a job of
//! theirs ends with a poor verdict, and the digest; where their e-mail goes; what the server
//! sends. `GET`/`PUT /api/jobs/notices`; shown only to a caller who owns jobs here (signed in,
//! or the local user of a server without tokens).

use leptos::{prelude::*, task::spawn_local};
use shared::jobs::notices::{DigestEvery, NoticeSettings};

use crate::hooks::api::{get_json, put_json};
use crate::hooks::session::Session;

/// What the summary line says of the caller's choice.
pub fn summary(settings: &NoticeSettings) -> String {
    let c = &settings.channels;
    if !c.any() {
        return "Notices: this server sends none".to_owned();
    }
    let notices = c.notices && settings.choice.notices;
    let digest = c.digest != DigestEvery::Off && settings.choice.digest;
    match (notices, digest) {
        (true, true) => format!("Notices: on, {} digest", c.digest.name()),
        (true, false) => "Notices: on, no digest".to_owned(),
        (false, true) => format!("Notices: off, {} digest", c.digest.name()),
        (false, false) => "Notices: off".to_owned(),
    }
}

/// Where the caller's messages go, in words.
pub fn channels_text(settings: &NoticeSettings) -> String {
    let c = &settings.channels;
    let mut parts = Vec::new();
    match (&settings.address, c.mail) {
        (Some(address), true) => parts.push(format!("E-mail goes to {address}.")),
        (None, true) => parts.push("No e-mail address is known for you here.".to_owned()),
        _ => {}
    }
    if c.webhooks > 0 {
        parts.push(format!(
            "{} team webhook{} get{} them too.",
            c.webhooks,
            if c.webhooks == 1 { "" } else { "s" },
            if c.webhooks == 1 { "s" } else { "" }
        ));
    }
    if !c.any() {
        parts.push(
            "This server sends no job messages: its alerts file sets no [smtp] server and no webhook with jobs = true."
                .to_owned(),
        );
    } else if c.notices && c.digest != DigestEvery::Off {
        parts.push(format!("At most {} notices a day; more are counted in the digest.", c.notices_per_day));
    } else if c.notices {
        parts.push(format!("At most {} notices a day.", c.notices_per_day));
    }
    parts.join(" ")
}

#[component]
pub fn JobNoticesPanel() -> impl IntoView {
    let session = expect_context::<Session>();
    let settings = RwSignal::new(None::<NoticeSettings>);
    let error = RwSignal::new(None::<String>);
    spawn_local(async move {
        // Refused for a visitor who owns nothing here: the panel stays hidden.
        if let Ok(got) = get_json::<NoticeSettings>("/api/jobs/notices").await {
            settings.try_set(Some(got));
        }
    });
    let change = move |field: &'static str, on: bool| {
        spawn_local(async move {
            let body = serde_json::json!({ field: on });
            match put_json::<NoticeSettings>("/api/jobs/notices", &body).await {
                Ok(got) => {
                    settings.try_set(Some(got));
                    error.try_set(None);
                }
                Err(failure) => {
                    error.try_set(Some(failure.message.clone()));
                    // The box shows the stored choice again, not the click that was refused.
                    settings.try_update(|_| {});
                    session.unauthorized(&failure);
                }
            }
        });
    };
    let fixed = move || session.read_only();
    view! {
        <Show when=move || settings.with(Option::is_some)>
            <details id="job-notices" class="job-notices">
                <summary>{move || settings.with(|s| s.as_ref().map(summary).unwrap_or_default())}</summary>
                <p class="job-notices-where">{move || settings.with(|s| s.as_ref().map(channels_text).unwrap_or_default())}</p>
                <label class="job-notices-choice">
                    <input
                        id="job-notices-notices"
                        type="checkbox"
                        prop:checked=move || settings.with(|s| s.as_ref().is_some_and(|s| s.choice.notices))
                        disabled=move || fixed() || settings.with(|s| s.as_ref().is_some_and(|s| !s.channels.notices))
                        on:change=move |ev| change("notices", event_target_checked(&ev))
                    />
                    " Tell me when a job of mine ends with a poor verdict"
                </label>
                <label class="job-notices-choice">
                    <input
                        id="job-notices-digest"
                        type="checkbox"
                        prop:checked=move || settings.with(|s| s.as_ref().is_some_and(|s| s.choice.digest))
                        disabled=move || fixed()
                            || settings.with(|s| s.as_ref().is_some_and(|s| s.channels.digest == DigestEvery::Off))
                        on:change=move |ev| change("digest", event_target_checked(&ev))
                    />
                    {move || settings.with(|s| match s.as_ref().map(|s| &s.channels) {
                        Some(c) if c.digest != DigestEvery::Off => {
                            format!(" Send me the digest of my jobs ({})", c.digest_when)
                        }
                        _ => " Send me the digest of my jobs (this server sends none)".to_owned(),
                    })}
                </label>
                <Show when=move || error.with(Option::is_some)>
                    <p class="lab-error" role="alert">{move || error.get().unwrap_or_default()}</p>
                </Show>
            </details>
        </Show>
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::jobs::notices::{NoticeChannels, NoticeChoice};

    fn settings(mail: bool, webhooks: usize, digest: DigestEvery, choice: NoticeChoice) -> NoticeSettings {
        NoticeSettings {
            owner: "ana".into(),
            choice,
            address: mail.then(|| "ana@lab.example.org".to_owned()),
            channels: NoticeChannels {
                notices: true,
                digest,
                digest_when: "daily at 08:00 UTC".into(),
                notices_per_day: 5,
                mail,
                webhooks,
            },
        }
    }

    #[test]
    fn the_summary_follows_the_choice_and_what_the_server_sends() {
        let on = NoticeChoice::default();
        assert_eq!(summary(&settings(true, 0, DigestEvery::Daily, on)), "Notices: on, daily digest");
        let off = NoticeChoice { notices: false, digest: true };
        assert_eq!(summary(&settings(true, 0, DigestEvery::Weekly, off)), "Notices: off, weekly digest");
        assert_eq!(summary(&settings(true, 0, DigestEvery::Off, on)), "Notices: on, no digest");
        assert_eq!(summary(&settings(false, 0, DigestEvery::Daily, on)), "Notices: this server sends none");
    }

    #[test]
    fn where_messages_go_is_said_plainly() {
        let s = settings(true, 2, DigestEvery::Daily, NoticeChoice::default());
        let text = channels_text(&s);
        assert!(text.starts_with("E-mail goes to ana@lab.example.org. 2 team webhooks get them too."), "{text}");
        assert!(text.ends_with("At most 5 notices a day; more are counted in the digest."));
        let none = channels_text(&settings(false, 0, DigestEvery::Daily, NoticeChoice::default()));
        assert!(none.contains("no [smtp] server and no webhook with jobs = true"), "{none}");
        let one = channels_text(&NoticeSettings {
            address: None,
            ..settings(true, 1, DigestEvery::Off, NoticeChoice::default())
        });
        assert!(one.ends_with("At most 5 notices a day."), "no digest to count them in: {one}");
        assert!(one.starts_with("No e-mail address is known for you here. 1 team webhook gets them too."), "{one}");
    }
}
