//! The experiment forms, built from each experiment's defaults
//! (`GET /api/lab/experiments`) and read back into run parameters.
//!
//! The fields come from the defaults' JSON, so a parameter the server adds
//! shows up without a page change. The page checks what it can (whole numbers,
//! byte sizes, at least one choice); ranges are the server's to judge, and its
//! 400 message is shown as it is, except where a rule lives in `shared` for both
//! sides (collectives: `CollectivesParams::validate`), which the page asks first.

use serde::Deserialize;
use serde_json::{Map, Value, json};
use shared::{
    lab::{
        ExperimentKind,
        collectives::{CollectivesParams, DTYPES},
    },
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
    /// Refused by the rule the server applies too (`shared::lab::collectives`), in its words.
    #[error("{0}")]
    Invalid(String),
}

/// An experiment of `GET /api/lab/experiments` (`shared::lab::ExperimentInfo`), its
/// defaults kept as JSON for the form: typed, they would bring every experiment's
/// parameter deserializer into the wasm (see `shared::lab_view::RunDoc` for the measure).
#[derive(Deserialize, Debug, Clone, PartialEq)]
pub struct ExperimentDoc {
    pub kind: ExperimentKind,
    pub title: String,
    pub description: String,
    pub defaults: Value,
    /// Why it cannot run on this server; the form is shown greyed out with this sentence.
    #[serde(default)]
    pub unavailable: Option<String>,
}

/// What sort of input a parameter gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldKind {
    /// A whole number.
    Count,
    /// A byte size, written like "256 MiB".
    Bytes,
    CountList,
    BytesList,
    /// Some of a fixed set of names (copies, dtypes): one checkbox each.
    Choices(Vec<String>),
    /// GPU pairs "0-1, 1-2"; empty means every pair.
    Pairs,
    /// One of a fixed set of names (a collective's dtype): a drop-down.
    OneOf(Vec<String>),
    /// A count of model parameters, written like "1.3 B".
    Parameters,
    /// On or off (the DDP step); off sends `null` and leaves out the fields under it (`ddp.*`).
    Switch,
}

/// What a field holds while the reader edits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldValue {
    Text(String),
    /// One flag per choice of a [`FieldKind::Choices`].
    Chosen(Vec<bool>),
}

/// One input of an experiment's form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The parameter's JSON name.
    pub name: String,
    pub kind: FieldKind,
    pub default: FieldValue,
}

impl Field {
    /// The label shown: "block bytes" for `block_bytes`; the DDP step's in PyTorch's words ("DDP bucket_cap_mb").
    pub fn label(&self) -> String {
        match self.name.split_once('.') {
            _ if self.name == "ddp" => "DDP step".to_owned(),
            Some(("ddp", "bucket_cap_mb")) => "DDP bucket_cap_mb".to_owned(),
            Some(("ddp", rest)) => format!("DDP {}", rest.replace('_', " ")),
            _ => self.name.replace('_', " "),
        }
    }

    /// A short hint of the accepted format.
    pub fn hint(&self) -> &'static str {
        match self.name.as_str() {
            "gpus" => return "comma-separated, e.g. 0, 1; empty: every GPU",
            "ddp" => return "DistributedDataParallel: backward GEMMs and the gradient all-reduce",
            "ddp.parameters" => return "e.g. 1.3 B or 350 M",
            "ddp.bucket_cap_mb" => return "MiB; DDP's default is 25",
            "ddp.tokens" => return "per GPU per step: batch × sequence length",
            "ddp.hidden" => return "layer width, a multiple of 64",
            _ => {}
        }
        match self.kind {
            FieldKind::Bytes => "e.g. 256 MiB",
            FieldKind::BytesList => "comma-separated, e.g. 4 KiB, 1 MiB",
            FieldKind::CountList => "comma-separated",
            FieldKind::Pairs => "e.g. 0-1, 1-2; empty: every pair",
            FieldKind::Count
            | FieldKind::Choices(_)
            | FieldKind::OneOf(_)
            | FieldKind::Parameters
            | FieldKind::Switch => "",
        }
    }
}

