//! Reading an answer of Prometheus's query API (`/api/v1/query`): an instant vector, decoded in
//! one pass straight into its series (the usual case, and 8,000 series at 1,000 hosts), or the
//! error, result type or stranger body it is instead, in words a user can act on.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::client::{PrometheusError, Series};

/// An instant vector with its series' names, the engine's warnings, and the instant it was
/// evaluated at, by the engine's clock (seconds since the epoch; `None` for an empty vector).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Answered {
    pub series: Vec<(String, Series)>,
    pub warnings: Vec<String>,
    pub at_s: Option<f64>,
}

/// The answer `body` (HTTP `status`) to `query`, from the engine at `url`.
pub fn decode(body: &[u8], status: u16, query: &str, url: &str) -> Result<Answered, PrometheusError> {
    // The fast path: a successful vector, typed all the way down. Anything else takes the
    // generic path, which says what it was.
    if let Ok(VectorAnswer { status, data: Some(VectorData { result_type, result }), warnings }) =
        serde_json::from_slice::<VectorAnswer>(body)
        && status == "success"
        && result_type == "vector"
    {
        return Ok(answered(result, warnings));
    }
    let url = url.to_owned();
    // Prometheus answers query errors as JSON too (400, 422, 503): read the body before the status.
    let answer: Answer = match serde_json::from_slice(body) {
        Ok(answer) => answer,
        Err(_) if !(200..300).contains(&status) => return Err(PrometheusError::Status { url, status }),
        Err(e) => return Err(PrometheusError::Decode { url, reason: e.to_string() }),
    };
    if answer.status != "success" {
        return Err(PrometheusError::Query {
            query: query.to_owned(),
            kind: answer.error_type.unwrap_or_else(|| format!("HTTP {status}")),
            message: answer.error.unwrap_or_default(),
        });
    }
    let data =
        answer.data.ok_or_else(|| PrometheusError::Decode { url: url.clone(), reason: "no `data`".to_owned() })?;
    if data.result_type != "vector" {
        return Err(PrometheusError::NotAVector { query: query.to_owned(), kind: data.result_type });
    }
    let result: Vec<RawSeries> = serde_json::from_value(data.result)
        .map_err(|e| PrometheusError::Decode { url, reason: format!("a vector of unexpected shape: {e}") })?;
    Ok(answered(result, answer.warnings))
}

/// The series of a decoded vector, NaN and ±Inf left out (they carry no figure a page could show).
fn answered(result: Vec<RawSeries>, warnings: Vec<String>) -> Answered {
    let at_s = result.first().map(|s| s.value.0).filter(|t| t.is_finite());
    let series = result
        .into_iter()
        .filter_map(|RawSeries { mut metric, value: (_, value) }| {
            let value = value.parse::<f64>().ok().filter(|v| v.is_finite())?;
            let name = metric.remove("__name__").unwrap_or_default();
            Some((name, Series { labels: metric, value }))
        })
        .collect();
    Answered { series, warnings, at_s }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct VectorAnswer {
    status: String,
    data: Option<VectorData>,
    #[serde(default)]
    warnings: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct VectorData {
    result_type: String,
    result: Vec<RawSeries>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Answer {
    status: String,
    data: Option<Data>,
    error_type: Option<String>,
    error: Option<String>,
    #[serde(default)]
    warnings: Vec<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Data {
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct RawSeries {
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vector_carries_the_engines_time_of_evaluation() {
        let body = br#"{"status":"success","data":{"resultType":"vector","result":[
            {"metric":{"__name__":"up","instance":"a:1"},"value":[1700000000.5,"1"]},
            {"metric":{"instance":"b:1"},"value":[1700000000.5,"NaN"]}]}}"#;
        let answered = decode(body, 200, "up", "http://p/").unwrap();
        assert_eq!(answered.at_s, Some(1_700_000_000.5));
        assert_eq!(answered.series.len(), 1, "NaN is no figure");
        assert_eq!((answered.series[0].0.as_str(), answered.series[0].1.label("instance")), ("up", Some("a:1")));
        let empty = br#"{"status":"success","data":{"resultType":"vector","result":[]}}"#;
        assert_eq!(decode(empty, 200, "up", "http://p/").unwrap().at_s, None);
    }

    #[test]
    fn anything_but_a_vector_says_what_it_was() {
        let scalar = br#"{"status":"success","data":{"resultType":"scalar","result":[1700000000,"1"]}}"#;
        let err = decode(scalar, 200, "time()", "http://p/").unwrap_err().to_string();
        assert!(err.contains("with a scalar, not an instant vector"), "{err}");
        let error = br#"{"status":"error","errorType":"bad_data","error":"parse error"}"#;
        let err = decode(error, 400, "up{", "http://p/").unwrap_err().to_string();
        assert!(err.contains("bad_data: parse error"), "{err}");
        let err = decode(b"<html>", 404, "up", "http://p/").unwrap_err().to_string();
        assert!(err.contains("answered HTTP 404"), "{err}");
        let odd = br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":1}]}}"#;
        let err = decode(odd, 200, "up", "http://p/").unwrap_err().to_string();
        assert!(err.contains("a vector of unexpected shape"), "{err}");
    }
}
