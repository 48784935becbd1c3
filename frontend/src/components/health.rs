//! A card's health section: modes, ECC, retired pages and remapped rows, BAR1,
//! NVLink, PCIe traffic, energy and recent XID errors, folded in a `<details>`;
//! and the MIG instances a GPU is split into.

use leptos::prelude::*;
use shared::{
    health::{DeviceHealth, EccCounts, RemappedRows, RetiredPages, XidEvent},
    units::{format_bytes, or_na},
};

use crate::{
    components::format::{self, na, on_off},
    state::DashboardState,
};

/// `details.gpu-health` of GPU `index`; the summary line flags what needs a look.
#[component]
pub fn HealthDetails(state: ReadSignal<DashboardState>, index: u32) -> impl IntoView {
    let health = Memo::new(move |_| state.with(|s| s.health(index).cloned()));
    let nvlink_links = Memo::new(move |_| state.with(|s| s.device(index).map_or(0, |d| d.info.nvlink_links)));
    let field = move |f: fn(&DeviceHealth) -> String| move || health.with(|h| h.as_ref().map_or_else(na, f));
    let nvlink = move || health.with(|h| h.as_ref().map_or_else(na, |h| nvlink_text(h, nvlink_links.get())));
    let xids = move || health.with(|h| h.as_ref().map(|h| h.xids.clone()).unwrap_or_default());
    let has_xids = move || health.with(|h| h.as_ref().is_some_and(|h| !h.xids.is_empty()));

    view! {
        <details class="gpu-health" class:has-xids=has_xids>
            <summary>
                <span class="health-title">"Health"</span>
                <span class="health-summary">{move || health.with(|h| summary(h.as_ref(), nvlink_links.get()))}</span>
                <Show when=has_xids>
                    <span class="badge badge-xid">{move || format!("{} XID", xids().len())}</span>
                </Show>
            </summary>
            <dl class="health-grid">
                <Row label="Persistence" class="health-persistence" value=field(|h| on_off(h.persistence_mode)) />
                <Row
                    label="Compute mode"
                    class="health-compute-mode"
                    value=field(|h| or_na(h.compute_mode.clone(), |m| m.replace('_', " ")))
                />
                <Row label="MIG" class="health-mig" value=field(mig_text) />
                <Row label="ECC" class="health-ecc" value=field(|h| on_off(h.ecc_enabled)) />
                <Row label="ECC volatile" class="health-ecc-volatile" value=field(|h| ecc_text(h.ecc_volatile)) />
                <Row label="ECC aggregate" class="health-ecc-aggregate" value=field(|h| ecc_text(h.ecc_aggregate)) />
                <Row label="Retired pages" class="health-retired" value=field(|h| retired_text(h.retired_pages)) />
                <Row label="Remapped rows" class="health-remapped" value=field(|h| remapped_text(h.remapped_rows)) />
                <Row label="BAR1" class="health-bar1" value=field(bar1_text) />
                <Row label="NVLink" class="health-nvlink" value=nvlink />
                <Row label="PCIe TX / RX" class="health-pcie-throughput" value=field(pcie_traffic_text) />
                <Row label="Energy" class="health-energy" value=field(|h| or_na(h.energy_mj, format::energy)) />
                <Row label="Read" class="health-read" value=field(read_text) />
            </dl>
            <div class="xids">
                <span class="health-label">"XID errors"</span>
                <Show when=has_xids fallback=|| view! { <span class="xid-none">"none"</span> }>
                    <ul class="xid-list">
                        {move || xids().into_iter().rev().map(|x| view! { <XidItem xid=x /> }).collect_view()}
                    </ul>
                </Show>
            </div>
        </details>
    }
}

/// `ul.mig-instances`: the GPU instances of a MIG-enabled GPU, shown on the card itself.
#[component]
pub fn MigInstances(state: ReadSignal<DashboardState>, index: u32) -> impl IntoView {
    let instances = Memo::new(move |_| {
        state.with(|s| {
            s.health(index).filter(|h| h.mig_enabled == Some(true)).map(|h| h.mig_instances.clone()).unwrap_or_default()
        })
    });
    view! {
        <Show when=move || !instances.with(Vec::is_empty)>
            <ul class="mig-instances" aria-label="MIG instances">
                {move || {
                    instances
                        .get()
                        .into_iter()
                        .map(|m| {
                            let memory = format!(
                                "{} / {}",
                                or_na(m.memory_used, format_bytes),
                                or_na(m.memory_total, format_bytes),
                            );
                            view! {
                                <li class="mig-instance" title=m.uuid>
                                    <span class="mig-name">{format!("MIG {} · {}", m.index, m.name)}</span>
                                    <span class="mig-memory">{memory}</span>
                                </li>
                            }
                        })
                        .collect_view()
                }}
            </ul>
        </Show>
    }
}

