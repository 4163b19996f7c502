//! Accepting connections, with a bound on how long a client may take to
//! send its request headers.
//!
//! `axum::serve` builds hyper's connection without a timer, so hyper's
//! header read timeout never fires: a client that opens a connection and
//! sends its headers a byte at a time (a slow-loris client) holds a socket
//! and a task for as long as it likes, and enough of them exhaust the
//! process's file descriptors. This loop serves each connection with
//! hyper's HTTP/1 builder, a tokio timer and `header_read_timeout`; the
//! request body is bounded separately (`body.rs`). hyper's own answers to
//! requests it cannot read (400, 414, 431) get the JSON error body
//! (`refusals.rs`). Everything else is what `axum::serve` does:
//! `TCP_NODELAY` on every connection, an accept error (out of file
//! descriptors) waited out rather than ending the server, and a graceful
//! shutdown that stops accepting and lets open responses finish. Unlike
//! `axum::serve`, the connections end with the loop: once the grace period
//! is over (or the server is told to stop now), no response goes on being
//! written.

use std::future::Future;
use std::time::Duration;

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

use crate::refusals::{JsonRefusals, MAX_HEAD_BYTES, MAX_HEADERS};

/// How long to wait after an accept error (e.g. `EMFILE`) before accepting
/// again, as `axum::serve` does: the error persists until a connection
/// closes, and retrying at once would spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// Serves `router` on `listener` until `shutdown` completes, then stops
/// accepting and waits for the open connections to finish their responses.
/// Dropping the future closes every connection still open.
pub(crate) async fn serve(
    listener: TcpListener,
    router: Router,
    header_read_timeout: Duration,
    shutdown: impl Future<Output = ()>,
) {
    let graceful = GracefulShutdown::new();
    let mut open = JoinSet::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        while open.try_join_next().is_some() {}
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(err) => {
                tracing::warn!(error = %err, "cannot accept a connection; trying again shortly");
                tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                continue;
            }
        };
        // Streams are many small writes (one SSE frame per chunk): without
        // TCP_NODELAY, Nagle's algorithm holds a frame back until the
        // client's delayed ACK, about 40 ms per stream (measured by
        // `askloop-bench http`).
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::debug!(error = %err, "cannot set TCP_NODELAY on a connection");
        }
        let connection = http1::Builder::new()
            .timer(TokioTimer::new())
            .header_read_timeout(header_read_timeout)
            .max_headers(MAX_HEADERS)
            .max_header_size(MAX_HEAD_BYTES)
            .serve_connection(
                TokioIo::new(JsonRefusals::new(tcp)),
                TowerToHyperService::new(router.clone()),
            );
        let connection = graceful.watch(connection);
        open.spawn(async move {
            if let Err(err) = connection.await {
                tracing::debug!(error = %err, "connection ended with an error");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}