/// The form's fields for an experiment's defaults (its JSON), sizes first, warm-up and repetitions last.
pub fn fields(kind: ExperimentKind, defaults: &Value) -> Vec<Field> {
    let Value::Object(object) = defaults else {
        return Vec::new();
    };
    let mut fields: Vec<Field> = Vec::new();
    for (name, value) in object.iter().filter(|(name, _)| *name != "kind") {
        match value {
            // A group of parameters (the DDP step): a switch, then a field for each.
            Value::Object(inner) => {
                fields.push(Field {
                    name: name.clone(),
                    kind: FieldKind::Switch,
                    default: FieldValue::Chosen(vec![true]),
                });
                fields.extend(inner.iter().filter_map(|(key, v)| field(kind, &format!("{name}.{key}"), v)));
            }
            _ => fields.extend(field(kind, name, value)),
        }
    }
    let rank = |name: &str| match name {
        "warmup" => 2,
        "repetitions" => 3,
        "ddp" => 4,
        "ddp.parameters" => 5,
        "ddp.dtype" => 6,
        "ddp.bucket_cap_mb" => 7,
        _ if name.starts_with("ddp.") => 8,
        _ => 1,
    };
    shared::order::sort_by(&mut fields, |a, b| rank(&a.name).cmp(&rank(&b.name)).then_with(|| a.name.cmp(&b.name)));
    fields
}

fn is_bytes(kind: ExperimentKind, name: &str) -> bool {
    name.ends_with("bytes")
        || (kind == ExperimentKind::P2p && name == "size")
        || ((kind == ExperimentKind::Transfer || kind == ExperimentKind::Collectives) && name == "sizes")
}

fn field(kind: ExperimentKind, name: &str, value: &Value) -> Option<Field> {
    let bytes = is_bytes(kind, name);
    let (kind, default) = match value {
        Value::String(text) if name.ends_with("dtype") => {
            let choices = DTYPES.iter().map(|d| d.name().to_owned()).collect();
            (FieldKind::OneOf(choices), FieldValue::Text(text.clone()))
        }
        Value::Number(n) if name == "ddp.parameters" => {
            (FieldKind::Parameters, FieldValue::Text(parameter_text(n.as_u64()?)))
        }
        Value::Number(n) => {
            let n = n.as_u64()?;
            if bytes {
                (FieldKind::Bytes, FieldValue::Text(exact_bytes(n)))
            } else {
                (FieldKind::Count, FieldValue::Text(n.to_string()))
            }
        }
        Value::Array(items) if items.iter().all(Value::is_string) && !items.is_empty() => {
            let choices: Vec<String> = items.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect();
            let chosen = vec![true; choices.len()];
            (FieldKind::Choices(choices), FieldValue::Chosen(chosen))
        }
        Value::Array(items) if name == "pairs" || items.iter().any(Value::is_object) => {
            let text = items
                .iter()
                .filter_map(|p| Some(format!("{}-{}", p.get("a")?.as_u64()?, p.get("b")?.as_u64()?)))
                .collect::<Vec<_>>()
                .join(", ");
            (FieldKind::Pairs, FieldValue::Text(text))
        }
        Value::Array(items) => {
            let numbers: Vec<u64> = items.iter().map(Value::as_u64).collect::<Option<_>>()?;
            let format = |n: &u64| if bytes { exact_bytes(*n) } else { n.to_string() };
            let text = numbers.iter().map(format).collect::<Vec<_>>().join(", ");
            (if bytes { FieldKind::BytesList } else { FieldKind::CountList }, FieldValue::Text(text))
        }
        _ => return None,
    };
    Some(Field { name: name.to_owned(), kind, default })
}

