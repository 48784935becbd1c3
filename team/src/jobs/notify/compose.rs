//! The words owners get: an end-of-job notice for a poor verdict and the digest of a period,
//! as plain text (e-mail, ntfy), Slack's mrkdwn and the generic webhook's JSON. The verdicts'
//! own words (`shared::jobs`) carry the judgement; this only arranges them.

use serde::Serialize;
use shared::jobs::{Grade, JobReport, gpu_hours};
use shared::time::{duration, utc_minute};

use crate::alerts::config::WebhookFormat;
use crate::alerts::deliver::format::{Payload, header_text, mrkdwn};

const GIB: f64 = (1u64 << 30) as f64;

/// Most poor jobs a digest names; the rest are counted.
pub const DIGEST_NAMED: usize = 10;

/// What a message is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    JobNotice,
    JobDigest,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::JobNotice => "job_notice",
            Kind::JobDigest => "job_digest",
        }
    }
}

/// One message to one owner, before it is shaped for a channel.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub kind: Kind,
    pub owner: String,
    pub subject: String,
    /// Plain text, lines of at most about 100 characters.
    pub text: String,
    /// The generic webhook's `job` or `digest` member.
    pub detail: serde_json::Value,
}

/// Where the message is from and where the page lives.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Origin {
    pub host: String,
    /// The page's address (the first `--public-url`), for links; none without one.
    pub page: Option<String>,
    pub simulated: bool,
}

impl Origin {
    fn link(&self, fragment: &str) -> Option<String> {
        self.page.as_ref().map(|page| format!("{}/#{fragment}", page.trim_end_matches('/')))
    }

    fn suffix(&self) -> &'static str {
        if self.simulated { " [simulated GPUs]" } else { "" }
    }
}

/// A period's sums for one owner.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DigestSummary {
    pub from_ms: u64,
    pub to_ms: u64,
    pub jobs: usize,
    pub held_gpu_hours: f64,
    pub idle_gpu_hours: f64,
    pub energy_kwh: f64,
    /// Jobs by grade: poor, hint, good, unjudged.
    pub poor: usize,
    pub hint: usize,
    pub good: usize,
    pub unjudged: usize,
    /// Notices held back by `notices_per_day` since the last digest.
    pub held_back: u64,
}

/// The notice for a job that ended with a poor verdict.
pub fn notice(origin: &Origin, report: &JobReport) -> Message {
    let job = &report.job;
    let poor: Vec<_> = report.verdicts.iter().filter(|v| v.grade == Grade::Poor).collect();
    let headline = poor.first().map_or("a poor verdict", |v| v.words.as_str());
    let subject =
        format!("gpudash on {}: job {} ({}) ended: {headline}{}", origin.host, job.id, job.name, origin.suffix());
    let mut text = format!(
        "Your job {} \"{}\" ({}, GPU {}) on {} ended {} after {}.\n\n",
        job.id,
        job.name,
        job.runtime.name(),
        job.gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
        origin.host,
        job.ended_ms.map_or_else(|| "just now".to_owned(), |at| format!("at {}", utc_minute(at))),
        duration(job.watched_ms()),
    );
    text.push_str("Verdict:\n");
    for verdict in &poor {
        text.push_str(&format!("- {}\n", verdict.words));
        let evidence: Vec<String> = verdict.evidence.iter().map(|e| format!("{} {}", e.name, e.value)).collect();
        if !evidence.is_empty() {
            text.push_str(&format!("  ({})\n", evidence.join(", ")));
        }
    }
    text.push_str("\nWhat it used:\n");
    for line in figures(report) {
        text.push_str(&format!("- {line}\n"));
    }
    text.push_str(&footer(origin, &format!("jobs?job={}", job.id), "a job of yours ended with a poor verdict"));
    let detail = serde_json::to_value(report).unwrap_or_default();
    Message { kind: Kind::JobNotice, owner: job.owner.clone(), subject, text, detail }
}

