//! The registry, the parameters' reading and each kind's fields, defaults, validation and footprint.

#![allow(clippy::unwrap_used)]

use super::*;
use crate::experiments::latency::params::LatencyParams;
use crate::experiments::memory::params::MemoryParams;
use crate::experiments::precision::params::PrecisionParams;
use crate::experiments::streams::params::StreamsParams;
use crate::experiments::transfer::params::{CopyKind, TransferParams};
use serde_json::{Value, json};
use shared::lab::{ExperimentKind, Input};

#[test]
fn defaults_are_valid() {
    for experiment in ALL {
        validate(&experiment.defaults()).unwrap_or_else(|e| panic!("{}: {e}", experiment.kind()));
    }
}

/// Registered names are distinct and well formed, read back from JSON and the command line, and
/// a name that is no experiment is refused with the list.
#[test]
fn the_registry_names_each_experiment_once() {
    let names: Vec<String> = kinds().iter().map(|k| k.name().to_owned()).collect();
    let mut distinct = names.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), names.len(), "{names:?}");
    for kind in kinds() {
        let read: ExperimentKind = serde_json::from_value(Value::from(kind.name())).unwrap();
        assert_eq!(read, kind);
        assert_eq!(parse(&format!(" {} ", kind.name().to_uppercase())), Ok(kind.clone()));
        assert_eq!(find(&kind).unwrap().defaults().kind, kind);
    }
    assert!(super::names().starts_with("memory, transfer, "), "{}", super::names());
    let err = parse("fft").unwrap_err().to_string();
    assert!(err.starts_with("'fft' is not an experiment; use memory, transfer"), "{err}");
    let unknown = ExperimentParams::defaults(ExperimentKind::named("fft"));
    assert!(validate(&unknown).unwrap_err().0.contains("'fft' is not an experiment"));
    assert!(footprint(&unknown).unwrap_err().0.contains("'fft' is not an experiment"));
}

