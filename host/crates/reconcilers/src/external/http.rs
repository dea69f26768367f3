//! `http` calls (a JSON reply) and `prometheus` instant queries over the HTTP API.

use serde_json::{Map, Value, json};

use super::{CallError, number};
use crate::http::excerpt;
use crate::replies::{self, ReplyError};

/// The largest `http` or `prometheus` reply read: a reply feeds templates, and more than
/// this is an endpoint misbehaving, not data to render.
pub const REPLY_MAX: usize = 4 * 1024 * 1024;
use inrun_blueprint::HttpMethod;

/// One rendered `http` call.
pub(super) struct HttpRequest<'a> {
    pub url: &'a str,
    pub method: HttpMethod,
    pub headers: &'a [(String, String)],
    pub body: Option<&'a Value>,
    pub token: Option<&'a str>,
}

/// Makes the request; a 2xx JSON reply is the result (an empty body is `null`).
pub(super) async fn fetch(
    client: &reqwest::Client,
    r: HttpRequest<'_>,
) -> Result<Value, CallError> {
    let mut call = match r.method {
        HttpMethod::Get => client.get(r.url),
        HttpMethod::Post => client.post(r.url),
    };
    for (k, v) in r.headers {
        call = call.header(k.as_str(), v.as_str());
    }
    if let Some(body) = r.body {
        call = call.json(body);
    }
    if let Some(token) = r.token {
        let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| CallError::BadToken)?;
        value.set_sensitive(true);
        call = call.header(reqwest::header::AUTHORIZATION, value);
    }
    json_reply(call).await
}

async fn json_reply(call: reqwest::RequestBuilder) -> Result<Value, CallError> {
    let response = call
        .send()
        .await
        .map_err(|e| CallError::Http(e.without_url()))?;
    let status = response.status();
    // The call's own timeout (around it) bounds the wait for room in the budget.
    let (body, held) = replies::read(response, REPLY_MAX, far_deadline())
        .await
        .map_err(|e| match e {
            ReplyError::TooLarge(_) => CallError::TooLarge(REPLY_MAX),
            ReplyError::Budget(hit) => CallError::Budget(hit),
            ReplyError::Transport(e) => CallError::Http(e.without_url()),
        })?;
    if !status.is_success() {
        return Err(CallError::Status {
            status: status.as_u16(),
            excerpt: excerpt(&body),
        });
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    replies::keep_parsed(held, &body).map_err(CallError::Budget)?;
    serde_json::from_slice(&body).map_err(|source| CallError::NotJson {
        excerpt: excerpt(&body),
        source,
    })
}

/// A deadline no call reaches: its own timeout, around it, ends it first.
pub(super) fn far_deadline() -> std::time::Instant {
    std::time::Instant::now() + std::time::Duration::from_secs(24 * 3600)
}

/// An instant query: `{value, labels, values: [{labels, value}], resultType}`, where
/// `value` and `labels` are the first series' (or the scalar's), `null` / `{}` when empty.
pub(super) async fn prometheus(
    client: &reqwest::Client,
    base: &str,
    query: &str,
) -> Result<Value, CallError> {
    let url = format!("{}/api/v1/query", base.trim_end_matches('/'));
    let reply = json_reply(client.get(url).query(&[("query", query)])).await;
    let reply = match reply {
        // Prometheus answers a bad query with 400 and a JSON error; keep its message.
        Err(CallError::Status { excerpt, .. }) => {
            return Err(CallError::Prometheus(excerpt));
        }
        other => other?,
    };
    if reply["status"] != "success" {
        return Err(CallError::Prometheus(
            reply["error"]
                .as_str()
                .unwrap_or("the reply's status is not success")
                .to_string(),
        ));
    }
    shape(&reply["data"])
}

fn sample(pair: &Value) -> Value {
    let text = pair.get(1).and_then(Value::as_str).unwrap_or_default();
    match text.parse::<f64>() {
        // Whole numbers stay integers, so `{{ .external.up.value }}` renders "1", not "1.0".
        Ok(f) if f.is_finite() && f.fract() == 0.0 && f.abs() < 9.0e15 => Value::from(f as i64),
        Ok(f) if f.is_finite() => number(f),
        _ => Value::String(text.to_string()),
    }
}

fn shape(data: &Value) -> Result<Value, CallError> {
    let kind = data["resultType"].as_str().unwrap_or_default();
    let values: Vec<Value> = match kind {
        "vector" => data["result"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| json!({"labels": s["metric"].clone(), "value": sample(&s["value"])}))
            .collect(),
        "matrix" => data["result"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                let last = s["values"].as_array().and_then(|v| v.last()).cloned();
                json!({"labels": s["metric"].clone(),
                       "value": last.map_or(Value::Null, |p| sample(&p))})
            })
            .collect(),
        "scalar" | "string" => vec![json!({"labels": {}, "value": sample(&data["result"])})],
        other => {
            return Err(CallError::Prometheus(format!(
                "unexpected resultType {other:?}"
            )));
        }
    };
    let first = values.first();
    Ok(json!({
        "resultType": kind,
        "value": first.map_or(Value::Null, |v| v["value"].clone()),
        "labels": first.map_or(Value::Object(Map::new()), |v| v["labels"].clone()),
        "values": values,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vector_becomes_values_with_labels_and_a_first_value() {
        let data = json!({"resultType": "vector", "result": [
            {"metric": {"job": "a"}, "value": [1.0, "2.5"]},
            {"metric": {"job": "b"}, "value": [1.0, "NaN"]}]});
        let v = shape(&data).expect("shape");
        assert_eq!(v["value"], 2.5);
        assert_eq!(v["labels"]["job"], "a");
        assert_eq!(v["values"][1]["value"], "NaN");
    }

    #[test]
    fn an_empty_vector_has_a_null_value() {
        let v = shape(&json!({"resultType": "vector", "result": []})).expect("shape");
        assert_eq!(v["value"], Value::Null);
        assert_eq!(v["values"], json!([]));
    }

    #[tokio::test]
    async fn a_reply_past_the_cap_is_refused_without_reading_it_all() {
        let body = format!("[{}1]", "1,".repeat(REPLY_MAX / 2 + 1));
        let (addr, _) = crate::remote::tests::server(format!(
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        ))
        .await;
        let url = format!("http://{addr}/big");
        let err = fetch(
            &reqwest::Client::new(),
            HttpRequest {
                url: &url,
                method: HttpMethod::Get,
                headers: &[],
                body: None,
                token: None,
            },
        )
        .await
        .expect_err("too large");
        assert!(matches!(err, CallError::TooLarge(REPLY_MAX)), "{err}");
    }
}
