//! An experiment's form as the lab describes it (`ExperimentInfo::fields`): which input each parameter
//! gets, its label and a hint of what it takes. Each experiment lists its own fields in its folder, and
//! the page builds any experiment's form from them; the values come from the experiment's defaults and
//! the ranges stay the server's to judge.

use serde::{Deserialize, Serialize};

/// One input of an experiment's form.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct FieldSpec {
    /// The parameter's JSON name; a parameter of a group is "group.name" (the DDP step's "ddp.tokens").
    pub name: String,
    /// What the form calls it: "block bytes" for `block_bytes` unless the experiment says otherwise.
    pub label: String,
    pub input: Input,
    /// A short hint of the accepted format ("e.g. 256 MiB"); empty for none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub hint: String,
}

/// What sort of input a parameter gets, and how the page reads it back into JSON.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Input {
    /// A whole number.
    Count,
    /// A byte size, written like "256 MiB".
    Bytes,
    /// Whole numbers, comma-separated; when `empty_means_all`, an empty box sends `[]` (every GPU).
    CountList {
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        empty_means_all: bool,
    },
    /// Byte sizes, comma-separated.
    BytesList,
    /// Some of a fixed set of names: a checkbox each, sent as a list.
    Choices { choices: Vec<Choice> },
    /// One of a fixed set of names: a drop-down, sent as a string.
    OneOf { choices: Vec<String> },
    /// GPU pairs "0-1, 1-2", sent as `[{"a":0,"b":1},…]`; empty means every pair.
    Pairs,
    /// A count of model parameters, written like "1.3 B".
    Parameters,
    /// A group on or off: off sends `null` and leaves out the group's fields (those named "group.*").
    Switch,
}

/// One name of an [`Input::Choices`], with what it means for a tooltip ("D2D (SM copy kernel, …)").
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct Choice {
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub title: String,
}

impl FieldSpec {
    /// A field labelled by its name with `_` read as a space, without a hint.
    pub fn new(name: &str, input: Input) -> Self {
        let label = name.rsplit('.').next().unwrap_or(name).replace('_', " ");
        Self { name: name.to_owned(), label, input, hint: String::new() }
    }

    pub fn label(mut self, label: &str) -> Self {
        label.clone_into(&mut self.label);
        self
    }

    pub fn hint(mut self, hint: &str) -> Self {
        hint.clone_into(&mut self.hint);
        self
    }

    /// A whole number.
    pub fn count(name: &str) -> Self {
        Self::new(name, Input::Count)
    }

    /// A byte size, with the usual hint.
    pub fn bytes(name: &str) -> Self {
        Self::new(name, Input::Bytes).hint("e.g. 256 MiB")
    }

    /// Byte sizes, with the usual hint.
    pub fn bytes_list(name: &str) -> Self {
        Self::new(name, Input::BytesList).hint("comma-separated, e.g. 4 KiB, 1 MiB")
    }

    /// Whole numbers.
    pub fn count_list(name: &str) -> Self {
        Self::new(name, Input::CountList { empty_means_all: false }).hint("comma-separated")
    }

    /// Some of `choices`, each `(name, title)`.
    pub fn choices<'a>(name: &str, choices: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let choices = choices.into_iter().map(|(name, title)| Choice { name: name.into(), title: title.into() });
        Self::new(name, Input::Choices { choices: choices.collect() })
    }

    /// One of `choices`.
    pub fn one_of<'a>(name: &str, choices: impl IntoIterator<Item = &'a str>) -> Self {
        Self::new(name, Input::OneOf { choices: choices.into_iter().map(str::to_owned).collect() })
    }

    /// The untimed and timed repetitions every experiment ends its form with.
    pub fn rounds() -> [Self; 2] {
        [Self::count("warmup"), Self::count("repetitions")]
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn fields_read_their_names_and_travel_tagged() {
        let field = FieldSpec::bytes("block_bytes");
        assert_eq!((field.label.as_str(), field.hint.as_str()), ("block bytes", "e.g. 256 MiB"));
        assert_eq!(FieldSpec::count("ddp.bucket_cap_mb").label, "bucket cap mb");
        let json = serde_json::to_string(&FieldSpec::new("gpus", Input::CountList { empty_means_all: true })).unwrap();
        assert_eq!(json, r#"{"name":"gpus","label":"gpus","input":{"type":"count_list","empty_means_all":true}}"#);
        let json = serde_json::to_string(&FieldSpec::choices("dtypes", [("fp32", "")])).unwrap();
        assert_eq!(
            json,
            r#"{"name":"dtypes","label":"dtypes","input":{"type":"choices","choices":[{"name":"fp32"}]}}"#
        );
        let back: FieldSpec = serde_json::from_str(&json).unwrap();
        assert_eq!(back, FieldSpec::choices("dtypes", [("fp32", "")]));
    }
}
