//! Filters Inrun adds to minijinja's builtins: `toJson`, `toYaml`, `b64enc`, `b64dec`,
//! `required`.

use minijinja::{Environment, Error, ErrorKind, State, Value};

use super::convert::to_json;

/// Registers Inrun's filters on `env`.
pub(crate) fn register(env: &mut Environment<'static>) {
    env.add_filter("toJson", to_json_filter);
    env.add_filter("toYaml", to_yaml_filter);
    env.add_filter("b64enc", b64enc_filter);
    env.add_filter("b64dec", b64dec_filter);
    env.add_filter("required", required_filter);
    env.add_filter(super::yaml_guard::FILTER, super::yaml_guard::filter);
}

fn invalid(detail: String) -> Error {
    Error::new(ErrorKind::InvalidOperation, detail)
}

/// Bytes of serialised output one fuel pays for: what minijinja's own `tojson` charges
/// (walking a value to serialise it costs far more than copying bytes).
const SERIALIZED_BYTES_PER_FUEL: usize = 4;
/// Bytes of plain text (base64 in or out) one fuel pays for.
const TEXT_BYTES_PER_FUEL: usize = 16;

/// Charges the work of a filter that read or wrote `bytes`, `per_fuel` of them for one
/// fuel: a template that calls it in a loop runs out of fuel in proportion to what it
/// makes the host do, not per call.
fn charge(state: &State, bytes: usize, per_fuel: usize) -> Result<(), Error> {
    state.consume_fuel((bytes / per_fuel) as u64 + 1)
}

/// `{{ .spec.config | toJson }}`: compact JSON, keys in their original order (a safe
/// string: a document template writes it as it is, structure by intent).
fn to_json_filter(state: &State, value: Value) -> Result<Value, Error> {
    let json = to_json(&value).map_err(invalid)?;
    let text = serde_json::to_string(&json).map_err(|e| invalid(e.to_string()))?;
    charge(state, text.len(), SERIALIZED_BYTES_PER_FUEL)?;
    Ok(Value::from_safe_string(text))
}

/// `{{ .spec.config | toYaml }}`: YAML without the leading `---`, for block scalars (a
/// safe string, as `toJson`'s).
fn to_yaml_filter(state: &State, value: Value) -> Result<Value, Error> {
    let json = to_json(&value).map_err(invalid)?;
    let text = serde_yaml_ng::to_string(&json).map_err(|e| invalid(e.to_string()))?;
    charge(state, text.len(), SERIALIZED_BYTES_PER_FUEL)?;
    Ok(Value::from_safe_string(
        text.trim_end_matches('\n').to_owned(),
    ))
}

/// `{{ "text" | b64enc }}`: standard base64 with padding.
fn b64enc_filter(state: &State, value: Value) -> Result<String, Error> {
    let encoded = match value.as_bytes() {
        Some(bytes) => base64_encode(bytes),
        None => base64_encode(value.to_string().as_bytes()),
    };
    charge(state, encoded.len(), TEXT_BYTES_PER_FUEL)?;
    Ok(encoded)
}

/// `{{ .data.password | b64dec }}`: decodes standard base64 (padding optional) to text.
fn b64dec_filter(state: &State, value: &str) -> Result<String, Error> {
    charge(state, value.len(), TEXT_BYTES_PER_FUEL)?;
    let bytes = base64_decode(value).map_err(invalid)?;
    String::from_utf8(bytes).map_err(|_| invalid("b64dec: decoded bytes are not UTF-8".into()))
}

/// `{{ .spec.image | required("spec.image is required") }}`: fails the render when the
/// value is undefined, none or an empty string.
fn required_filter(value: Value, message: Option<String>) -> Result<Value, Error> {
    let missing = value.is_undefined() || value.is_none() || value.as_str() == Some("");
    if missing {
        let message = message.unwrap_or_else(|| "a required value is missing".to_owned());
        return Err(invalid(message));
    }
    Ok(value)
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 (RFC 4648) with `=` padding.
pub(crate) fn base64_encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18u32, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> shift) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Decodes standard base64; padding is optional and ASCII whitespace is ignored.
///
/// # Errors
///
/// A message naming the first character that is not base64, or a truncated input.
pub(crate) fn base64_decode(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3);
    let mut acc = 0u32;
    let mut bits = 0u32;
    let mut padding = 0usize;
    let mut symbols = 0usize;
    for c in text.chars().filter(|c| !c.is_ascii_whitespace()) {
        if c == '=' {
            padding += 1;
            continue;
        }
        if padding > 0 {
            return Err("b64dec: data after padding".to_owned());
        }
        let digit = ALPHABET
            .iter()
            .position(|&a| char::from(a) == c)
            .ok_or_else(|| format!("b64dec: {c:?} is not a base64 character"))?;
        acc = (acc << 6) | digit as u32;
        bits += 6;
        symbols += 1;
        if bits >= 8 {
            bits -= 8;
            out.push(((acc >> bits) & 0xff) as u8);
        }
    }
    if symbols % 4 == 1 || padding > 2 {
        return Err("b64dec: truncated input".to_owned());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_the_rfc_vectors() {
        let vectors = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (plain, encoded) in vectors {
            assert_eq!(base64_encode(plain.as_bytes()), encoded);
            assert_eq!(base64_decode(encoded), Ok(plain.as_bytes().to_vec()));
        }
    }

    #[test]
    fn base64_decoding_accepts_missing_padding_and_whitespace() {
        assert_eq!(base64_decode("Zm9v\nYg"), Ok(b"foob".to_vec()));
    }

    #[test]
    fn base64_decoding_rejects_garbage() {
        assert!(base64_decode("Zm9v!").is_err());
        assert!(base64_decode("Z").is_err());
        assert!(base64_decode("Zg==Zg").is_err());
    }

    #[test]
    fn base64_round_trips_binary() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(base64_decode(&base64_encode(&bytes)), Ok(bytes));
    }
}
