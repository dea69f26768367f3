//! Byte sizes written as Kubernetes resource quantities: `64Mi`, `1.5Gi`, `500M`, `1e6`,
//! or plain bytes. The grammar is `resource.Quantity`'s: binary suffixes `Ki Mi Gi Ti Pi
//! Ei`, decimal `n u m k M G T P E`, or an exponent `e3`/`E-3`; `K`, `KB` or `Gb` are not
//! Kubernetes and are refused. A size is whole bytes: a fraction of a byte rounds up, as
//! `Quantity.Value()` does.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A size in bytes, read from a Kubernetes quantity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity(u64);

/// A size Kubernetes would not read, or one that is negative or too large.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid size {input:?}: {why} (write e.g. 64Mi, 1.5Gi, 500M or 4096)")]
pub struct QuantityError {
    /// The text that was given.
    pub input: String,
    /// What is wrong with it.
    pub why: &'static str,
}

/// Binary suffixes: powers of 1024.
const BINARY: [(&str, u32); 6] = [
    ("Ki", 1),
    ("Mi", 2),
    ("Gi", 3),
    ("Ti", 4),
    ("Pi", 5),
    ("Ei", 6),
];
/// Decimal suffixes: powers of ten.
const DECIMAL: [(&str, i32); 8] = [
    ("n", -9),
    ("u", -6),
    ("m", -3),
    ("k", 3),
    ("M", 6),
    ("G", 9),
    ("T", 12),
    ("P", 15),
];
/// More significant digits than any size needs; bounds the arithmetic.
const MAX_DIGITS: usize = 30;

/// `⌈n / 10^k⌉` for `n` below 10^30.
fn div_pow10_ceil(n: u128, k: u32) -> u128 {
    match 10u128.checked_pow(k) {
        Some(d) => n.div_ceil(d),
        // 10^k > n: a positive fraction below one byte.
        None => u128::from(n > 0),
    }
}

impl Quantity {
    /// One kibibyte.
    pub const KI: Quantity = Quantity(1 << 10);
    /// One mebibyte.
    pub const MI: Quantity = Quantity(1 << 20);
    /// One gibibyte.
    pub const GI: Quantity = Quantity(1 << 30);

    /// A quantity of `bytes` bytes.
    pub const fn from_bytes(bytes: u64) -> Self {
        Quantity(bytes)
    }

    /// The size in bytes.
    pub const fn bytes(self) -> u64 {
        self.0
    }

    /// Parses a Kubernetes quantity as a size in bytes.
    ///
    /// # Errors
    /// [`QuantityError`] for text `resource.Quantity` would not read, negative sizes and
    /// sizes above `u64::MAX` bytes.
    pub fn parse(input: &str) -> Result<Self, QuantityError> {
        let err = |why| QuantityError {
            input: input.to_string(),
            why,
        };
        let text = input.strip_prefix('+').unwrap_or(input);
        if text.starts_with('-') {
            return Err(err("a size cannot be negative"));
        }
        let end = text
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(text.len());
        let (number, suffix) = text.split_at(end);
        let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
        if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
            return Err(err("expected a number"));
        }
        // Trailing zeros of a fraction change nothing (`1.500Gi`).
        let fraction = fraction.trim_end_matches('0');
        let digits = format!("{whole}{fraction}");
        let digits = digits.trim_start_matches('0');
        if digits.len() > MAX_DIGITS {
            return Err(err("too many digits"));
        }
        let mantissa: u128 = if digits.is_empty() {
            0
        } else {
            digits.parse().map_err(|_| err("expected a number"))?
        };
        // The number is mantissa / 10^scale.
        let scale = u32::try_from(fraction.len()).map_err(|_| err("too many digits"))?;
        let bytes = if let Some((_, power)) = BINARY.iter().find(|(s, _)| *s == suffix) {
            let factor = 1024u128.pow(*power);
            div_pow10_ceil(
                mantissa
                    .checked_mul(factor)
                    .ok_or_else(|| err("too large"))?,
                scale,
            )
        } else {
            let exponent = decimal_exponent(suffix).map_err(err)?;
            times_pow10(mantissa, i64::from(exponent) - i64::from(scale)).map_err(err)?
        };
        u64::try_from(bytes)
            .map(Quantity)
            .map_err(|_| err("too large"))
    }
}

