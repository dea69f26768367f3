//! `postgres` calls: one connection per call, a prepared statement whose parameter types
//! decide how each rendered parameter is sent, and rows read as JSON objects.
//!
//! Connections are plain TCP (`NoTls`): the database is expected on a trusted network or
//! behind a local proxy. Column types beyond booleans, integers, floats, text and JSON
//! are refused with a hint to cast them to text in the query.

use futures::TryStreamExt;
use serde_json::{Map, Value};
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{NoTls, Row};

use std::sync::{Arc, Mutex};

use super::{CallError, number};
use crate::egress::EgressError;
use crate::replies::{Capped, Read};

type Param = Box<dyn ToSql + Sync + Send>;

/// A connection string, parsed by the client's own parser: what is checked is what is
/// dialled.
pub(super) struct Target {
    config: tokio_postgres::Config,
}

impl Target {
    /// Parses `url` (a URL or a libpq `key=value` string) as the client does.
    ///
    /// # Errors
    /// [`EgressError::BadUrl`] when it does not parse (told without the string when it
    /// came from a Secret).
    pub(super) fn parse(url: &str) -> Result<Target, CallError> {
        let config = url
            .parse::<tokio_postgres::Config>()
            .map_err(|_| CallError::Egress(EgressError::BadUrl(url.into())))?;
        Ok(Target { config })
    }

    /// The one TCP host and port it connects to, for the egress policy.
    ///
    /// # Errors
    /// [`EgressError::Ambiguous`] for several hosts (a comma list, `host=` parameters), a
    /// `hostaddr` (dialled instead of the host), a Unix socket, or no host.
    pub(super) fn single(&self, url: &str) -> Result<(String, u16), CallError> {
        let refuse = |why| {
            CallError::Egress(EgressError::Ambiguous {
                url: url.into(),
                why,
            })
        };
        let c = &self.config;
        if !c.get_hostaddrs().is_empty() {
            return Err(refuse("names an address to dial (hostaddr)"));
        }
        let host = match c.get_hosts() {
            [tokio_postgres::config::Host::Tcp(host)] => host.clone(),
            [] => return Err(refuse("names no host")),
            [_] => return Err(refuse("names a Unix socket")),
            _ => return Err(refuse("names more than one host")),
        };
        let port = match c.get_ports() {
            [] => 5432,
            [port] => *port,
            _ => return Err(refuse("names more than one port")),
        };
        Ok((host, port))
    }

    /// Dials `address` (checked by the egress policy) for the host it names; the host
    /// stays the name TLS and authentication see.
    pub(super) fn pinned(mut self, address: std::net::IpAddr) -> Target {
        self.config.hostaddr(address);
        self
    }

    /// The connection to its one TCP host (the address the egress policy checked, when
    /// pinned), made here rather than by the client so that it reads at most
    /// [`REPLY_MAX`] bytes, held against the tenant's host-memory budget as they arrive:
    /// a server answering with a row of a gigabyte fails the call, not the host. `None`
    /// when it names several hosts or a Unix socket.
    async fn dial(
        &self,
    ) -> Result<Option<(Capped<tokio::net::TcpStream>, Arc<Mutex<Read>>)>, CallError> {
        let c = &self.config;
        let port = match c.get_ports() {
            [] => 5432,
            [port] => *port,
            _ => return Ok(None),
        };
        let stream = match (c.get_hostaddrs(), c.get_hosts()) {
            ([address], [_]) => tokio::net::TcpStream::connect((*address, port)).await,
            ([], [tokio_postgres::config::Host::Tcp(host)]) => {
                tokio::net::TcpStream::connect((host.as_str(), port)).await
            }
            _ => return Ok(None),
        }
        .map_err(CallError::Dial)?;
        let held = inrun_wasm::hold(0, super::http::far_deadline())
            .await
            .map_err(CallError::Budget)?;
        Ok(Some(Capped::new(stream, REPLY_MAX, held)))
    }
}

