//! The experiment forms, built from what the server says of each experiment
//! (`GET /api/lab/experiments`: its fields, in order, and its defaults) and read
//! back into run parameters.
//!
//! Nothing here names an experiment: a kind the server adds gets its form from
//! its fields. The page checks what it can (whole numbers, byte sizes, at least
//! one choice); ranges are the server's to judge, and its 400 message is shown
//! as it is (a run on several GPUs is put to `POST /api/runs/check` first).

use serde::Deserialize;
use serde_json::{Map, Value, json};
use shared::{
    lab::{ExperimentKind, FieldSpec, Input},
    units::exact_bytes,
};

const KIB: u64 = 1024;

/// What the reader must fix in a form, naming the field by its label.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormError {
    #[error("'{label}' must be a whole number, not '{text}'")]
    NotACount { label: String, text: String },
    #[error("'{label}' must be a size in bytes like 256 MiB, not '{text}'")]
    NotASize { label: String, text: String },
    #[error("'{label}' must list GPU pairs like 0-1, 1-2, not '{text}'")]
    NotAPair { label: String, text: String },
    #[error("'{label}' needs at least one value")]
    Empty { label: String },
    #[error("'{label}': pick at least one")]
    NoneChosen { label: String },
    #[error("'{label}' must be a number of parameters like 1.3 B, 350 M or 125000000, not '{text}'")]
    NotAParameterCount { label: String, text: String },
}

/// An experiment of `GET /api/lab/experiments` (`shared::lab::ExperimentInfo`), its
/// defaults kept as JSON for the form: typed, they would bring every experiment's
/// parameter deserializer into the wasm (see `shared::lab_view::RunDoc` for the measure).
#[derive(Deserialize, Debug, Clone, PartialEq)]
pub struct ExperimentDoc {
    pub kind: ExperimentKind,
    pub title: String,
    pub description: String,
    /// What it measures in PyTorch's words (`ExperimentInfo::snippet`).
    #[serde(default)]
    pub snippet: String,
    pub defaults: Value,
    /// The form's inputs, in order.
    #[serde(default)]
    pub fields: Vec<FieldSpec>,
    /// Runs on several GPUs: put to the server, then asked, before it is queued.
    #[serde(default)]
    pub multi_gpu: bool,
    /// The page offers it only where the server has this many GPUs.
    #[serde(default = "one")]
    pub min_gpus: u32,
    /// Why it cannot run on this server; the form is shown greyed out with this sentence.
    #[serde(default)]
    pub unavailable: Option<String>,
}

fn one() -> u32 {
    1
}

impl ExperimentDoc {
    /// True when a server with this many GPUs can run it (p2p needs two; collectives run on one as a
    /// check that NCCL works).
    pub fn offered(&self, gpus: usize) -> bool {
        self.min_gpus <= 1 || gpus >= self.min_gpus as usize
    }
}

/// What a field holds while the reader edits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldValue {
    Text(String),
    /// One flag per choice of an [`Input::Choices`], or the one flag of an [`Input::Switch`].
    Chosen(Vec<bool>),
}

/// One input of an experiment's form: what the server says of it, and its default value.
#[derive(Debug, Clone, PartialEq)]
pub struct Field {
    pub spec: FieldSpec,
    pub default: FieldValue,
}

impl Field {
    pub fn name(&self) -> &str {
        &self.spec.name
    }
}

/// The form's fields, in the server's order, each starting at its default ("ddp.tokens" read inside
/// the group); a field whose default does not fit its input is left out rather than shown wrong.
pub fn fields(specs: &[FieldSpec], defaults: &Value) -> Vec<Field> {
    specs
        .iter()
        .filter_map(|spec| {
            let value = spec.name.split('.').try_fold(defaults, |v, key| v.get(key))?;
            Some(Field { default: default_value(&spec.input, value)?, spec: spec.clone() })
        })
        .collect()
}