/// The power of ten a decimal suffix (`k`, `M`, ..., or an exponent like `e3`) stands for.
fn decimal_exponent(suffix: &str) -> Result<i32, &'static str> {
    Ok(match suffix {
        "" => 0,
        "E" => 18,
        s => match DECIMAL.iter().find(|(d, _)| *d == s) {
            Some((_, e)) => *e,
            None => match s.strip_prefix(['e', 'E']) {
                Some(e) if !e.is_empty() => e.parse().map_err(|_| "a bad exponent")?,
                _ => {
                    return Err(if s == "K" || s == "KB" || s == "Gb" || s == "MB" {
                        "Kubernetes writes k for 1000 and Ki for 1024"
                    } else {
                        "the suffix must be one of Ki Mi Gi Ti Pi Ei, n u m k M G T P E, or an exponent like e3"
                    });
                }
            },
        },
    })
}

/// `mantissa * 10^shift`, rounded up when `shift` is negative.
fn times_pow10(mantissa: u128, shift: i64) -> Result<u128, &'static str> {
    if shift >= 0 {
        let k = u32::try_from(shift).map_err(|_| "too large")?;
        match 10u128.checked_pow(k) {
            Some(f) => mantissa.checked_mul(f).ok_or("too large"),
            None if mantissa == 0 => Ok(0),
            None => Err("too large"),
        }
    } else {
        let k = u32::try_from(-shift).unwrap_or(u32::MAX);
        Ok(div_pow10_ceil(mantissa, k))
    }
}

impl fmt::Display for Quantity {
    /// Writes the largest suffix that divides the size exactly, binary before decimal.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0;
        if n == 0 {
            return f.write_str("0");
        }
        let order = [
            ("Ti", 1u64 << 40),
            ("Gi", 1 << 30),
            ("Mi", 1 << 20),
            ("Ki", 1 << 10),
            ("T", 1_000_000_000_000),
            ("G", 1_000_000_000),
            ("M", 1_000_000),
            ("k", 1_000),
        ];
        match order.iter().find(|(_, unit)| n.is_multiple_of(*unit)) {
            Some((suffix, unit)) => write!(f, "{}{suffix}", n / unit),
            None => write!(f, "{n}"),
        }
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(QuantityVisitor)
    }
}

impl schemars::JsonSchema for Quantity {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Quantity".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "x-kubernetes-int-or-string": true,
            "description": "A size in bytes: a number, or a quantity such as 64Mi or 1.5Gi."
        })
    }
}

struct QuantityVisitor;

