//! The findings of a GPU as badges, shared by the overview's rows and the GPU's card (apart from
//! both, so neither imports the other).

use leptos::prelude::*;
use shared::severity::Finding;

/// `span.sev-badge`s of the most severe `limit` findings ("⚠ power cap"), and "+N" for the rest;
/// `limit` 0 shows them all. The level is in the text as well as the colour.
#[component]
pub fn SeverityBadges(findings: Memo<Vec<Finding>>, #[prop(optional)] limit: usize) -> impl IntoView {
    move || {
        findings.with(|all| {
            let shown = if limit == 0 { all.len() } else { limit.min(all.len()) };
            let more = all.len() - shown;
            let rest: Vec<String> = all[shown..].iter().map(Finding::label).collect();
            let badges = all[..shown]
                .iter()
                .map(|f| {
                    // The whole finding in the tooltip too: a row cuts a long badge short.
                    let title = format!("{}: {}", f.level.word(), f.label());
                    view! {
                        <span class=format!("sev-badge {}", f.level.class()) title=title>
                            {f.label()}
                        </span>
                    }
                })
                .collect_view();
            let more = (more > 0).then(|| {
                view! { <span class="sev-more" title=rest.join("; ")>{format!("+{more}")}</span> }
            });
            view! {
                {badges}
                {more}
            }
        })
    }
}