/// The `params` of a run request from the form, or what the reader must fix.
pub fn params(kind: ExperimentKind, fields: &[Field], values: &[FieldValue]) -> Result<Value, FormError> {
    let mut object = Map::new();
    object.insert("kind".into(), Value::from(kind.name()));
    // Groups switched off: sent as null, their fields left out.
    let mut off: Vec<&str> = Vec::new();
    for (field, value) in fields.iter().zip(values) {
        let label = field.label();
        let group = field.name.split_once('.');
        if group.is_some_and(|(parent, _)| off.contains(&parent)) {
            continue;
        }
        let parsed = match (&field.kind, value) {
            (FieldKind::Switch, FieldValue::Chosen(on)) if !on.first().copied().unwrap_or(false) => {
                off.push(&field.name);
                Value::Null
            }
            (FieldKind::Switch, _) => continue,
            (FieldKind::OneOf(_), FieldValue::Text(text)) => Value::from(text.trim()),
            (FieldKind::Parameters, FieldValue::Text(text)) => Value::from(parameter_count(&label, text)?),
            (FieldKind::Count, FieldValue::Text(text)) => Value::from(count(&label, text)?),
            (FieldKind::Bytes, FieldValue::Text(text)) => Value::from(byte_size(&label, text)?),
            // The GPUs a collectives run joins: none named means every GPU.
            (FieldKind::CountList, FieldValue::Text(text)) if field.name == "gpus" && text.trim().is_empty() => {
                json!([])
            }
            (FieldKind::CountList, FieldValue::Text(text)) => Value::from(list(&label, text, count)?),
            (FieldKind::BytesList, FieldValue::Text(text)) => Value::from(list(&label, text, byte_size)?),
            (FieldKind::Choices(choices), FieldValue::Chosen(chosen)) => {
                let picked: Vec<&String> = choices.iter().zip(chosen).filter(|(_, on)| **on).map(|(c, _)| c).collect();
                if picked.is_empty() {
                    return Err(FormError::NoneChosen { label });
                }
                json!(picked)
            }
            (FieldKind::Pairs, FieldValue::Text(text)) => pairs(&label, text)?,
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
                object.insert(field.name.clone(), parsed);
            }
        }
    }
    if kind == ExperimentKind::Collectives {
        check_collectives(&object)?;
    }
    Ok(Value::Object(object))
}