impl Visitor<'_> for QuantityVisitor {
    type Value = Quantity;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a size such as 64Mi, 1Gi or a number of bytes")
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Quantity, E> {
        Ok(Quantity(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Quantity, E> {
        u64::try_from(v).map(Quantity).map_err(|_| {
            E::custom(QuantityError {
                input: v.to_string(),
                why: "a size cannot be negative",
            })
        })
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Quantity, E> {
        Quantity::parse(v).map_err(E::custom)
    }

    /// YAML reads an unquoted `1e6` or `1.5` as a float: read its shortest decimal text
    /// as a quantity (NaN, infinities and negatives are refused there).
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Quantity, E> {
        Quantity::parse(&v.to_string()).map_err(E::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(text: &str) -> Result<u64, &'static str> {
        Quantity::parse(text)
            .map(Quantity::bytes)
            .map_err(|e| e.why)
    }

    #[test]
    fn reads_sizes_as_kubernetes_does() {
        // What resource.Quantity's Value() answers for each (k8s.io/apimachinery v0.36).
        for (text, value) in [
            ("64Mi", 64u64 << 20),
            ("1.5Gi", 1_610_612_736),
            ("500M", 500_000_000),
            ("100m", 1),
            ("1e3", 1000),
            ("1E3", 1000),
            ("1e-3", 1),
            ("1.5e3", 1500),
            ("128Mi", 134_217_728),
            ("1Ki", 1024),
            ("1k", 1000),
            ("0.1m", 1),
            ("1.5", 2),
            ("+1Gi", 1 << 30),
            ("1Ei", 1 << 60),
            ("1E", 1_000_000_000_000_000_000),
            ("1m", 1),
            ("0.5", 1),
            ("1u", 1),
            ("1n", 1),
            (".5Gi", 536_870_912),
            ("5.Gi", 5_368_709_120),
            ("1.5Mi", 1_572_864),
            ("1.0000000001Gi", 1_073_741_825),
            ("4096", 4096),
            ("0", 0),
            ("18446744073709551615", u64::MAX),
        ] {
            assert_eq!(bytes(text), Ok(value), "{text}");
        }
    }

    #[test]
    fn refuses_what_kubernetes_refuses_negatives_and_overflow() {
        for (bad, why) in [
            ("1K", "Kubernetes writes k for 1000 and Ki for 1024"),
            ("1KB", "Kubernetes writes k for 1000 and Ki for 1024"),
            ("1Gb", "Kubernetes writes k for 1000 and Ki for 1024"),
            (
                "1ki",
                "the suffix must be one of Ki Mi Gi Ti Pi Ei, n u m k M G T P E, or an exponent like e3",
            ),
            (
                "1 Gi",
                "the suffix must be one of Ki Mi Gi Ti Pi Ei, n u m k M G T P E, or an exponent like e3",
            ),
            ("1e3Ki", "a bad exponent"),
            (
                "1e",
                "the suffix must be one of Ki Mi Gi Ti Pi Ei, n u m k M G T P E, or an exponent like e3",
            ),
            ("", "expected a number"),
            ("Gi", "expected a number"),
            ("1.2.3", "expected a number"),
            ("nan", "expected a number"),
            ("-1Gi", "a size cannot be negative"),
            ("18446744073709551616", "too large"),
            ("16Ei", "too large"),
            ("1e400", "too large"),
            ("1234567890123456789012345678901", "too many digits"),
        ] {
            assert_eq!(bytes(bad), Err(why), "{bad:?}");
        }
        assert_eq!(bytes("1e-400"), Ok(1));
        assert_eq!(bytes(&format!("1.{}Gi", "0".repeat(40))), Ok(1 << 30));
        assert_eq!(bytes("0e400"), Ok(0));
    }

    #[test]
    fn displays_in_the_largest_exact_unit_and_reads_back() {
        assert_eq!(Quantity(64 << 20).to_string(), "64Mi");
        assert_eq!(Quantity(1_000_000).to_string(), "1M");
        assert_eq!(Quantity(1500).to_string(), "1500");
        for q in [0, 1, 1500, 64 << 20, 1_000_000, u64::MAX] {
            let text = Quantity(q).to_string();
            assert_eq!(Quantity::parse(&text), Ok(Quantity(q)), "{text}");
        }
    }

    #[test]
    fn reads_strings_and_integers_from_yaml() {
        let q: Quantity = serde_yaml_ng::from_str("1Mi").expect("string size");
        assert_eq!(q.bytes(), 1 << 20);
        let q: Quantity = serde_yaml_ng::from_str("2048").expect("integer size");
        assert_eq!(q.bytes(), 2048);
        let q: Quantity = serde_yaml_ng::from_str("1.5Gi").expect("fractional size");
        assert_eq!(q.bytes(), 1_610_612_736);
        // Unquoted, these are YAML floats.
        let q: Quantity = serde_yaml_ng::from_str("1e6").expect("exponent size");
        assert_eq!(q.bytes(), 1_000_000);
        let q: Quantity = serde_yaml_ng::from_str("1.5").expect("fractional bytes");
        assert_eq!(q.bytes(), 2);
        for bad in ["-1.5", ".nan", ".inf", "1e400"] {
            assert!(serde_yaml_ng::from_str::<Quantity>(bad).is_err(), "{bad}");
        }
        assert!(serde_yaml_ng::from_str::<Quantity>("-5").is_err());
    }
}