#[component]
fn Row(label: &'static str, class: &'static str, value: impl Fn() -> String + Send + Sync + 'static) -> impl IntoView {
    view! {
        <div>
            <dt class="health-label">{label}</dt>
            <dd class=class>{value}</dd>
        </div>
    }
}

#[component]
fn XidItem(xid: XidEvent) -> impl IntoView {
    view! {
        <li class="xid">
            <time class="xid-time">{format::stamp(xid.timestamp_ms as f64)}</time>
            <span class="xid-code">{format!("XID {}", xid.code)}</span>
            <span class="xid-meaning">{xid.meaning}</span>
        </li>
    }
}

/// The closed section's one line: "ECC on · 2 uncorrected · 4 uncorrected in its lifetime · NVLink 18/18".
/// The first count is the volatile one (since the driver loaded), the one the GPU's badge names
/// (`shared::severity`); the aggregate count already holds it, so the two are never added.
fn summary(health: Option<&DeviceHealth>, nvlink_links: u32) -> String {
    let Some(h) = health else {
        return "no reading".to_owned();
    };
    let mut parts = vec![format!("ECC {}", on_off(h.ecc_enabled))];
    let (volatile, lifetime) = (h.ecc_volatile.uncorrected.unwrap_or(0), h.ecc_aggregate.uncorrected.unwrap_or(0));
    if volatile > 0 {
        parts.push(format!("{volatile} uncorrected"));
    }
    if lifetime > volatile {
        parts.push(format!("{lifetime} uncorrected in its lifetime"));
    }
    if nvlink_links > 0 || !h.nvlinks.is_empty() {
        parts.push(format!("NVLink {}", nvlink_text(h, nvlink_links)));
    }
    if h.mig_enabled == Some(true) {
        parts.push("MIG".to_owned());
    }
    parts.join(" · ")
}

fn mig_text(h: &DeviceHealth) -> String {
    match (h.mig_enabled, h.mig_pending) {
        (Some(true), _) => format!("on, {} instances", h.mig_instances.len()),
        (_, Some(true)) => "pending (reset to apply)".to_owned(),
        (enabled, _) => on_off(enabled),
    }
}

fn ecc_text(counts: EccCounts) -> String {
    format!("{} corrected, {} uncorrected", or_na(counts.corrected, count), or_na(counts.uncorrected, count))
}

fn retired_text(pages: RetiredPages) -> String {
    if pages.single_bit.is_none() && pages.double_bit.is_none() {
        return na();
    }
    let pending = if pages.pending == Some(true) { ", pending" } else { "" };
    format!("{} single-bit, {} double-bit{pending}", or_na(pages.single_bit, count), or_na(pages.double_bit, count))
}

fn remapped_text(rows: RemappedRows) -> String {
    if rows.correctable.is_none() && rows.uncorrectable.is_none() {
        return na();
    }
    let mut text =
        format!("{} correctable, {} uncorrectable", or_na(rows.correctable, count), or_na(rows.uncorrectable, count));
    if rows.pending == Some(true) {
        text.push_str(", pending");
    }
    if rows.failed == Some(true) {
        text.push_str(", FAILED");
    }
    text
}

fn bar1_text(h: &DeviceHealth) -> String {
    match (h.bar1_used, h.bar1_total) {
        (None, None) => na(),
        (used, total) => format!("{} / {}", or_na(used, format_bytes), or_na(total, format_bytes)),
    }
}

/// Active links over all links: "18 / 18 active", or "none" for a board without NVLink.
fn nvlink_text(h: &DeviceHealth, links: u32) -> String {
    let total = links.max(u32::try_from(h.nvlinks.len()).unwrap_or(u32::MAX));
    if total == 0 {
        return "none".to_owned();
    }
    let active = h.nvlinks.iter().filter(|l| l.active).count();
    format!("{active} / {total} active")
}