fn default_value(input: &Input, value: &Value) -> Option<FieldValue> {
    let numbers = || value.as_array()?.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>();
    let joined = |numbers: Vec<u64>, format: fn(u64) -> String| {
        FieldValue::Text(numbers.into_iter().map(format).collect::<Vec<_>>().join(", "))
    };
    Some(match input {
        Input::Count => FieldValue::Text(value.as_u64()?.to_string()),
        Input::Bytes => FieldValue::Text(exact_bytes(value.as_u64()?)),
        Input::Parameters => FieldValue::Text(parameter_text(value.as_u64()?)),
        Input::CountList { .. } => joined(numbers()?, |n| n.to_string()),
        Input::BytesList => joined(numbers()?, exact_bytes),
        Input::OneOf { .. } => FieldValue::Text(value.as_str()?.to_owned()),
        Input::Choices { choices } => {
            let on = value.as_array()?;
            FieldValue::Chosen(choices.iter().map(|c| on.iter().any(|v| v.as_str() == Some(&c.name))).collect())
        }
        Input::Pairs => FieldValue::Text(
            value
                .as_array()?
                .iter()
                .filter_map(|p| Some(format!("{}-{}", p.get("a")?.as_u64()?, p.get("b")?.as_u64()?)))
                .collect::<Vec<_>>()
                .join(", "),
        ),
        Input::Switch => FieldValue::Chosen(vec![!value.is_null()]),
    })
}

/// The `params` of a run request from the form, or what the reader must fix.
pub fn params(kind: &ExperimentKind, fields: &[Field], values: &[FieldValue]) -> Result<Value, FormError> {
    let mut object = Map::new();
    object.insert("kind".into(), Value::from(kind.name()));
    // Groups switched off: sent as null, their fields left out.
    let mut off: Vec<&str> = Vec::new();
    for (field, value) in fields.iter().zip(values) {
        let label = field.spec.label.clone();
        let name = field.name();
        let group = name.split_once('.');
        if group.is_some_and(|(parent, _)| off.contains(&parent)) {
            continue;
        }
        let parsed = match (&field.spec.input, value) {
            (Input::Switch, FieldValue::Chosen(on)) if !on.first().copied().unwrap_or(false) => {
                off.push(name);
                Value::Null
            }
            (Input::Switch, _) => continue,
            (Input::OneOf { .. }, FieldValue::Text(text)) => Value::from(text.trim()),
            (Input::Parameters, FieldValue::Text(text)) => Value::from(parameter_count(&label, text)?),
            (Input::Count, FieldValue::Text(text)) => Value::from(count(&label, text)?),
            (Input::Bytes, FieldValue::Text(text)) => Value::from(byte_size(&label, text)?),
            // A list where none named means all (the GPUs a collectives run joins): sent empty.
            (Input::CountList { empty_means_all: true }, FieldValue::Text(text)) if text.trim().is_empty() => json!([]),
            (Input::CountList { .. }, FieldValue::Text(text)) => Value::from(list(&label, text, count)?),
            (Input::BytesList, FieldValue::Text(text)) => Value::from(list(&label, text, byte_size)?),
            (Input::Choices { choices }, FieldValue::Chosen(chosen)) => {
                let picked: Vec<&str> =
                    choices.iter().zip(chosen).filter(|(_, on)| **on).map(|(c, _)| c.name.as_str()).collect();
                if picked.is_empty() {
                    return Err(FormError::NoneChosen { label });
                }
                json!(picked)
            }
            (Input::Pairs, FieldValue::Text(text)) => pairs(&label, text)?,
            _ => continue,
        };
        match group {
            Some((parent, key)) => {
                let inner = object.entry(parent).or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(inner) = inner {
                    inner.insert(key.to_owned(), parsed);
                }
            }
            None => {
                object.insert(name.to_owned(), parsed);
            }
        }
    }
    Ok(Value::Object(object))
}

