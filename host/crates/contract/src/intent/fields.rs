//! Typed reading of an intent's `fields`, with the type's name at hand for errors.

use std::ops::RangeInclusive;

use serde_json::{Map, Value};

use super::{IntentDefaults, IntentError};

/// The `fields` of one intent, read with the type's name at hand for errors.
pub(super) struct Fields<'a> {
    /// The intent type, for errors.
    pub kind: &'static str,
    /// The fields as written.
    pub map: &'a Map<String, Value>,
    /// The CR's name and namespace.
    pub defaults: &'a IntentDefaults,
}

impl Fields<'_> {
    /// The field, with `null` taken as absent.
    pub(super) fn get(&self, field: &str) -> Option<&Value> {
        self.map.get(field).filter(|v| !v.is_null())
    }

    pub(super) fn invalid(&self, field: impl Into<String>, expected: &'static str) -> IntentError {
        IntentError::InvalidField {
            kind: self.kind,
            field: field.into(),
            expected,
        }
    }

    pub(super) fn string(&self, field: &str) -> Result<Option<String>, IntentError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(s)) if !s.is_empty() => Ok(Some(s.clone())),
            Some(_) => Err(self.invalid(field, "a non-empty string")),
        }
    }

    pub(super) fn required_string(&self, field: &'static str) -> Result<String, IntentError> {
        self.string(field)?.ok_or(IntentError::MissingField {
            kind: self.kind,
            field,
        })
    }

    /// An integer in `range`; a string of digits counts (templates often render them).
    pub(super) fn int(
        &self,
        field: &str,
        range: RangeInclusive<i64>,
        expected: &'static str,
    ) -> Result<Option<i64>, IntentError> {
        let Some(value) = self.get(field) else {
            return Ok(None);
        };
        let number = match value {
            Value::Number(n) => n.as_i64(),
            Value::String(s) => s.trim().parse().ok(),
            _ => None,
        };
        match number {
            Some(n) if range.contains(&n) => Ok(Some(n)),
            _ => Err(self.invalid(field, expected)),
        }
    }

    /// A port number (1-65535).
    pub(super) fn port(&self, field: &str) -> Result<Option<i64>, IntentError> {
        self.int(field, 1..=PORT_MAX, "a port number (1-65535)")
    }

    /// A count Kubernetes keeps in an int32 (replicas, backoffLimit, seconds).
    pub(super) fn count(&self, field: &str) -> Result<Option<i64>, IntentError> {
        self.int(field, 0..=i64::from(i32::MAX), "a non-negative integer")
    }

    /// A port given as a number, or as a name for the ports that can be named.
    pub(super) fn port_or_name(&self, field: &str) -> Result<Option<Value>, IntentError> {
        match self.get(field) {
            Some(Value::String(s)) if s.parse::<i64>().is_err() && !s.is_empty() => {
                Ok(Some(Value::String(s.clone())))
            }
            _ => Ok(self.port(field)?.map(Value::from)),
        }
    }

    /// A map whose values become strings (labels, annotations, data, env).
    pub(super) fn string_map(
        &self,
        field: &str,
    ) -> Result<Option<Map<String, Value>>, IntentError> {
        let Some(value) = self.get(field) else {
            return Ok(None);
        };
        let map = value
            .as_object()
            .ok_or_else(|| self.invalid(field, "a map of strings"))?;
        let mut out = Map::new();
        for (key, item) in map {
            let text = scalar_text(item).ok_or_else(|| {
                self.invalid(format!("{field}.{key}"), "a string, number or bool")
            })?;
            out.insert(key.clone(), Value::String(text));
        }
        Ok(Some(out))
    }

    /// A list of strings; a single string is a list of one.
    pub(super) fn string_list(&self, field: &str) -> Result<Option<Vec<Value>>, IntentError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(vec![Value::String(s.clone())])),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| scalar_text(item).map(Value::String))
                .collect::<Option<Vec<_>>>()
                .map(Some)
                .ok_or_else(|| self.invalid(field, "a list of strings")),
            Some(_) => Err(self.invalid(field, "a list of strings")),
        }
    }

    pub(super) fn object(&self, field: &str) -> Result<Option<Value>, IntentError> {
        match self.get(field) {
            None => Ok(None),
            Some(v @ Value::Object(_)) => Ok(Some(v.clone())),
            Some(_) => Err(self.invalid(field, "an object")),
        }
    }

    /// One of `choices`, or `default`.
    pub(super) fn choice(
        &self,
        field: &str,
        choices: &[&str],
        default: &str,
    ) -> Result<String, IntentError> {
        match self.string(field)? {
            None => Ok(default.to_owned()),
            Some(s) if choices.contains(&s.as_str()) => Ok(s),
            Some(_) => Err(self.invalid(field, "one of the values Kubernetes accepts for it")),
        }
    }
}

pub(super) const PORT_MAX: i64 = 65535;

/// Strings stay; numbers and bools print; null is empty; anything else is refused.
fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Null => Some(String::new()),
        _ => None,
    }
}

/// Adds `key: value` to `map` when `value` is present.
pub(super) fn put(map: &mut Map<String, Value>, key: &str, value: Option<impl Into<Value>>) {
    if let Some(value) = value {
        map.insert(key.to_owned(), value.into());
    }
}
