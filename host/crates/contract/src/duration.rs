//! Durations as Kubernetes writes them (`metav1.Duration`, Go's `time.ParseDuration`):
//! `30s`, `1m30s`, `1.5s`, `500ms`, `2h45m`, `1h2m3s4ms5us6ns`.
//!
//! The text is split into `<number><unit>` terms as Go reads it (a term may repeat a unit or
//! have a fraction anywhere: `1h1h`, `10.5s4m`, `.5s`); each term's value is jiff's
//! exact integer arithmetic, and so is printing (`1m30s`, `1s500ms`: text Kubernetes reads).

use std::time::Duration;

use jiff::SignedDuration;
use jiff::fmt::friendly::{Designator, Spacing, SpanPrinter};

/// A duration string Kubernetes would not read, or one that is not positive.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid duration {input:?}: {why} (write e.g. 30s, 1m30s, 1.5s or 500ms)")]
pub struct DurationError {
    /// The text that was given.
    pub input: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// The units Go reads, longest first so `ms` is not read as `m`.
const UNITS: [&str; 8] = ["ns", "us", "µs", "μs", "ms", "h", "m", "s"];

/// One `<number><unit>` term of a duration: the number as written (digits, at most one
/// `.`), the unit as jiff spells it.
fn terms(text: &str) -> Result<Vec<(String, &'static str)>, &'static str> {
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest.starts_with('-') {
        return Err("it must be positive");
    }
    if rest.is_empty() {
        return Err("it is empty");
    }
    let mut out = Vec::new();
    while !rest.is_empty() {
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, after) = rest.split_at(end);
        if !number.bytes().any(|b| b.is_ascii_digit()) || number.matches('.').count() > 1 {
            return Err("expected a number");
        }
        let unit = UNITS
            .iter()
            .find(|u| after.starts_with(**u))
            .ok_or(if after.is_empty() {
                "a number needs a unit: ns, us, ms, s, m or h"
            } else {
                "the unit must be one of ns, us, ms, s, m or h"
            })?;
        rest = &after[unit.len()..];
        // jiff wants a digit on both sides of the point and writes micro as `µ`.
        let mut number = number.to_string();
        if number.starts_with('.') {
            number.insert(0, '0');
        }
        if number.ends_with('.') {
            number.pop();
        }
        let unit = match *unit {
            "us" | "μs" => "µs",
            u => u,
        };
        out.push((number, unit));
    }
    Ok(out)
}

/// Parses a duration as Kubernetes does; zero is refused (no setting here means "never").
///
/// # Errors
/// [`DurationError`] for text Go's `time.ParseDuration` would refuse, for zero and for
/// negative durations.
pub fn parse(input: &str) -> Result<Duration, DurationError> {
    let err = |why| DurationError {
        input: input.to_string(),
        why,
    };
    if input == "0" || input == "+0" {
        return Err(err("it must be more than zero"));
    }
    let mut total = SignedDuration::ZERO;
    for (number, unit) in terms(input).map_err(err)? {
        let term: SignedDuration = format!("{number}{unit}")
            .parse()
            .map_err(|_| err("a number is too long or too large"))?;
        total = total
            .checked_add(term)
            .ok_or_else(|| err("it is too large"))?;
    }
    if total.is_zero() {
        return Err(err("it must be more than zero"));
    }
    Duration::try_from(total).map_err(|_| err("it must be positive"))
}

/// Formats a duration as Kubernetes reads it, largest unit first: `1h30m`, `1m30s`,
/// `1s500ms`, `0s`.
pub fn format(d: Duration) -> String {
    const PRINTER: SpanPrinter = SpanPrinter::new()
        .designator(Designator::Compact)
        .spacing(Spacing::None);
    match SignedDuration::try_from(d) {
        Ok(d) => PRINTER.duration_to_string(&d),
        // Beyond 292 years: no setting is that long, but say something true.
        Err(_) => format!("{}s", d.as_secs()),
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

    const MS: fn(u64) -> Duration = Duration::from_millis;

    #[test]
    fn parses_what_kubernetes_parses() {
        // What Go's time.ParseDuration answers for each (k8s.io/apimachinery v0.36).
        for (text, nanos) in [
            ("250ms", 250_000_000u128),
            ("2s", 2_000_000_000),
            ("5m", 300_000_000_000),
            ("1h", 3_600_000_000_000),
            ("1m30s", 90_000_000_000),
            ("1.5s", 1_500_000_000),
            ("2h45m", 9_900_000_000_000),
            ("1.5h", 5_400_000_000_000),
            ("500us", 500_000),
            ("500µs", 500_000),
            ("500μs", 500_000),
            ("+5s", 5_000_000_000),
            ("1h1h", 7_200_000_000_000),
            (".5s", 500_000_000),
            ("5.s", 5_000_000_000),
            ("10.5s4m", 250_500_000_000),
            ("1h2m3s4ms5us6ns", 3_723_004_005_006),
            ("9223372036854775807ns", 9_223_372_036_854_775_807),
        ] {
            assert_eq!(parse(text).map(|d| d.as_nanos()), Ok(nanos), "{text}");
        }
    }

    #[test]
    fn refuses_what_kubernetes_refuses_and_what_is_not_positive() {
        for (bad, why) in [
            ("", "it is empty"),
            ("30", "a number needs a unit: ns, us, ms, s, m or h"),
            ("5 s", "the unit must be one of ns, us, ms, s, m or h"),
            ("1m 30s", "expected a number"),
            ("5d", "the unit must be one of ns, us, ms, s, m or h"),
            ("1S", "the unit must be one of ns, us, ms, s, m or h"),
            ("1sec", "expected a number"),
            ("1.5e3s", "the unit must be one of ns, us, ms, s, m or h"),
            ("PT5M", "expected a number"),
            ("1..5s", "expected a number"),
            ("s", "expected a number"),
            ("0", "it must be more than zero"),
            ("0s", "it must be more than zero"),
            ("-1s", "it must be positive"),
            ("-0", "it must be positive"),
            ("9223372036854775808ns", "a number is too long or too large"),
            (
                "99999999999999999999999h",
                "a number is too long or too large",
            ),
        ] {
            let err = parse(bad).expect_err(bad);
            assert_eq!(err.why, why, "{bad:?}");
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn formats_as_kubernetes_reads_and_reads_back() {
        assert_eq!(format(Duration::from_secs(120)), "2m");
        assert_eq!(format(Duration::from_secs(90)), "1m30s");
        assert_eq!(format(MS(1500)), "1s500ms");
        assert_eq!(format(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format(Duration::ZERO), "0s");
        for d in [
            MS(1),
            MS(1500),
            Duration::from_secs(86_400 * 3 + 7),
            Duration::from_nanos(5),
        ] {
            assert_eq!(parse(&format(d)), Ok(d), "{d:?}");
        }
    }
}