/// "1.3 B" for 1300000000, "350 M", "125000" below a million.
pub fn parameter_text(n: u64) -> String {
    match n {
        1_000_000_000.. => format!("{} B", n as f64 / 1e9),
        1_000_000.. => format!("{} M", n as f64 / 1e6),
        _ => n.to_string(),
    }
}

/// A count of parameters: "1.3 B", "1.3B", "350 M", "125 k" or a plain number.
pub fn parameter_count(label: &str, text: &str) -> Result<u64, FormError> {
    let text = text.trim();
    let bad = || FormError::NotAParameterCount { label: label.to_owned(), text: text.to_owned() };
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().map_err(|_| bad())?;
    let scale = match unit.trim() {
        "" => 1.0,
        "k" | "K" => 1e3,
        "M" | "m" => 1e6,
        "B" | "b" | "G" | "g" => 1e9,
        _ => return Err(bad()),
    };
    let count = (number * scale).round();
    if !count.is_finite() || count > u64::MAX as f64 {
        return Err(bad());
    }
    Ok(count as u64)
}

fn count(label: &str, text: &str) -> Result<u64, FormError> {
    let text = text.trim();
    text.parse().map_err(|_| FormError::NotACount { label: label.to_owned(), text: text.to_owned() })
}

/// "256 MiB", "1.5 GiB", "4k" or a plain number of bytes.
pub fn byte_size(label: &str, text: &str) -> Result<u64, FormError> {
    let text = text.trim();
    let bad = || FormError::NotASize { label: label.to_owned(), text: text.to_owned() };
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().map_err(|_| bad())?;
    let scale = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => KIB,
        "m" | "mb" | "mib" => KIB * KIB,
        "g" | "gb" | "gib" => KIB * KIB * KIB,
        "t" | "tb" | "tib" => KIB * KIB * KIB * KIB,
        _ => return Err(bad()),
    };
    let bytes = number * scale as f64;
    if bytes.fract() != 0.0 || !bytes.is_finite() || bytes > u64::MAX as f64 {
        return Err(bad());
    }
    Ok(bytes as u64)
}

fn list(label: &str, text: &str, item: fn(&str, &str) -> Result<u64, FormError>) -> Result<Vec<u64>, FormError> {
    let items: Vec<u64> =
        text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(|s| item(label, s)).collect::<Result<_, _>>()?;
    if items.is_empty() {
        return Err(FormError::Empty { label: label.to_owned() });
    }
    Ok(items)
}

