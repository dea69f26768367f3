//! Converts between JSON values (what Kubernetes objects are) and minijinja values.
//!
//! minijinja's serde support is an optional feature; the two directions are small enough
//! to write here, and doing so keeps control over numbers, undefined and odd objects.

use minijinja::Value as Jinja;
use minijinja::value::ValueKind;
use serde_json::{Map, Number, Value as Json};

/// How deep a rendered value may nest before it is refused (guards against runaway
/// self-referencing objects).
const MAX_DEPTH: usize = 128;

/// Converts a JSON value into a minijinja value, keeping map order.
pub(crate) fn to_jinja(value: &Json) -> Jinja {
    match value {
        Json::Null => Jinja::from(()),
        Json::Bool(b) => Jinja::from(*b),
        Json::Number(n) => number_to_jinja(n),
        Json::String(s) => Jinja::from(s.as_str()),
        Json::Array(items) => Jinja::from(items.iter().map(to_jinja).collect::<Vec<_>>()),
        Json::Object(map) => Jinja::from_pairs(map.iter().map(|(k, v)| (k.as_str(), to_jinja(v)))),
    }
}

fn number_to_jinja(n: &Number) -> Jinja {
    if let Some(i) = n.as_i64() {
        Jinja::from(i)
    } else if let Some(u) = n.as_u64() {
        Jinja::from(u)
    } else {
        Jinja::from(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// Converts a rendered minijinja value into JSON.
///
/// Undefined and none become `null`; iterables become lists; maps keep their order; other
/// objects (macros, namespaces without entries) become their printed form.
///
/// # Errors
///
/// A reason, when the value cannot be JSON: a number that is not finite, or nesting
/// deeper than a sane limit.
pub(crate) fn to_json(value: &Jinja) -> Result<Json, String> {
    to_json_at(value, 0)
}

fn to_json_at(value: &Jinja, depth: usize) -> Result<Json, String> {
    if depth > MAX_DEPTH {
        return Err(format!("it nests deeper than {MAX_DEPTH} levels"));
    }
    Ok(match value.kind() {
        ValueKind::Undefined | ValueKind::None => Json::Null,
        ValueKind::Bool => Json::Bool(value.is_true()),
        ValueKind::Number => number_to_json(value)?,
        ValueKind::String => Json::String(value.as_str().unwrap_or_default().to_owned()),
        ValueKind::Bytes => {
            Json::String(String::from_utf8_lossy(value.as_bytes().unwrap_or_default()).into_owned())
        }
        ValueKind::Seq | ValueKind::Iterable => {
            let items = value.try_iter().map_err(|e| e.to_string())?;
            Json::Array(
                items
                    .map(|item| to_json_at(&item, depth + 1))
                    .collect::<Result<_, _>>()?,
            )
        }
        ValueKind::Map => {
            let keys = value.try_iter().map_err(|e| e.to_string())?;
            let mut map = Map::new();
            for key in keys {
                let item = value.get_item(&key).map_err(|e| e.to_string())?;
                let key = match key.as_str() {
                    Some(s) => s.to_owned(),
                    None => key.to_string(),
                };
                map.insert(key, to_json_at(&item, depth + 1)?);
            }
            Json::Object(map)
        }
        ValueKind::Invalid => {
            return Err(value.to_string());
        }
        _ => Json::String(value.to_string()),
    })
}

fn number_to_json(value: &Jinja) -> Result<Json, String> {
    if value.is_integer() {
        if let Ok(i) = i64::try_from(value.clone()) {
            return Ok(Json::from(i));
        }
        if let Ok(u) = u64::try_from(value.clone()) {
            return Ok(Json::from(u));
        }
    }
    let f = f64::try_from(value.clone()).map_err(|e| e.to_string())?;
    Number::from_f64(f)
        .map(Json::Number)
        .ok_or_else(|| format!("the number {f} is not finite"))
}

/// Truthiness as Inrun conditions see it: `false`, null/undefined, `""`, `"false"`, `0`
/// and empty lists or maps are false; everything else is true.
pub(crate) fn is_truthy(value: &Jinja) -> bool {
    match value.kind() {
        ValueKind::Undefined | ValueKind::None => false,
        ValueKind::String => value.as_str().is_some_and(is_truthy_text),
        ValueKind::Seq | ValueKind::Map => value.len() != Some(0),
        _ => value.is_true(),
    }
}

/// Truthiness of rendered text: empty (after trimming) and `false` in any case are false.
pub(crate) fn is_truthy_text(text: &str) -> bool {
    let text = text.trim();
    !(text.is_empty() || text.eq_ignore_ascii_case("false"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_survives_a_round_trip_with_order_and_types() {
        let value = json!({
            "z": 1, "a": -2, "big": u64::MAX, "f": 1.5, "s": "x", "b": true,
            "n": null, "list": [1, "two", {"three": 3}]
        });
        assert_eq!(to_json(&to_jinja(&value)), Ok(value.clone()));
        let keys: Vec<String> = to_json(&to_jinja(&value))
            .ok()
            .and_then(|v| v.as_object().map(|m| m.keys().cloned().collect()))
            .unwrap_or_default();
        assert_eq!(keys, ["z", "a", "big", "f", "s", "b", "n", "list"]);
    }

    #[test]
    fn undefined_becomes_null() {
        assert_eq!(to_json(&Jinja::UNDEFINED), Ok(Json::Null));
    }

    #[test]
    fn non_finite_numbers_are_refused() {
        assert!(to_json(&Jinja::from(f64::INFINITY)).is_err());
    }

    #[test]
    fn truthiness_follows_inrun_rules() {
        for falsy in [
            json!(false),
            json!(null),
            json!(""),
            json!("false"),
            json!("False"),
            json!(0),
            json!(0.0),
            json!([]),
            json!({}),
        ] {
            assert!(!is_truthy(&to_jinja(&falsy)), "{falsy} should be false");
        }
        for truthy in [
            json!(true),
            json!("x"),
            json!("0"),
            json!(1),
            json!([0]),
            json!({"a": 1}),
        ] {
            assert!(is_truthy(&to_jinja(&truthy)), "{truthy} should be true");
        }
        assert!(!is_truthy(&Jinja::UNDEFINED));
    }
}
