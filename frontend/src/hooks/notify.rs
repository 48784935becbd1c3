//! Browser notifications (the Web Notifications API) while the page is open: asking
//! for permission and raising one for an alert. Push through a service worker, which
//! would reach a closed page, is out of scope.

use leptos::{logging, prelude::*};
use shared::alerts::Alert;
use wasm_bindgen_futures::JsFuture;
use web_sys::{Notification, NotificationOptions, NotificationPermission};

use crate::state::alerts::notification_text;

/// What the browser lets the page do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    /// The browser has no Notification API.
    Unsupported,
    /// Not asked yet (the browser asks when a subscription is turned on).
    NotAsked,
    Granted,
    Denied,
}

impl Permission {
    /// The permission as the browser holds it now.
    pub fn current() -> Self {
        if !supported() {
            return Self::Unsupported;
        }
        match Notification::permission() {
            NotificationPermission::Granted => Self::Granted,
            NotificationPermission::Denied => Self::Denied,
            _ => Self::NotAsked,
        }
    }

    /// The word in `#alerts-notify-permission`'s `data-permission`.
    pub fn key(self) -> &'static str {
        match self {
            Self::Unsupported => "unsupported",
            Self::NotAsked => "default",
            Self::Granted => "granted",
            Self::Denied => "denied",
        }
    }

    /// What the page says about it.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Unsupported => {
                "This browser cannot show notifications: alerts show on this tab and in the badge only."
            }
            Self::NotAsked => "The browser will ask for permission when you turn one on.",
            Self::Granted => "Browser notifications are on while this page is open.",
            Self::Denied => {
                "This browser blocks notifications from gpudash: allow them in the site settings and reload, \
                 or alerts show on this tab and in the badge only."
            }
        }
    }
}

fn supported() -> bool {
    js_sys::Reflect::has(&window(), &"Notification".into()).unwrap_or(false)
}

/// Asks the browser for permission; call it from the click that turns a subscription on
/// (the request is made at once, within the click) and await the answer.
pub fn request() -> impl Future<Output = Permission> {
    let asked = match Permission::current() {
        Permission::NotAsked => Notification::request_permission().ok(),
        _ => None,
    };
    async move {
        if let Some(promise) = asked
            && let Err(err) = JsFuture::from(promise).await
        {
            logging::warn!("gpudash: asking for notification permission failed: {err:?}");
        }
        Permission::current()
    }
}

/// Raises a notification for `alert` when the browser allows it (title: severity, rule and
/// GPU; body: the alert's message). One per alert: the tag replaces a repeat.
pub fn show(alert: &Alert) {
    if Permission::current() != Permission::Granted {
        return;
    }
    let (title, body) = notification_text(alert);
    let options = NotificationOptions::new();
    options.set_body(&body);
    options.set_tag(&format!("gpudash-alert-{}", alert.id));
    if let Err(err) = Notification::new_with_options(&title, &options) {
        logging::warn!("gpudash: cannot show a notification: {err:?}");
    }
}