fn pairs(label: &str, text: &str) -> Result<Value, FormError> {
    let mut out = Vec::new();
    for pair in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let bad = || FormError::NotAPair { label: label.to_owned(), text: pair.to_owned() };
        let (a, b) = pair.split_once('-').ok_or_else(bad)?;
        let a: u32 = a.trim().parse().map_err(|_| bad())?;
        let b: u32 = b.trim().parse().map_err(|_| bad())?;
        out.push(json!({ "a": a, "b": b }));
    }
    Ok(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(name: &'static str) -> ExperimentKind {
        ExperimentKind::named(name)
    }

    /// The form of `kind` as the server's lab describes it (the lab crate, native tests only).
    fn defaults(kind: &ExperimentKind) -> (Vec<Field>, Vec<FieldValue>) {
        let experiment = lab::experiments::find(kind).unwrap();
        let specs = experiment.fields();
        let fields = fields(&specs, &serde_json::to_value(experiment.defaults()).unwrap());
        assert_eq!(fields.len(), specs.len(), "{kind:?}: every field reads its default");
        let values = fields.iter().map(|f| f.default.clone()).collect();
        (fields, values)
    }

    #[test]
    fn every_default_form_reads_back_as_the_defaults() {
        for experiment in lab::experiments::ALL {
            let kind = experiment.kind();
            let (fields, values) = defaults(&kind);
            assert!(!fields.is_empty(), "{kind:?}");
            let params = params(&kind, &fields, &values).unwrap();
            let parsed: shared::lab::ExperimentParams = serde_json::from_value(params).unwrap();
            assert_eq!(parsed, experiment.defaults(), "{kind:?}");
        }
    }

    #[test]
    fn transfer_sizes_read_as_bytes_and_copies_as_choices() {
        let (fields, mut values) = defaults(&kind("transfer"));
        let names: Vec<&str> = fields.iter().map(Field::name).collect();
        assert_eq!(names, ["sizes", "copies", "warmup", "repetitions"]);
        assert_eq!(
            values[0],
            FieldValue::Text("4 KiB, 16 KiB, 64 KiB, 256 KiB, 1 MiB, 4 MiB, 16 MiB, 64 MiB, 256 MiB, 1 GiB".into())
        );
        values[0] = FieldValue::Text("4k, 1.5 MiB".into());
        values[1] = FieldValue::Chosen(vec![false, true, false, false, false, false]);
        let p = params(&kind("transfer"), &fields, &values).unwrap();
        assert_eq!(p["sizes"], json!([4096, 1_572_864]));
        assert_eq!(p["copies"], json!(["h2d_pinned"]));
        values[1] = FieldValue::Chosen(vec![false; 6]);
        let error = params(&kind("transfer"), &fields, &values).unwrap_err();
        assert_eq!(error, FormError::NoneChosen { label: "copies".into() });
        assert_eq!(error.to_string(), "'copies': pick at least one");
    }

    #[test]
    fn collectives_sizes_read_as_bytes_and_no_gpus_means_every_gpu() {
        let (fields, mut values) = defaults(&kind("collectives"));
        let at = |name: &str| fields.iter().position(|f| f.name() == name).unwrap();
        assert_eq!(fields[at("gpus")].spec.hint, "comma-separated, e.g. 0, 1; empty: every GPU");
        assert!(matches!(&values[at("sizes")], FieldValue::Text(t) if t.starts_with("8, 1 KiB, 4 KiB")));
        let p = params(&kind("collectives"), &fields, &values).unwrap();
        assert_eq!(p["gpus"], json!([]));
        values[at("gpus")] = FieldValue::Text("0, 1".into());
        values[at("sizes")] = FieldValue::Text("1 MiB, 1 GiB".into());
        let p = params(&kind("collectives"), &fields, &values).unwrap();
        assert_eq!((p["gpus"].clone(), p["sizes"].clone()), (json!([0, 1]), json!([1 << 20, 1u64 << 30])));
    }

    #[test]
    fn collectives_take_a_dtype_and_a_ddp_step_that_switches_off() {
        let (fields, mut values) = defaults(&kind("collectives"));
        let at = |name: &str| fields.iter().position(|f| f.name() == name).unwrap();
        let tail: Vec<&str> = fields[at("ddp")..].iter().map(|f| f.spec.label.as_str()).collect();
        assert_eq!(tail, ["DDP step", "DDP parameters", "DDP dtype", "DDP bucket_cap_mb", "DDP hidden", "DDP tokens"]);
        assert_eq!(fields[at("dtype")].spec.input, Input::OneOf { choices: vec!["fp32".into(), "bf16".into()] });
        assert_eq!(values[at("ddp.parameters")], FieldValue::Text("1.3 B".into()));
        values[at("dtype")] = FieldValue::Text("bf16".into());
        values[at("ddp.parameters")] = FieldValue::Text("350M".into());
        values[at("ddp.bucket_cap_mb")] = FieldValue::Text("100".into());
        let p = params(&kind("collectives"), &fields, &values).unwrap();
        assert_eq!((p["dtype"].clone(), p["ddp"]["parameters"].clone()), (json!("bf16"), json!(350_000_000)));
        assert_eq!((p["ddp"]["bucket_cap_mb"].clone(), p["ddp"]["dtype"].clone()), (json!(100), json!("bf16")));
        values[at("ddp.parameters")] = FieldValue::Text("lots".into());
        let error = params(&kind("collectives"), &fields, &values).unwrap_err().to_string();
        assert!(error.starts_with("'DDP parameters' must be a number of parameters like 1.3 B"), "{error}");
        // The DDP step switched off: null, its fields (bad ones included) left out.
        values[at("ddp")] = FieldValue::Chosen(vec![false]);
        let p = params(&kind("collectives"), &fields, &values).unwrap();
        assert_eq!(p["ddp"], Value::Null);
        assert_eq!(parameter_count("p", "1.3 B"), Ok(1_300_000_000));
    }

    #[test]
    fn a_kind_the_page_has_never_seen_gets_its_form_from_its_fields() {
        let specs = [FieldSpec::bytes("chunk"), FieldSpec::choices("ways", [("there", ""), ("back", "")])];
        let fields = fields(&specs, &json!({"kind": "latency", "chunk": 1 << 20, "ways": ["back"], "extra": 1}));
        assert_eq!(fields[0].default, FieldValue::Text("1 MiB".into()));
        assert_eq!(fields[1].default, FieldValue::Chosen(vec![false, true]));
        // A default that does not fit its input: the field is left out, not shown wrong.
        assert!(super::fields(&specs, &json!({"chunk": "big", "ways": ["back"]})).len() == 1);
    }

    #[test]
    fn bad_numbers_are_named_before_the_server_sees_them() {
        let (fields, mut values) = defaults(&kind("latency"));
        values[1] = FieldValue::Text("lots".into());
        assert_eq!(
            params(&kind("latency"), &fields, &values).unwrap_err().to_string(),
            "'repetitions' must be a whole number, not 'lots'"
        );
        assert!(byte_size("size", "1.3 B").is_err());
        assert!(byte_size("size", "12 parsecs").is_err());
        assert_eq!(byte_size("size", "2G"), Ok(2 << 30));
        assert_eq!(exact_bytes(1000), "1000");
    }

    #[test]
    fn the_servers_experiments_read_as_docs() {
        let info = shared::lab::ExperimentInfo {
            kind: kind("p2p"),
            title: "P2P".into(),
            description: "pairs".into(),
            snippet: "import torch".into(),
            defaults: lab::experiments::find(&kind("p2p")).unwrap().defaults(),
            fields: lab::experiments::find(&kind("p2p")).unwrap().fields(),
            multi_gpu: true,
            min_gpus: 2,
            unavailable: Some("NCCL (libnccl.so.2) not found".into()),
        };
        let doc: ExperimentDoc = serde_json::from_str(&serde_json::to_string(&info).unwrap()).unwrap();
        assert_eq!(doc.defaults["repetitions"], 10);
        assert_eq!(doc.snippet, "import torch");
        assert_eq!(doc.fields, info.fields);
        assert!(doc.multi_gpu && !doc.offered(1) && doc.offered(2));
        // One that needs no second GPU is listed before the page knows of any GPU (its reason says why).
        assert!(ExperimentDoc { min_gpus: 1, ..doc.clone() }.offered(0));
        assert_eq!(doc.unavailable.as_deref(), Some("NCCL (libnccl.so.2) not found"));
    }

    #[test]
    fn p2p_pairs_read_as_pairs() {
        let (fields, mut values) = defaults(&kind("p2p"));
        let at = fields.iter().position(|f| f.name() == "pairs").unwrap();
        values[at] = FieldValue::Text("0-1, 2 - 3".into());
        let p = params(&kind("p2p"), &fields, &values).unwrap();
        assert_eq!(p["pairs"], json!([{"a": 0, "b": 1}, {"a": 2, "b": 3}]));
        values[at] = FieldValue::Text("0:1".into());
        assert!(params(&kind("p2p"), &fields, &values).is_err());
    }
}
