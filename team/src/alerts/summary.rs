//! Each rule as it runs now, in words, for the Alerts tab (`RuleSummary::condition`); each rule's
//! words are its own (`rules/<rule>.rs`).

use shared::alerts::{Rule, RuleSummary};

use super::config::Rules;

/// Every rule in [`Rule::ALL`] order.
pub fn summaries(rules: &Rules) -> Vec<RuleSummary> {
    Rule::ALL
        .into_iter()
        .map(|rule| {
            let config = rules.rule(rule);
            RuleSummary { rule, enabled: config.enabled, severity: config.severity, condition: rules.condition(rule) }
        })
        .collect()
}
