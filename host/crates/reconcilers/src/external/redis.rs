//! `redis` calls: one read command per call; replies become JSON (hashes as objects).

use ::redis::Value as Reply;
use serde_json::{Map, Value};

use std::sync::Mutex;

use super::{CallError, number};
use crate::replies::{self, Capped, Read, ReplyError};

/// Commands that only read. Anything else is refused before connecting.
const READ_COMMANDS: &[&str] = &[
    "GET",
    "MGET",
    "GETRANGE",
    "STRLEN",
    "EXISTS",
    "TYPE",
    "TTL",
    "PTTL",
    "HGET",
    "HMGET",
    "HGETALL",
    "HKEYS",
    "HVALS",
    "HLEN",
    "HEXISTS",
    "HSTRLEN",
    "LRANGE",
    "LLEN",
    "LINDEX",
    "SMEMBERS",
    "SISMEMBER",
    "SMISMEMBER",
    "SCARD",
    "ZRANGE",
    "ZREVRANGE",
    "ZRANGEBYSCORE",
    "ZSCORE",
    "ZMSCORE",
    "ZCARD",
    "ZCOUNT",
    "ZRANK",
    "XRANGE",
    "XREVRANGE",
    "XLEN",
    "DBSIZE",
    "PING",
];

/// Commands whose flat `[field, value, ...]` reply is a map.
const MAP_COMMANDS: &[&str] = &["HGETALL"];

/// The TCP host and port `url` connects to, as the client parses it.
///
/// # Errors
/// [`CallError::Redis`] for a URL the client refuses or one that is not TCP.
pub(super) fn target(url: &str) -> Result<(String, u16), CallError> {
    let client = ::redis::Client::open(url).map_err(CallError::Redis)?;
    match &client.get_connection_info().addr {
        ::redis::ConnectionAddr::Tcp(host, port) => Ok((host.clone(), *port)),
        _ => Err(CallError::Redis(::redis::RedisError::from((
            ::redis::ErrorKind::InvalidClientConfig,
            "only redis:// over TCP is supported",
        )))),
    }
}

/// Runs `args` (command first) against the server at `url`, dialling `address` when given
/// (the one the egress policy checked) instead of resolving the host again.
pub(super) async fn command(
    url: &str,
    address: Option<std::net::IpAddr>,
    args: &[String],
) -> Result<Value, CallError> {
    let name = args
        .first()
        .map(|c| c.to_ascii_uppercase())
        .unwrap_or_default();
    if !READ_COMMANDS.contains(&name.as_str()) {
        return Err(CallError::NotReadOnly(name));
    }
    let client = ::redis::Client::open(url).map_err(CallError::Redis)?;
    let info = client.get_connection_info();
    let ::redis::ConnectionAddr::Tcp(host, port) = &info.addr else {
        return Err(CallError::Redis(::redis::RedisError::from((
            ::redis::ErrorKind::InvalidClientConfig,
            "only redis:// over TCP is supported",
        ))));
    };
    // The connection reads at most REPLY_MAX bytes in all, held against the tenant's
    // host-memory budget as they arrive: a server that answers with more fails the call
    // instead of filling the host's memory.
    let stream = match address {
        Some(ip) => tokio::net::TcpStream::connect((ip, *port)).await,
        None => tokio::net::TcpStream::connect((host.as_str(), *port)).await,
    }
    .map_err(|e| CallError::Redis(e.into()))?;
    let held = inrun_wasm::hold(0, super::http::far_deadline())
        .await
        .map_err(CallError::Budget)?;
    let (capped, read) = Capped::new(stream, REPLY_MAX, held);
    let (mut conn, driver) = ::redis::aio::MultiplexedConnection::new(&info.redis, capped)
        .await
        .map_err(|e| stopped(&read).unwrap_or(CallError::Redis(e)))?;
    let driver = tokio::spawn(driver);
    let mut cmd = ::redis::cmd(&name);
    for a in &args[1..] {
        cmd.arg(a);
    }
    let reply: Result<Reply, _> = cmd.query_async(&mut conn).await;
    drop(conn);
    driver.abort();
    let reply = reply.map_err(|e| stopped(&read).unwrap_or(CallError::Redis(e)))?;
    let value = to_json(reply, MAP_COMMANDS.contains(&name.as_str()));
    kept(&read, &value)?;
    Ok(value)
}

/// The most a Redis connection reads, every reply included.
pub const REPLY_MAX: usize = 4 * 1024 * 1024;

/// Why a capped connection stopped reading, as the call's error.
pub(super) fn stopped(read: &Mutex<Read>) -> Option<CallError> {
    let mut read = read.lock().unwrap_or_else(|p| p.into_inner());
    match read.stopped.take()? {
        ReplyError::TooLarge(max) => Some(CallError::TooLarge(max)),
        ReplyError::Budget(hit) => Some(CallError::Budget(hit)),
        ReplyError::Transport(e) => Some(CallError::Http(e)),
    }
}

/// Keeps `value`, made of what a capped connection read, until the pass ends.
pub(super) fn kept(read: &Mutex<Read>, value: &Value) -> Result<(), CallError> {
    let held = read.lock().unwrap_or_else(|p| p.into_inner()).take_held();
    match held {
        Some(held) => replies::keep_value(held, value).map_err(CallError::Budget),
        None => Ok(()),
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn key(reply: Reply) -> String {
    match to_json(reply, false) {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

/// A reply as JSON; `pairs` reads a flat array as `{field: value}`.
fn to_json(reply: Reply, pairs: bool) -> Value {
    match reply {
        Reply::Nil => Value::Null,
        Reply::Int(i) => Value::from(i),
        Reply::BulkString(b) => Value::String(text(&b)),
        Reply::SimpleString(s) => Value::String(s),
        Reply::Okay => Value::String("OK".into()),
        Reply::Double(f) => number(f),
        Reply::Boolean(b) => Value::Bool(b),
        Reply::VerbatimString { text, .. } => Value::String(text),
        Reply::Array(items) if pairs => {
            let mut map = Map::new();
            let mut it = items.into_iter();
            while let (Some(k), Some(v)) = (it.next(), it.next()) {
                map.insert(key(k), to_json(v, false));
            }
            Value::Object(map)
        }
        Reply::Array(items) | Reply::Set(items) => {
            Value::Array(items.into_iter().map(|i| to_json(i, false)).collect())
        }
        Reply::Map(entries) => Value::Object(
            entries
                .into_iter()
                .map(|(k, v)| (key(k), to_json(v, false)))
                .collect(),
        ),
        Reply::Attribute { data, .. } => to_json(*data, pairs),
        other => Value::String(format!("{other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hgetall_replies_become_objects() {
        let reply = Reply::Array(vec![
            Reply::BulkString(b"tier".to_vec()),
            Reply::BulkString(b"gold".to_vec()),
            Reply::BulkString(b"limit".to_vec()),
            Reply::BulkString(b"5".to_vec()),
        ]);
        assert_eq!(
            to_json(reply, true),
            serde_json::json!({"tier": "gold", "limit": "5"})
        );
    }

    #[tokio::test]
    async fn write_commands_are_refused_before_connecting() {
        let err = command(
            "redis://127.0.0.1:1",
            None,
            &["set".into(), "k".into(), "v".into()],
        )
        .await
        .expect_err("refused");
        assert!(matches!(err, CallError::NotReadOnly(c) if c == "SET"));
    }
}