/// Runs `sql` with `params` bound to `$1`, `$2`, ... on `target`; returns the rows as
/// objects.
pub(super) async fn query(
    target: &Target,
    sql: &str,
    params: &[Value],
) -> Result<Value, CallError> {
    let Some(dialled) = target.dial().await? else {
        // Several hosts or a Unix socket: only ever the operator's own Blueprint (under an
        // egress policy a target names one TCP host), connected by the client itself.
        let (client, connection) = target
            .config
            .connect(NoTls)
            .await
            .map_err(CallError::Postgres)?;
        return on(client, connection, sql, params).await;
    };
    let (stream, read) = dialled;
    let (client, connection) = target
        .config
        .connect_raw(stream, NoTls)
        .await
        .map_err(|e| super::redis::stopped(&read).unwrap_or(CallError::Postgres(e)))?;
    let value = on(client, connection, sql, params)
        .await
        .map_err(|e| super::redis::stopped(&read).unwrap_or(e))?;
    super::redis::kept(&read, &value)?;
    Ok(value)
}

/// Runs the query on `client`, its `connection` driven meanwhile.
async fn on<S, T>(
    client: tokio_postgres::Client,
    connection: tokio_postgres::Connection<S, T>,
    sql: &str,
    params: &[Value],
) -> Result<Value, CallError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let driver = tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "postgres connection closed");
        }
    });
    let result = run(&client, sql, params).await;
    drop(client);
    let _ = driver.await;
    result
}

/// The most a PostgreSQL connection reads, every row included: rows feed templates.
pub const REPLY_MAX: usize = 4 * 1024 * 1024;

async fn run(
    client: &tokio_postgres::Client,
    sql: &str,
    params: &[Value],
) -> Result<Value, CallError> {
    let statement = client.prepare(sql).await.map_err(CallError::Postgres)?;
    if statement.params().len() != params.len() {
        return Err(CallError::Param {
            index: params.len().min(statement.params().len()) + 1,
            message: format!(
                "the query has {} placeholder(s) but {} param(s) are given",
                statement.params().len(),
                params.len()
            ),
        });
    }
    let bound: Vec<Param> = statement
        .params()
        .iter()
        .zip(params)
        .enumerate()
        .map(|(i, (ty, v))| {
            bind(ty, v).map_err(|message| CallError::Param {
                index: i + 1,
                message,
            })
        })
        .collect::<Result<_, _>>()?;
    let refs: Vec<&(dyn ToSql + Sync)> = bound
        .iter()
        .map(|b| b.as_ref() as &(dyn ToSql + Sync))
        .collect();
    // Rows are read as they arrive and the query given up on past the cap, so a query
    // that matches a whole table costs no more than the cap.
    let rows = client
        .query_raw(&statement, refs)
        .await
        .map_err(CallError::Postgres)?;
    let mut rows = std::pin::pin!(rows);
    let mut out = Vec::new();
    while let Some(r) = rows.try_next().await.map_err(CallError::Postgres)? {
        if out.len() == MAX_ROWS {
            return Err(CallError::TooManyRows(MAX_ROWS));
        }
        out.push(row(&r)?);
    }
    Ok(Value::Array(out))
}

/// The most rows a query may return: its rows feed templates.
pub const MAX_ROWS: usize = 1000;

fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn int(v: &Value) -> Result<i64, String> {
    match v {
        Value::Number(n) => n.as_i64().ok_or_else(|| format!("{n} is not an integer")),
        Value::String(s) => s
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not an integer")),
        other => Err(format!("{other} is not an integer")),
    }
}

fn float(v: &Value) -> Result<f64, String> {
    match v {
        Value::Number(n) => n.as_f64().ok_or_else(|| format!("{n} is not a number")),
        Value::String(s) => s
            .trim()
            .parse()
            .map_err(|_| format!("{s:?} is not a number")),
        other => Err(format!("{other} is not a number")),
    }
}

/// A rendered parameter as the type the statement expects; `null` is SQL NULL.
fn bind(ty: &Type, v: &Value) -> Result<Param, String> {
    let narrow = |n: i64, max: i64| {
        if n.abs() <= max {
            Ok(n)
        } else {
            Err(format!("{n} is out of range for {ty}"))
        }
    };
    if v.is_null() {
        return Ok(Box::new(Option::<String>::None));
    }
    Ok(match *ty {
        Type::BOOL => match v {
            Value::Bool(b) => Box::new(*b),
            Value::String(s) if s == "true" || s == "false" => Box::new(s == "true"),
            other => return Err(format!("{other} is not a boolean")),
        },
        Type::INT2 => Box::new(narrow(int(v)?, i64::from(i16::MAX))? as i16),
        Type::INT4 => Box::new(narrow(int(v)?, i64::from(i32::MAX))? as i32),
        Type::INT8 => Box::new(int(v)?),
        Type::FLOAT4 => Box::new(float(v)? as f32),
        Type::FLOAT8 => Box::new(float(v)?),
        Type::JSON | Type::JSONB => Box::new(v.clone()),
        Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR | Type::UNKNOWN => {
            Box::new(text_of(v))
        }
        _ => {
            return Err(format!(
                "the query expects type {ty}; cast the placeholder (e.g. $n::text) or use a supported type"
            ));
        }
    })
}

