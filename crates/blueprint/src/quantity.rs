//! Byte sizes as Blueprints write them: `64Mi`, `1Gi`, `512Ki`, `1M`, or plain bytes.

use std::fmt;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A size in bytes, written like a Kubernetes quantity without fractions.
///
/// Binary suffixes (`Ki`, `Mi`, `Gi`, `Ti`) are powers of 1024, decimal ones (`k`/`K`, `M`,
/// `G`, `T`) powers of 1000; a bare number (string or YAML integer) is bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Quantity(u64);

/// A size that is not a whole number with an optional known suffix.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "invalid size {input:?}: expected a whole number of bytes, optionally followed by Ki, Mi, Gi, Ti, k, M, G or T (e.g. 64Mi)"
)]
pub struct QuantityError {
    /// The text that was given.
    pub input: String,
}

const SUFFIXES: [(&str, u64); 9] = [
    ("Ki", 1 << 10),
    ("Mi", 1 << 20),
    ("Gi", 1 << 30),
    ("Ti", 1 << 40),
    ("k", 1_000),
    ("K", 1_000),
    ("M", 1_000_000),
    ("G", 1_000_000_000),
    ("T", 1_000_000_000_000),
];

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

    /// Parses `64Mi`, `1G`, `4096`.
    ///
    /// # Errors
    /// [`QuantityError`] for fractions, signs, unknown suffixes and values above `u64::MAX`.
    pub fn parse(input: &str) -> Result<Self, QuantityError> {
        let err = || QuantityError {
            input: input.to_string(),
        };
        let text = input.trim();
        let split = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (digits, suffix) = text.split_at(split);
        if digits.is_empty() {
            return Err(err());
        }
        let n: u64 = digits.parse().map_err(|_| err())?;
        let factor = if suffix.is_empty() {
            1
        } else {
            SUFFIXES
                .iter()
                .find(|(s, _)| *s == suffix)
                .map(|(_, f)| *f)
                .ok_or_else(err)?
        };
        n.checked_mul(factor).map(Quantity).ok_or_else(err)
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
            })
        })
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Quantity, E> {
        Quantity::parse(v).map_err(E::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_binary_decimal_and_plain_sizes() {
        assert_eq!(Quantity::parse("64Mi"), Ok(Quantity(64 << 20)));
        assert_eq!(Quantity::parse("1Gi"), Ok(Quantity(1 << 30)));
        assert_eq!(Quantity::parse("512Ki"), Ok(Quantity(512 << 10)));
        assert_eq!(Quantity::parse("1M"), Ok(Quantity(1_000_000)));
        assert_eq!(Quantity::parse("2k"), Ok(Quantity(2_000)));
        assert_eq!(Quantity::parse("4096"), Ok(Quantity(4096)));
    }

    #[test]
    fn refuses_fractions_signs_unknown_suffixes_and_overflow() {
        for bad in ["1.5Gi", "-1Mi", "12MB", "Mi", "", "64 Mi", "99999999999Ti"] {
            assert!(Quantity::parse(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn displays_in_the_largest_exact_unit() {
        assert_eq!(Quantity(64 << 20).to_string(), "64Mi");
        assert_eq!(Quantity(1_000_000).to_string(), "1M");
        assert_eq!(Quantity(1500).to_string(), "1500");
    }

    #[test]
    fn reads_strings_and_integers_from_yaml() {
        let q: Quantity = serde_yaml_ng::from_str("1Mi").expect("string size");
        assert_eq!(q.bytes(), 1 << 20);
        let q: Quantity = serde_yaml_ng::from_str("2048").expect("integer size");
        assert_eq!(q.bytes(), 2048);
        assert!(serde_yaml_ng::from_str::<Quantity>("-5").is_err());
    }
}
