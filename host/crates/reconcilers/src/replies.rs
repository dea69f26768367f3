//! Replies read under their tenant's host-memory budget ([`inrun_wasm::HostMemory`]): a
//! remote reconciler's Result, an external call's answer. Bytes are held before they are
//! read, as they arrive (a reply that announces more than its cap is refused unread), and
//! what the parsed reply keeps is held until the pass ends. A reply past the tenant's
//! share fails that CR's reconcile, naming the budget; the host reads no more of it.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;

use inrun_wasm::{Held, HeldHit};

/// Why a reply was not read whole.
#[derive(Debug, thiserror::Error)]
pub enum ReplyError {
    /// It was (or announced to be) larger than the cap.
    #[error("the reply is larger than {0} bytes")]
    TooLarge(usize),
    /// Holding it would pass its tenant's host-memory budget.
    #[error(transparent)]
    Budget(#[from] HeldHit),
    /// Reading it failed.
    #[error("reading the reply")]
    Transport(#[source] reqwest::Error),
}

/// The body of `response`, at most `max` bytes, held against the running pass's tenant as
/// it is read, waiting until `deadline` for room. A `Content-Length` past `max` is refused
/// before anything is read; a known length is held whole at once.
///
/// # Errors
/// [`ReplyError`]: too large, the budget, or the transport.
pub async fn read(
    mut response: reqwest::Response,
    max: usize,
    deadline: Instant,
) -> Result<(Vec<u8>, Held), ReplyError> {
    let announced = response
        .content_length()
        .map(|n| usize::try_from(n).unwrap_or(usize::MAX));
    if announced.is_some_and(|n| n > max) {
        return Err(ReplyError::TooLarge(max));
    }
    let mut held = inrun_wasm::hold(announced.unwrap_or(0), deadline).await?;
    let mut body = Vec::with_capacity(announced.unwrap_or(0).min(max));
    while let Some(chunk) = response.chunk().await.map_err(ReplyError::Transport)? {
        let len = body.len() + chunk.len();
        if len > max {
            return Err(ReplyError::TooLarge(max));
        }
        if len > held.bytes() {
            held.resize(len)?;
        }
        body.extend_from_slice(&chunk);
    }
    Ok((body, held))
}

/// Holds the most parsing `text` as JSON will keep ([`inrun_wasm::parsed_bound`]), then
/// keeps it until the pass ends: call it before parsing a reply whose text `held` holds.
///
/// # Errors
/// [`HeldHit`] when the parsed form would pass the budget: the reply must not be parsed.
pub fn keep_parsed(mut held: Held, text: &[u8]) -> Result<(), HeldHit> {
    held.resize(inrun_wasm::parsed_bound(text))?;
    held.keep();
    Ok(())
}

/// Holds what `value` (built from what a connection read, bytes still held by `held`)
/// keeps ([`inrun_wasm::value_bound`]), then keeps it until the pass ends.
///
/// # Errors
/// [`HeldHit`] when it would pass the budget: the value must be dropped.
pub fn keep_value(mut held: Held, value: &serde_json::Value) -> Result<(), HeldHit> {
    held.resize(inrun_wasm::value_bound(value))?;
    held.keep();
    Ok(())
}

/// A connection whose reads are capped at `max` bytes in all and held against the running
/// pass's tenant as they arrive: a Redis or PostgreSQL server that answers with more fails
/// the call instead of filling the host's memory. Made inside the pass, so its hold is the
/// pass's tenant's.
pub struct Capped<S> {
    inner: S,
    max: usize,
    state: Arc<Mutex<Read>>,
}

/// What a [`Capped`] connection has read, shared with whoever made it.
#[derive(Debug)]
pub struct Read {
    /// Bytes read so far.
    pub bytes: usize,
    /// Why reading stopped, when it did.
    pub stopped: Option<ReplyError>,
    held: Option<Held>,
}

impl Read {
    /// Takes the hold of what was read, to [`keep_parsed`] it.
    pub fn take_held(&mut self) -> Option<Held> {
        self.held.take()
    }
}

impl<S> Capped<S> {
    /// `inner`, capped at `max` bytes read; reads are held against the running pass's
    /// tenant under `held` (a hold of nothing, from [`inrun_wasm::hold`]). Returns the
    /// shared state that says how it went.
    pub fn new(inner: S, max: usize, held: Held) -> (Capped<S>, Arc<Mutex<Read>>) {
        let state = Arc::new(Mutex::new(Read {
            bytes: 0,
            stopped: None,
            held: Some(held),
        }));
        (
            Capped {
                inner,
                max,
                state: state.clone(),
            },
            state,
        )
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Capped<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = &polled {
            let got = buf.filled().len() - before;
            let mut read = this.state.lock().unwrap_or_else(|p| p.into_inner());
            let total = read.bytes + got;
            let refused = if total > this.max {
                Some(ReplyError::TooLarge(this.max))
            } else {
                match read.held.as_mut().map(|h| h.resize(total)) {
                    Some(Err(hit)) => Some(ReplyError::Budget(hit)),
                    _ => None,
                }
            };
            if let Some(why) = refused {
                let message = why.to_string();
                read.stopped = Some(why);
                // A read that fails has read nothing.
                buf.set_filled(before);
                return Poll::Ready(Err(std::io::Error::other(message)));
            }
            read.bytes = total;
        }
        polled
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Capped<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[tokio::test]
    async fn a_capped_connection_holds_what_it_reads_and_stops_at_the_budget() {
        let meter = inrun_wasm::HostMemory::standalone("t", 1000, 1 << 20);
        meter
            .scope(async {
                let held = inrun_wasm::hold(0, Instant::now()).await.expect("nothing");
                let (mut conn, state) = Capped::new(&[7u8; 600][..], 4096, held);
                let mut buf = [0u8; 600];
                conn.read_exact(&mut buf).await.expect("600 fit");
                assert_eq!(meter.held(), 600);
                let held = state.lock().unwrap().take_held().expect("held");
                // Its parsed form does not fit 1000 bytes.
                assert!(keep_parsed(held, &buf).is_err());
                assert_eq!(meter.held(), 0, "a refused hold is given back");

                let held = inrun_wasm::hold(0, Instant::now()).await.expect("nothing");
                let (mut conn, state) = Capped::new(&[7u8; 2000][..], 4096, held);
                let mut all = Vec::new();
                assert!(conn.read_to_end(&mut all).await.is_err(), "over the budget");
                let stopped = state.lock().unwrap().stopped.take();
                assert!(
                    matches!(stopped, Some(ReplyError::Budget(_))),
                    "{stopped:?}"
                );
            })
            .await;
    }

    #[tokio::test]
    async fn a_capped_connection_stops_past_its_cap_whatever_the_budget() {
        let held = inrun_wasm::hold(0, Instant::now()).await.expect("no pass");
        let (mut conn, state) = Capped::new(&[1u8; 100][..], 50, held);
        let mut all = Vec::new();
        assert!(conn.read_to_end(&mut all).await.is_err());
        assert!(matches!(
            state.lock().unwrap().stopped,
            Some(ReplyError::TooLarge(50))
        ));
    }
}