fn pcie_traffic_text(h: &DeviceHealth) -> String {
    let traffic = match (h.pcie_tx_bytes_per_s, h.pcie_rx_bytes_per_s) {
        (None, None) => return na(),
        (tx, rx) => format!("{} / {}", or_na(tx, format::rate), or_na(rx, format::rate)),
    };
    match h.pcie_replays {
        Some(replays) if replays > 0 => format!("{traffic}, {replays} replays"),
        _ => traffic,
    }
}

/// How old the facts are beside the traffic and energy figures, read on every pass.
fn read_text(h: &DeviceHealth) -> String {
    match h.facts_ms {
        Some(facts) if h.timestamp_ms.saturating_sub(facts) >= 1000 => format!(
            "PCIe and energy now; the rest {} s earlier (every 30 s, at once after an XID)",
            h.timestamp_ms.saturating_sub(facts) / 1000
        ),
        Some(_) => "all now (the rest every 30 s, at once after an XID)".to_owned(),
        None => "all now".to_owned(),
    }
}

fn count(n: u64) -> String {
    n.to_string()
}

#[cfg(test)]
mod tests {
    use shared::health::NvLinkState;

    use super::*;

    #[test]
    fn an_h200_reads_ecc_and_nvlink_at_a_glance() {
        let health = DeviceHealth {
            ecc_enabled: Some(true),
            ecc_volatile: EccCounts { corrected: Some(2), uncorrected: Some(0) },
            nvlinks: (0..18).map(|link| NvLinkState { link, active: link != 3 }).collect(),
            ..Default::default()
        };
        assert_eq!(summary(Some(&health), 18), "ECC on · NVLink 17 / 18 active");
        assert_eq!(ecc_text(health.ecc_volatile), "2 corrected, 0 uncorrected");
        assert_eq!(nvlink_text(&DeviceHealth::default(), 0), "none");
        assert_eq!(summary(None, 0), "no reading");
    }

    /// Issue 56, item 6: the summary said "4 uncorrected" where the badge said 2 (volatile added to aggregate).
    #[test]
    fn the_summary_counts_uncorrected_errors_as_the_badge_does() {
        let mut health = DeviceHealth {
            ecc_enabled: Some(true),
            ecc_volatile: EccCounts { corrected: Some(0), uncorrected: Some(2) },
            ecc_aggregate: EccCounts { corrected: Some(0), uncorrected: Some(2) },
            ..Default::default()
        };
        assert_eq!(summary(Some(&health), 0), "ECC on · 2 uncorrected");
        let condition = shared::severity::Condition { ecc_volatile: health.ecc_volatile, ..Default::default() };
        let badge = shared::severity::findings(&condition);
        assert!(badge.iter().any(|f| f.text == "ECC: 2 uncorrected"), "{badge:?}");
        health.ecc_aggregate.uncorrected = Some(5);
        assert_eq!(summary(Some(&health), 0), "ECC on · 2 uncorrected · 5 uncorrected in its lifetime");
        health.ecc_volatile.uncorrected = Some(0);
        assert_eq!(summary(Some(&health), 0), "ECC on · 5 uncorrected in its lifetime");
    }

    #[test]
    fn counters_say_n_a_or_flag_trouble() {
        assert_eq!(retired_text(RetiredPages::default()), "n/a");
        let rows = RemappedRows { correctable: Some(1), uncorrectable: Some(0), pending: Some(true), failed: None };
        assert_eq!(remapped_text(rows), "1 correctable, 0 uncorrectable, pending");
        let health = DeviceHealth { mig_enabled: Some(false), mig_pending: Some(true), ..Default::default() };
        assert_eq!(mig_text(&health), "pending (reset to apply)");
        let health = DeviceHealth { pcie_tx_bytes_per_s: Some(1024), pcie_rx_bytes_per_s: None, ..Default::default() };
        assert_eq!(pcie_traffic_text(&health), "1.00 KiB/s / n/a");
        let health = DeviceHealth { timestamp_ms: 40_000, facts_ms: Some(28_000), ..Default::default() };
        assert_eq!(read_text(&health), "PCIe and energy now; the rest 12 s earlier (every 30 s, at once after an XID)");
        assert_eq!(read_text(&DeviceHealth::default()), "all now");
    }
}
