//! CPU as Kubernetes writes it (`250m`, `0.5`, `2`): a tenant's cap on what its plugins
//! burn, in a Blueprint and on the command line alike.

use std::fmt;

/// CPU as Kubernetes writes it: thousandths of a core (`250m`, `0.5`, `2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Millicores(u32);

/// A CPU quantity that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid CPU {input:?}: write thousandths of a core (250m) or cores (0.5, 2), above zero")]
pub struct MillicoresError {
    /// What was given.
    pub input: String,
}

impl Millicores {
    /// `n` thousandths of a core.
    pub const fn new(n: u32) -> Self {
        Millicores(n)
    }

    /// Thousandths of a core.
    pub fn get(self) -> u32 {
        self.0
    }

    /// Reads `250m`, `0.5` or `2`.
    ///
    /// # Errors
    /// [`MillicoresError`] for anything else, zero, or more than a million cores.
    pub fn parse(input: &str) -> Result<Self, MillicoresError> {
        let err = || MillicoresError {
            input: input.to_string(),
        };
        let text = input.trim();
        let n = match text.strip_suffix('m') {
            Some(millis) if millis.bytes().all(|b| b.is_ascii_digit()) && !millis.is_empty() => {
                millis.parse::<u64>().map_err(|_| err())?
            }
            Some(_) => return Err(err()),
            None => {
                let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
                let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
                if whole.is_empty() && frac.is_empty() || !digits(whole) || !digits(frac) {
                    return Err(err());
                }
                if frac.len() > 3 {
                    return Err(err());
                }
                let whole: u64 = if whole.is_empty() {
                    0
                } else {
                    whole.parse().map_err(|_| err())?
                };
                let frac: u64 = format!("{frac:0<3}").parse().map_err(|_| err())?;
                whole
                    .checked_mul(1000)
                    .and_then(|w| w.checked_add(frac))
                    .ok_or_else(err)?
            }
        };
        match u32::try_from(n) {
            Ok(n) if n > 0 && n <= 1_000_000_000 => Ok(Millicores(n)),
            _ => Err(err()),
        }
    }
}

impl fmt::Display for Millicores {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}m", self.0)
    }
}

impl std::str::FromStr for Millicores {
    type Err = MillicoresError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Millicores::parse(s)
    }
}

impl serde::Serialize for Millicores {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Millicores {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Millicores::parse(&text).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_is_read_as_kubernetes_writes_it() {
        assert_eq!(Millicores::parse("250m"), Ok(Millicores(250)));
        assert_eq!(Millicores::parse("0.5"), Ok(Millicores(500)));
        assert_eq!(Millicores::parse(".25"), Ok(Millicores(250)));
        assert_eq!(Millicores::parse("2"), Ok(Millicores(2000)));
        assert_eq!(Millicores::parse("1.5"), Ok(Millicores(1500)));
        for bad in [
            "",
            "m",
            "0",
            "0m",
            "-1",
            "1.2345",
            "1e3",
            "half",
            "1.5m",
            "5000000000m",
        ] {
            assert!(Millicores::parse(bad).is_err(), "{bad:?}");
        }
        assert_eq!(Millicores(250).to_string(), "250m");
        let read: Millicores = serde_json::from_str("\"500m\"").expect("json");
        assert_eq!(read, Millicores(500));
        assert!(serde_json::from_str::<Millicores>("\"lots\"").is_err());
    }
}