/// The digest of `owner`'s `reports` (the jobs that ended in the period), oldest first.
pub fn digest(origin: &Origin, owner: &str, summary: &DigestSummary, reports: &[JobReport]) -> Message {
    let (from, to) = (utc_minute(summary.from_ms), utc_minute(summary.to_ms));
    let subject = format!(
        "gpudash on {}: your {} job{} from {from} to {to}{}",
        origin.host,
        summary.jobs,
        if summary.jobs == 1 { "" } else { "s" },
        origin.suffix()
    );
    let idle_share = if summary.held_gpu_hours > 0.0 { summary.idle_gpu_hours / summary.held_gpu_hours } else { 0.0 };
    let mut text = format!(
        "{owner}, from {from} to {to} on {}:\n\n\
         - {} job{} ended: {} poor, {} with a hint, {} good, {} too short to judge\n\
         - {} held, {} of it idle ({:.0}%)\n\
         - {:.3} kWh of GPU energy\n",
        origin.host,
        summary.jobs,
        if summary.jobs == 1 { "" } else { "s" },
        summary.poor,
        summary.hint,
        summary.good,
        summary.unjudged,
        gpu_hours(summary.held_gpu_hours * 3600.0),
        gpu_hours(summary.idle_gpu_hours * 3600.0),
        idle_share * 100.0,
        summary.energy_kwh,
    );
    if summary.held_back > 0 {
        text.push_str(&format!(
            "- {} end-of-job notice{} held back (more than the day's limit)\n",
            summary.held_back,
            if summary.held_back == 1 { " was" } else { "s were" }
        ));
    }
    let mut poor: Vec<&JobReport> = reports.iter().filter(|r| r.grade == Grade::Poor).collect();
    poor.sort_by(|a, b| b.job.figures.held_s.total_cmp(&a.job.figures.held_s));
    if !poor.is_empty() {
        text.push_str("\nJobs with a poor verdict, most GPU time first:\n");
        for report in poor.iter().take(DIGEST_NAMED) {
            let words: Vec<&str> =
                report.verdicts.iter().filter(|v| v.grade == Grade::Poor).map(|v| v.words.as_str()).collect();
            text.push_str(&format!("- job {} \"{}\": {}\n", report.job.id, report.job.name, words.join("; ")));
        }
        if poor.len() > DIGEST_NAMED {
            text.push_str(&format!("- and {} more\n", poor.len() - DIGEST_NAMED));
        }
    }
    text.push_str(&footer(origin, &format!("jobs?owner={}", shared::text::url_encode(owner)), "digests are on"));
    let detail = serde_json::to_value(summary).unwrap_or_default();
    Message { kind: Kind::JobDigest, owner: owner.to_owned(), subject, text, detail }
}

/// A report's figures as short lines.
fn figures(report: &JobReport) -> Vec<String> {
    let f = &report.job.figures;
    let mut lines = vec![format!(
        "held {}, {} of it idle ({:.0}%)",
        gpu_hours(f.held_s),
        gpu_hours(f.idle_s),
        f.idle_share() * 100.0
    )];
    let share = |v: Option<f64>| v.map_or_else(|| "unknown".to_owned(), |v| format!("{:.0}%", v * 100.0));
    lines.push(format!(
        "SM activity {} (p95 {}), tensor {}, DRAM {}{}",
        share(f.sm_active_mean),
        share(f.sm_active_p95),
        share(f.tensor_active_mean),
        share(f.dram_active_mean),
        if f.shared_s > 0.0 { " (its share of a GPU it shared)" } else { "" }
    ));
    lines.push(format!(
        "memory peak {:.1} GiB of {:.0} GiB",
        f.memory_peak_bytes as f64 / GIB,
        f.memory_capacity_bytes as f64 / GIB
    ));
    let mut energy = format!("energy {:.3} kWh", report.energy_kwh);
    if let Some(cost) = &report.cost {
        energy.push_str(&format!(", {cost}"));
    }
    if let Some(co2) = report.co2_kg {
        energy.push_str(&format!(", {co2:.2} kg CO2"));
    }
    lines.push(energy);
    lines
}

fn footer(origin: &Origin, fragment: &str, why: &str) -> String {
    let mut text = String::from("\n");
    if let Some(link) = origin.link(fragment) {
        text.push_str(&format!("See it: {link}\n"));
    }
    text.push_str(&format!("You get this because {why}; switch it off on the Jobs tab of gpudash.\n"));
    if origin.simulated {
        text.push_str("(These are simulated GPUs: a demo or a test, not real work.)\n");
    }
    text
}

/// `message` as `format` sends it.
pub fn payload(format: WebhookFormat, origin: &Origin, message: &Message) -> Payload {
    match format {
        WebhookFormat::Generic => {
            let member = match message.kind {
                Kind::JobNotice => "job",
                Kind::JobDigest => "digest",
            };
            let mut body = serde_json::json!({
                "version": 1,
                "host": origin.host,
                "kind": message.kind.name(),
                "owner": message.owner,
                "subject": message.subject,
                "text": message.text,
                "simulated": origin.simulated,
            });
            body[member] = message.detail.clone();
            Payload { content_type: "application/json", body: body.to_string(), headers: Vec::new() }
        }
        WebhookFormat::Slack => {
            let icon = match message.kind {
                Kind::JobNotice => ":hourglass:",
                Kind::JobDigest => ":bar_chart:",
            };
            let text = format!(
                "{icon} *{}* (for {})\n```{}```",
                mrkdwn(&message.subject),
                mrkdwn(&message.owner),
                mrkdwn(&message.text).replace("```", "'''")
            );
            Payload {
                content_type: "application/json",
                body: serde_json::json!({ "text": text }).to_string(),
                headers: Vec::new(),
            }
        }
        WebhookFormat::Ntfy => Payload {
            content_type: "text/plain; charset=utf-8",
            body: message.text.clone(),
            headers: vec![
                ("Title", header_text(&message.subject)),
                ("Priority", "3".to_owned()),
                ("Tags", format!("gpudash,{}", message.kind.name())),
            ],
        },
    }
}

#[cfg(test)]
#[path = "compose_tests.rs"]
mod tests;
