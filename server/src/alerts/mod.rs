//! Alerts: rules evaluated on every sample (off the sampling threads), alerts stored in the
//! history database, and deliveries (webhooks, the page's notifications) that never block sampling.

pub mod config;
pub mod deliver;

pub use config::{AlertsConfig, AlertsFileError, Rules, Webhook, WebhookFormat};
pub use deliver::Deliveries;
