//! Human durations as Blueprints and Results write them: `500ms`, `2s`, `5m`, `1h`.

use std::time::Duration;

/// A duration string that is not a positive whole number followed by `ms`, `s`, `m` or `h`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "invalid duration {input:?}: expected a positive whole number followed by ms, s, m or h (e.g. 30s)"
)]
pub struct DurationError {
    /// The text that was given.
    pub input: String,
}

/// Parses `500ms`, `2s`, `5m`, `1h`. A bare number is not accepted, so a unit is never guessed.
///
/// # Errors
/// [`DurationError`] for anything else, including zero and negative values.
pub fn parse(input: &str) -> Result<Duration, DurationError> {
    let err = || DurationError {
        input: input.to_string(),
    };
    let text = input.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).ok_or_else(err)?;
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().map_err(|_| err())?;
    if n == 0 {
        return Err(err());
    }
    let ms = match unit {
        "ms" => Some(n),
        "s" => n.checked_mul(1_000),
        "m" => n.checked_mul(60_000),
        "h" => n.checked_mul(3_600_000),
        _ => None,
    }
    .ok_or_else(err)?;
    Ok(Duration::from_millis(ms))
}

/// Formats a duration in the largest unit that divides it exactly (`90s`, `2m`, `1500ms`).
pub fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        "0s".to_string()
    } else if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1_000) {
        format!("{}s", ms / 1_000)
    } else {
        format!("{ms}ms")
    }
}

/// `#[serde(with = "crate::duration::serde_str")]` for `Duration` fields.
pub mod serde_str {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// Writes the duration as a string like `30s`.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::format(*d))
    }

    /// Reads a string like `30s`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        super::parse(&text).map_err(serde::de::Error::custom)
    }
}

/// `#[serde(with = "crate::duration::serde_opt")]` for `Option<Duration>` fields.
pub mod serde_opt {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    /// Writes `Some` as a string like `30s`, `None` as null.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&super::format(*d)),
            None => s.serialize_none(),
        }
    }

    /// Reads an optional string like `30s`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| super::parse(&text).map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_unit() {
        assert_eq!(parse("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
    }

    #[test]
    fn refuses_bare_numbers_zero_and_unknown_units() {
        for bad in ["30", "0s", "-1s", "1d", "s", "", "1.5s"] {
            assert!(parse(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn formats_in_the_largest_exact_unit() {
        assert_eq!(format(Duration::from_secs(120)), "2m");
        assert_eq!(format(Duration::from_secs(90)), "90s");
        assert_eq!(format(Duration::from_millis(1500)), "1500ms");
    }
}