fn row(row: &Row) -> Result<Value, CallError> {
    let mut out = Map::new();
    for (i, column) in row.columns().iter().enumerate() {
        let pg = CallError::Postgres;
        let value = match *column.type_() {
            Type::BOOL => row
                .try_get::<_, Option<bool>>(i)
                .map_err(pg)?
                .map(Value::Bool),
            Type::INT2 => row
                .try_get::<_, Option<i16>>(i)
                .map_err(pg)?
                .map(Value::from),
            Type::INT4 => row
                .try_get::<_, Option<i32>>(i)
                .map_err(pg)?
                .map(Value::from),
            Type::INT8 => row
                .try_get::<_, Option<i64>>(i)
                .map_err(pg)?
                .map(Value::from),
            Type::OID => row
                .try_get::<_, Option<u32>>(i)
                .map_err(pg)?
                .map(Value::from),
            Type::FLOAT4 => row
                .try_get::<_, Option<f32>>(i)
                .map_err(pg)?
                .map(|f| number(f64::from(f))),
            Type::FLOAT8 => row.try_get::<_, Option<f64>>(i).map_err(pg)?.map(number),
            Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR => row
                .try_get::<_, Option<String>>(i)
                .map_err(pg)?
                .map(Value::String),
            Type::JSON | Type::JSONB => row.try_get::<_, Option<Value>>(i).map_err(pg)?,
            ref other => {
                return Err(CallError::Column {
                    column: column.name().to_string(),
                    type_: other.to_string(),
                });
            }
        };
        out.insert(column.name().to_string(), value.unwrap_or(Value::Null));
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_converted_to_the_type_the_query_expects() {
        assert!(bind(&Type::INT4, &Value::from("42")).is_ok());
        assert!(bind(&Type::INT2, &Value::from(70000)).is_err());
        assert!(bind(&Type::BOOL, &Value::from("yes")).is_err());
        assert!(bind(&Type::TIMESTAMP, &Value::from("now")).is_err());
        assert!(bind(&Type::TEXT, &Value::from(3)).is_ok());
    }
}

#[cfg(test)]
mod target {
    use super::*;

    fn single(url: &str) -> Result<(String, u16), String> {
        Target::parse(url)
            .and_then(|t| t.single(url))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn one_tcp_host_is_what_the_client_dials() {
        assert_eq!(
            single("postgres://u:p@db.example/app"),
            Ok(("db.example".into(), 5432))
        );
        assert_eq!(
            single("host=db.example port=6432 user=u"),
            Ok(("db.example".into(), 6432))
        );
    }

    #[test]
    fn forms_that_would_dial_another_address_than_the_one_checked_are_refused() {
        for (url, why) in [
            // The url crate reads the host after the last `@`, the client after the first.
            (
                "postgres://u@10.0.0.9:5432,x@db.example/app",
                "more than one host",
            ),
            (
                "postgres://u:p@db.example/app?hostaddr=127.0.0.1",
                "hostaddr",
            ),
            (
                "postgres://u@db.example:443/app?host=169.254.169.254&port=80",
                "more than one host",
            ),
            ("host=/run/postgresql dbname=app", "Unix socket"),
            ("postgres:///app", "no host"),
        ] {
            let told = single(url).expect_err(url);
            assert!(told.contains(why), "{url}: {told}");
        }
    }

    #[test]
    fn a_pinned_target_dials_the_checked_address_for_the_named_host() {
        let t = Target::parse("postgres://u@db.example/app")
            .expect("parses")
            .pinned("192.0.2.7".parse().expect("ip"));
        assert_eq!(
            t.config.get_hostaddrs(),
            ["192.0.2.7".parse::<std::net::IpAddr>().expect("ip")]
        );
        assert!(matches!(
            t.config.get_hosts(),
            [tokio_postgres::config::Host::Tcp(h)] if h == "db.example"
        ));
    }
}