/// The collectives rule both sides apply (`CollectivesParams::validate`), on the form's values.
fn check_collectives(object: &Map<String, Value>) -> Result<(), FormError> {
    let mut values = object.clone();
    values.remove("kind");
    let p: CollectivesParams =
        serde_json::from_value(Value::Object(values)).map_err(|e| FormError::Invalid(e.to_string()))?;
    p.validate().map_err(|e| FormError::Invalid(e.0))
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

    fn defaults(kind: ExperimentKind) -> (Vec<Field>, Vec<FieldValue>) {
        let fields = fields(kind, &serde_json::to_value(kind.default_params()).unwrap());
        let values = fields.iter().map(|f| f.default.clone()).collect();
        (fields, values)
    }

    #[test]
    fn every_default_form_reads_back_as_the_defaults() {
        for kind in ExperimentKind::ALL {
            let (fields, values) = defaults(kind);
            assert!(!fields.is_empty(), "{kind:?}");
            let params = params(kind, &fields, &values).unwrap();
            let parsed: shared::lab::ExperimentParams = serde_json::from_value(params).unwrap();
            assert_eq!(parsed, kind.default_params(), "{kind:?}");
        }
    }

    #[test]
    fn transfer_sizes_read_as_bytes_and_copies_as_choices() {
        let (fields, mut values) = defaults(ExperimentKind::Transfer);
        let names: Vec<&str> = fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["copies", "sizes", "warmup", "repetitions"]);
        assert_eq!(
            values[1],
            FieldValue::Text("4 KiB, 16 KiB, 64 KiB, 256 KiB, 1 MiB, 4 MiB, 16 MiB, 64 MiB, 256 MiB, 1 GiB".into())
        );
        values[1] = FieldValue::Text("4k, 1.5 MiB".into());
        values[0] = FieldValue::Chosen(vec![false, true, false, false, false, false]);
        let p = params(ExperimentKind::Transfer, &fields, &values).unwrap();
        assert_eq!(p["sizes"], json!([4096, 1_572_864]));
        assert_eq!(p["copies"], json!(["h2d_pinned"]));
        values[0] = FieldValue::Chosen(vec![false; 6]);
        let error = params(ExperimentKind::Transfer, &fields, &values).unwrap_err();
        assert_eq!(error, FormError::NoneChosen { label: "copies".into() });
        assert_eq!(error.to_string(), "'copies': pick at least one");
    }

    #[test]
    fn collectives_sizes_read_as_bytes_and_no_gpus_means_every_gpu() {
        let (fields, mut values) = defaults(ExperimentKind::Collectives);
        let at = |name: &str| fields.iter().position(|f| f.name == name).unwrap();
        assert_eq!(fields[at("gpus")].hint(), "comma-separated, e.g. 0, 1; empty: every GPU");
        assert!(matches!(&values[at("sizes")], FieldValue::Text(t) if t.starts_with("8, 1 KiB, 4 KiB")));
        let p = params(ExperimentKind::Collectives, &fields, &values).unwrap();
        assert_eq!(p["gpus"], json!([]));
        values[at("gpus")] = FieldValue::Text("0, 1".into());
        values[at("sizes")] = FieldValue::Text("1 MiB, 1 GiB".into());
        let p = params(ExperimentKind::Collectives, &fields, &values).unwrap();
        assert_eq!((p["gpus"].clone(), p["sizes"].clone()), (json!([0, 1]), json!([1 << 20, 1u64 << 30])));
    }

    #[test]
    fn collectives_take_a_dtype_and_the_ddp_step_checked_by_the_shared_rule() {
        let (fields, mut values) = defaults(ExperimentKind::Collectives);
        let at = |name: &str| fields.iter().position(|f| f.name == name).unwrap();
        let tail: Vec<String> = fields[at("ddp")..].iter().map(Field::label).collect();
        assert_eq!(tail, ["DDP step", "DDP parameters", "DDP dtype", "DDP bucket_cap_mb", "DDP hidden", "DDP tokens"]);
        assert_eq!(fields[at("dtype")].kind, FieldKind::OneOf(vec!["fp32".into(), "bf16".into()]));
        assert_eq!(values[at("ddp.parameters")], FieldValue::Text("1.3 B".into()));
        values[at("dtype")] = FieldValue::Text("bf16".into());
        values[at("ddp.parameters")] = FieldValue::Text("350M".into());
        values[at("ddp.bucket_cap_mb")] = FieldValue::Text("100".into());
        let p = params(ExperimentKind::Collectives, &fields, &values).unwrap();
        assert_eq!((p["dtype"].clone(), p["ddp"]["parameters"].clone()), (json!("bf16"), json!(350_000_000)));
        assert_eq!((p["ddp"]["bucket_cap_mb"].clone(), p["ddp"]["dtype"].clone()), (json!(100), json!("bf16")));
        // Ranges are the shared rule's, in its words.
        values[at("ddp.bucket_cap_mb")] = FieldValue::Text("0".into());
        let error = params(ExperimentKind::Collectives, &fields, &values).unwrap_err().to_string();
        assert_eq!(error, "'ddp.bucket_cap_mb' must be from 1 to 1024, got '0'");
        values[at("ddp.parameters")] = FieldValue::Text("lots".into());
        let error = params(ExperimentKind::Collectives, &fields, &values).unwrap_err().to_string();
        assert!(error.starts_with("'DDP parameters' must be a number of parameters like 1.3 B"), "{error}");
        // The DDP step switched off: null, its fields (bad ones included) left out.
        values[at("ddp")] = FieldValue::Chosen(vec![false]);
        let p = params(ExperimentKind::Collectives, &fields, &values).unwrap();
        assert_eq!(p["ddp"], Value::Null);
        values[at("sizes")] = FieldValue::Text("7".into());
        let error = params(ExperimentKind::Collectives, &fields, &values).unwrap_err().to_string();
        assert!(error.contains("a multiple of 2 (bf16 elements), got '7'"), "{error}");
        assert_eq!(parameter_count("p", "1.3 B"), Ok(1_300_000_000));
    }

    #[test]
    fn bad_numbers_are_named_before_the_server_sees_them() {
        let (fields, mut values) = defaults(ExperimentKind::Latency);
        values[1] = FieldValue::Text("lots".into());
        assert_eq!(
            params(ExperimentKind::Latency, &fields, &values).unwrap_err().to_string(),
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
            kind: ExperimentKind::Memory,
            title: "Memory".into(),
            description: "pools".into(),
            defaults: ExperimentKind::Memory.default_params(),
            unavailable: Some("NCCL (libnccl.so.2) not found".into()),
        };
        let doc: ExperimentDoc = serde_json::from_str(&serde_json::to_string(&info).unwrap()).unwrap();
        assert_eq!(doc.defaults["blocks"], 8);
        assert_eq!(doc.unavailable.as_deref(), Some("NCCL (libnccl.so.2) not found"));
    }

    #[test]
    fn p2p_pairs_parse() {
        let (fields, mut values) = defaults(ExperimentKind::P2p);
        let at = fields.iter().position(|f| f.kind == FieldKind::Pairs).unwrap();
        values[at] = FieldValue::Text("0-1, 2 - 3".into());
        let p = params(ExperimentKind::P2p, &fields, &values).unwrap();
        assert_eq!(p["pairs"], json!([{ "a": 0, "b": 1 }, { "a": 2, "b": 3 }]));
        values[at] = FieldValue::Text("0>1".into());
        assert!(params(ExperimentKind::P2p, &fields, &values).is_err());
    }
}