/// Parameters that do not read as the kind's are refused in serde's words, and a request is stored
/// with every default filled in.
#[test]
fn parameters_read_as_the_kinds_own_and_are_stored_in_full() {
    let mut bad: ExperimentParams = serde_json::from_str(r#"{"kind":"memory","blokcs":3}"#).unwrap();
    let err = find(&bad.kind).unwrap().normalize(&mut bad).unwrap_err().0;
    assert!(err.starts_with("memory parameters: unknown field `blokcs`"), "{err}");
    let long = format!(r#"{{"kind":"memory","{}":1}}"#, "x".repeat(70_000));
    let mut long: ExperimentParams = serde_json::from_str(&long).unwrap();
    let said = find(&long.kind).unwrap().normalize(&mut long).unwrap_err().0;
    assert!(said.chars().count() <= MAX_SAID + 20 && said.ends_with('…'), "{}", said.len());
    let mut wrong_type: ExperimentParams = serde_json::from_str(r#"{"kind":"latency","repetitions":-5}"#).unwrap();
    assert!(validate(&wrong_type).unwrap_err().0.contains("invalid value: integer `-5`"));
    assert!(find(&wrong_type.kind).unwrap().normalize(&mut wrong_type).is_err());
    let mut few: ExperimentParams = serde_json::from_str(r#"{"kind":"latency","repetitions":50}"#).unwrap();
    find(&few.kind).unwrap().normalize(&mut few).unwrap();
    assert_eq!(serde_json::to_string(&few).unwrap(), r#"{"kind":"latency","repetitions":50,"warmup":100}"#);
}

/// The default of the parameter a field names ("ddp.tokens" inside the group).
fn default_of<'a>(defaults: &'a Value, name: &str) -> &'a Value {
    name.split('.').fold(defaults, |v, key| &v[key])
}

/// Every parameter has its field and every field its parameter, with an input that reads its default
/// and choices the server accepts: a parameter added without a field fails here.
#[test]
fn every_parameter_has_a_field_that_reads_its_default() {
    for experiment in ALL {
        let kind = experiment.kind();
        let defaults = serde_json::to_value(experiment.defaults()).unwrap();
        let mut names: Vec<String> = Vec::new();
        for (name, value) in defaults.as_object().unwrap().iter().filter(|(name, _)| *name != "kind") {
            names.push(name.clone());
            if let Value::Object(inner) = value {
                names.extend(inner.keys().map(|key| format!("{name}.{key}")));
            }
        }
        let fields = experiment.fields();
        let mut listed: Vec<String> = fields.iter().map(|f| f.name.clone()).collect();
        names.sort();
        listed.sort();
        assert_eq!(listed, names, "{kind:?}: fields against parameters");
        for field in &fields {
            let value = default_of(&defaults, &field.name);
            let numbers = |v: &Value| v.as_array().is_some_and(|a| a.iter().all(Value::is_u64));
            let (fits, names): (bool, Vec<&str>) = match &field.input {
                Input::Count | Input::Bytes | Input::Parameters => (value.is_u64(), vec![]),
                Input::CountList { .. } | Input::BytesList => (numbers(value), vec![]),
                Input::Pairs => (value.is_array(), vec![]),
                Input::Switch => (value.is_object() || value.is_null(), vec![]),
                Input::Choices { choices } => (value.is_array(), choices.iter().map(|c| c.name.as_str()).collect()),
                Input::OneOf { choices } => (value.is_string(), choices.iter().map(String::as_str).collect()),
            };
            assert!(fits, "{kind:?}: {} reads {value} as {:?}", field.name, field.input);
            // Each choice alone is a request the server takes.
            for name in names {
                let mut request = defaults.clone();
                let one = if matches!(field.input, Input::Choices { .. }) { json!([name]) } else { json!(name) };
                match field.name.split_once('.') {
                    Some((parent, key)) => request[parent][key] = one,
                    None => request[field.name.as_str()] = one,
                }
                let params: ExperimentParams = serde_json::from_value(request)
                    .unwrap_or_else(|e| panic!("{kind:?}: {} = {name}: {e}", field.name));
                validate(&params).unwrap_or_else(|e| panic!("{kind:?}: {} = {name}: {e}", field.name));
            }
        }
    }
}

#[test]
fn bad_values_name_the_field_and_the_range() {
    let bad = [
        (
            params_of::<memory::Memory>(&MemoryParams { blocks: 0, ..Default::default() }),
            "'blocks' must be from 1 to 64",
        ),
        (
            params_of::<transfer::Transfer>(&TransferParams { sizes: vec![2 << 30], ..Default::default() }),
            "'sizes' must be from 4096 to 1073741824 bytes (4.00 KiB to 1.00 GiB), got '2147483648'",
        ),
        (
            params_of::<transfer::Transfer>(&TransferParams { copies: vec![], ..Default::default() }),
            "'copies' must name at least one of h2d_pageable, h2d_pinned, d2h_pageable, d2h_pinned, d2d or d2d_kernel",
        ),
        (params_of::<streams::Streams>(&StreamsParams { kernels: 1, ..Default::default() }), "'kernels'"),
        (
            params_of::<precision::Precision>(&PrecisionParams { sizes: vec![], ..Default::default() }),
            "'sizes' must list",
        ),
        (params_of::<latency::Latency>(&LatencyParams { repetitions: 5, ..Default::default() }), "'repetitions'"),
    ];
    for (params, expected) in bad {
        let err = validate(&params).unwrap_err().0;
        assert!(err.contains(expected), "{err}");
    }
}

#[test]
fn footprints_follow_the_parameters() {
    let memory = params_of::<memory::Memory>(&MemoryParams { block_bytes: GIB, blocks: 4, ..Default::default() });
    assert_eq!(footprint(&memory).unwrap().device, 5 * GIB);
    let h2d = params_of::<transfer::Transfer>(&TransferParams {
        sizes: vec![MIB, 64 * MIB],
        copies: vec![CopyKind::H2dPinned],
        ..Default::default()
    });
    assert_eq!(footprint(&h2d).unwrap(), Footprint { device: 64 * MIB, pinned_host: 64 * MIB, host: 0 });
    let kernel = params_of::<transfer::Transfer>(&TransferParams {
        sizes: vec![MIB, 64 * MIB],
        copies: vec![CopyKind::D2dKernel],
        ..Default::default()
    });
    assert_eq!(footprint(&kernel).unwrap(), Footprint { device: 128 * MIB, pinned_host: 0, host: 0 });
    let all = params_of::<transfer::Transfer>(&TransferParams::default());
    assert_eq!(footprint(&all).unwrap(), Footprint { device: 2 * GIB, pinned_host: GIB, host: GIB });
}
