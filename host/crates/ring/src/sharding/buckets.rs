//! Buckets: a CR belongs to bucket `fnv1a64(uid) >> 58`, one of [`BUCKETS`].
//!
//! The API server's sharded list and watch (KEP-5866, `ShardedListAndWatch`) keeps an object
//! when `"0x" + format!("{:016x}", fnv1a64(field))` falls in `[start, end)` of a
//! `shardRange(object.metadata.uid, 'start', 'end')` requirement, comparing the hex texts
//! by length, then lexically (`k8s.io/apimachinery/pkg/sharding`). Bucket `b` is exactly
//! the range `[b << 58, (b + 1) << 58)`, the last one ending at `0x10000000000000000`
//! (2^64), so [`selector`] asks the server for the same CRs [`bucket_of`] keeps. A uid never
//! changes, so a CR never changes bucket.

/// How many buckets the CRs fall into: fixed, since changing it would move every CR.
pub const BUCKETS: usize = 64;

/// Bits of the hash that name the bucket (`BUCKETS = 2^BITS`).
const BITS: u32 = BUCKETS.trailing_zeros();

/// FNV-1a, 64 bits: the hash the API server's shard selector uses.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}

/// The bucket of the CR with `uid`.
pub fn bucket_of(uid: &str) -> usize {
    // The top BITS bits of a u64: always below BUCKETS.
    (fnv1a64(uid.as_bytes()) >> (64 - BITS)) as usize
}

/// The `[start, end)` bounds of `bucket` as the shard selector writes them: `0x` and 16
/// hex digits, the last end `0x10000000000000000`.
///
/// # Panics
/// When `bucket` is not below [`BUCKETS`].
pub fn bounds(bucket: usize) -> (String, String) {
    assert!(bucket < BUCKETS, "bucket {bucket} of {BUCKETS}");
    let start = (bucket as u64) << (64 - BITS);
    let end = if bucket + 1 == BUCKETS {
        "0x10000000000000000".to_string()
    } else {
        format!("0x{:016x}", ((bucket + 1) as u64) << (64 - BITS))
    };
    (format!("0x{start:016x}"), end)
}

/// The `shardSelector` that lists and watches the CRs of `buckets` (sorted, each once):
/// adjacent buckets are joined into one range. `None` for no bucket, which no selector
/// can express (the caller watches nothing).
pub fn selector(buckets: &[usize]) -> Option<String> {
    let mut sorted: Vec<usize> = buckets.iter().copied().filter(|b| *b < BUCKETS).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for b in sorted {
        match ranges.last_mut() {
            Some((_, last)) if *last + 1 == b => *last = b,
            _ => ranges.push((b, b)),
        }
    }
    if ranges.is_empty() {
        return None;
    }
    let parts: Vec<String> = ranges
        .into_iter()
        .map(|(first, last)| {
            let (start, _) = bounds(first);
            let (_, end) = bounds(last);
            format!("shardRange(object.metadata.uid, '{start}', '{end}')")
        })
        .collect();
    Some(parts.join(" || "))
}

/// The value of the bucket label (`inrun.dev/bucket`) for `bucket`: two digits.
pub fn label_value(bucket: usize) -> String {
    format!("{:02}", bucket % BUCKETS)
}

/// The label selector of the CRs labelled with one of `buckets`; `None` for no bucket.
pub fn label_selector(buckets: &[usize]) -> Option<String> {
    let mut sorted: Vec<usize> = buckets.iter().copied().filter(|b| *b < BUCKETS).collect();
    sorted.sort_unstable();
    sorted.dedup();
    if sorted.is_empty() {
        return None;
    }
    let values: Vec<String> = sorted.into_iter().map(label_value).collect();
    Some(format!(
        "{} in ({})",
        inrun_pass::meta::BUCKET,
        values.join(",")
    ))
}

/// `text` percent-encoded for a URL query parameter (everything but unreserved
/// characters), as `shardSelector=` needs.
pub fn query_escape(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The API server's comparison of two hex bounds: by length, then lexically.
    fn hex_less(a: &str, b: &str) -> bool {
        if a.len() == b.len() {
            a < b
        } else {
            a.len() < b.len()
        }
    }

    /// Whether the API server's selector for `bucket` keeps the object with `uid`.
    fn server_keeps(bucket: usize, uid: &str) -> bool {
        let hash = format!("0x{:016x}", fnv1a64(uid.as_bytes()));
        let (start, end) = bounds(bucket);
        !hex_less(&hash, &start) && hex_less(&hash, &end)
    }

    /// uuid-shaped strings from a fixed seed.
    fn uids(n: usize) -> Vec<String> {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        (0..n)
            .map(|_| {
                let mut next = || {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state
                };
                let (a, b) = (next(), next());
                format!(
                    "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
                    a >> 32,
                    (a >> 16) & 0xffff,
                    a & 0xfff,
                    b >> 48,
                    b & 0xffff_ffff_ffff
                )
            })
            .collect()
    }

    #[test]
    fn the_hash_is_fnv1a_64() {
        // The published FNV-1a 64 test vectors.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn the_bounds_are_written_as_the_server_parses_them() {
        assert_eq!(
            bounds(0),
            ("0x0000000000000000".into(), "0x0400000000000000".into())
        );
        assert_eq!(
            bounds(32),
            ("0x8000000000000000".into(), "0x8400000000000000".into())
        );
        assert_eq!(
            bounds(BUCKETS - 1),
            ("0xfc00000000000000".into(), "0x10000000000000000".into())
        );
    }

    #[test]
    fn the_server_selector_and_the_bucket_agree_on_every_cr() {
        for uid in uids(10_000) {
            let bucket = bucket_of(&uid);
            assert!(server_keeps(bucket, &uid), "{uid} in bucket {bucket}");
            for other in [bucket.wrapping_sub(1), bucket + 1] {
                if other < BUCKETS {
                    assert!(!server_keeps(other, &uid), "{uid} also in bucket {other}");
                }
            }
        }
    }

    #[test]
    fn ten_thousand_crs_spread_over_the_buckets() {
        let mut counts = [0usize; BUCKETS];
        for uid in uids(10_000) {
            counts[bucket_of(&uid)] += 1;
        }
        let mean = 10_000 / BUCKETS;
        // Binomial spread around 156: every bucket is used, none holds a double share.
        assert!(
            counts.iter().all(|c| *c > mean / 2 && *c < mean * 3 / 2),
            "{counts:?}"
        );
    }

    #[test]
    fn adjacent_buckets_share_one_range() {
        assert_eq!(selector(&[]), None);
        assert_eq!(
            selector(&[3, 1, 2, 2, 7]).as_deref(),
            Some(
                "shardRange(object.metadata.uid, '0x0400000000000000', '0x1000000000000000') || \
                 shardRange(object.metadata.uid, '0x1c00000000000000', '0x2000000000000000')"
            )
        );
        let all: Vec<usize> = (0..BUCKETS).collect();
        assert_eq!(
            selector(&all).as_deref(),
            Some("shardRange(object.metadata.uid, '0x0000000000000000', '0x10000000000000000')")
        );
    }
}
