//! What a client asks the lab for: an experiment by name, its parameters as JSON, and the run
//! request around them. Which experiments exist, and what each one's parameters mean, is the lab's
//! business (`lab/src/experiments/<kind>/`): this crate only carries them, so adding an experiment
//! changes nothing here or on the page.

use std::borrow::Cow;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Longest experiment name.
const MAX_NAME: usize = 32;

/// Which experiment, by the name used in URLs, JSON and on the command line: `"memory"`, `"transfer"`.
/// Any well-formed name reads; the lab says whether it is one of its experiments.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[serde(try_from = "String", into = "String")]
pub struct ExperimentKind(Cow<'static, str>);

impl ExperimentKind {
    /// The experiment called `name` (the lab's registry uses it; names are 1 to 32 of `a-z`, `0-9`, `_`,
    /// which a lab test holds each registered name to).
    pub const fn named(name: &'static str) -> Self {
        Self(Cow::Borrowed(name))
    }

    /// The name used in URLs, JSON and on the command line.
    pub fn name(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ExperimentKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A name that cannot be an experiment's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadExperimentName(pub String);

impl fmt::Display for BadExperimentName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: String = self.0.chars().take(MAX_NAME + 8).collect();
        write!(f, "'{shown}' is not an experiment name: names are 1 to {MAX_NAME} of a-z, 0-9 and '_'")
    }
}

impl std::error::Error for BadExperimentName {}

impl TryFrom<String> for ExperimentKind {
    type Error = BadExperimentName;

    fn try_from(name: String) -> Result<Self, Self::Error> {
        let well_formed = !name.is_empty()
            && name.len() <= MAX_NAME
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if well_formed { Ok(Self(Cow::Owned(name))) } else { Err(BadExperimentName(name)) }
    }
}

impl From<ExperimentKind> for String {
    fn from(kind: ExperimentKind) -> Self {
        kind.0.into_owned()
    }
}

/// What to run: the experiment and its parameters, flat in one object,
/// `{"kind":"transfer","sizes":[4096,1048576]}`. A parameter left out takes the experiment's default;
/// the lab reads `values` into the experiment's own parameters type and stores a run's parameters in
/// full, defaults filled in.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct ExperimentParams {
    pub kind: ExperimentKind,
    #[serde(flatten)]
    pub values: Map<String, Value>,
}

impl ExperimentParams {
    /// `kind` with every parameter at its default.
    pub fn defaults(kind: ExperimentKind) -> Self {
        Self { kind, values: Map::new() }
    }

    pub fn kind(&self) -> &ExperimentKind {
        &self.kind
    }
}

/// Body of `POST /api/runs`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunRequest {
    /// NVML index of the GPU.
    pub device: u32,
    pub params: ExperimentParams,
    /// Run even where other processes are computing on the GPU.
    #[serde(default)]
    pub force: bool,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn params_carry_the_kind_and_the_rest_as_given() {
        let p: ExperimentParams = serde_json::from_str(r#"{"kind":"transfer","sizes":[4096]}"#).unwrap();
        assert_eq!(p.kind, ExperimentKind::named("transfer"));
        assert_eq!(p.values["sizes"], serde_json::json!([4096]));
        assert_eq!(serde_json::to_string(&p).unwrap(), r#"{"kind":"transfer","sizes":[4096]}"#);
        assert_eq!(
            serde_json::to_string(&ExperimentParams::defaults(ExperimentKind::named("memory"))).unwrap(),
            r#"{"kind":"memory"}"#
        );
    }

    #[test]
    fn kinds_are_well_formed_names() {
        assert_eq!(serde_json::to_value(ExperimentKind::named("p2p")).unwrap(), Value::from("p2p"));
        assert_eq!(serde_json::from_str::<ExperimentKind>(r#""d2d_copy""#).unwrap().name(), "d2d_copy");
        for bad in [r#""""#, r#""FFT""#, r#""a b""#, r#""../x""#, &format!("\"{}\"", "a".repeat(33))] {
            let err = serde_json::from_str::<ExperimentKind>(bad).unwrap_err().to_string();
            assert!(err.contains("is not an experiment name: names are 1 to 32 of a-z, 0-9 and '_'"), "{bad}: {err}");
        }
        assert!(serde_json::from_str::<ExperimentParams>(r#"{"sizes":[1]}"#).is_err(), "no kind");
    }
}
