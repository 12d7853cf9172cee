//! `--metrics-addr HOST:PORT`: the process's metrics in the Prometheus text
//! format, served over plain HTTP while `exec` or `watch` runs.
//!
//! A minimal HTTP/1.1 responder: `GET /metrics` (or `/`) answers the
//! rendered metrics and closes the connection; anything else gets 404 or
//! 405. One request per connection, its head at most 8 KiB, read within
//! 5 s; at most 64 connections served at once.

use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::{Failure, exit};

/// Bucket bounds of every histogram, in seconds: 1 ms to 5 min.
const BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];
const MAX_HEAD: usize = 8 * 1024;
const READ_LIMIT: Duration = Duration::from_secs(5);
const MAX_CONNECTIONS: usize = 64;

/// The running server; stops when dropped.
pub(crate) struct MetricsServer {
    tasks: Vec<tokio::task::AbortHandle>,
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Install the Prometheus recorder as the process's `metrics` recorder and
/// serve it on `addr`. Says where on stderr (the port chosen, for `:0`).
pub(crate) async fn serve(addr: &str) -> Result<MetricsServer, Failure> {
    let listener = TcpListener::bind(addr).await.map_err(|e| {
        Failure::new(
            exit::USAGE,
            format!("--metrics-addr {addr}: cannot listen there ({e})"),
        )
    })?;
    let local = listener
        .local_addr()
        .map_err(|e| Failure::new(exit::SOFTWARE, format!("--metrics-addr {addr}: {e}")))?;
    let (handle, upkeep) = recorder()?;
    eprintln!("fairlock: serving metrics on http://{local}/metrics");
    let accept = tokio::spawn(accept_loop(listener, handle));
    Ok(MetricsServer {
        tasks: vec![upkeep, accept.abort_handle()],
    })
}

/// Install the Prometheus recorder as the process's `metrics` recorder,
/// with nothing serving it (`bench --metrics-cost`); it is kept up to date
/// until the returned value is dropped.
pub(crate) fn install_recorder() -> Result<MetricsServer, Failure> {
    let (_, upkeep) = recorder()?;
    Ok(MetricsServer {
        tasks: vec![upkeep],
    })
}

/// The installed recorder's handle and its upkeep task (which drains
/// histogram samples into their buckets every 5 s).
fn recorder() -> Result<(PrometheusHandle, tokio::task::AbortHandle), Failure> {
    let handle = PrometheusBuilder::new()
        .set_buckets(BUCKETS)
        .and_then(PrometheusBuilder::install_recorder)
        .map_err(|e| Failure::new(exit::SOFTWARE, format!("metrics recorder: {e}")))?;
    let upkeep = tokio::spawn({
        let handle = handle.clone();
        async move {
            let mut every = tokio::time::interval(Duration::from_secs(5));
            loop {
                every.tick().await;
                handle.run_upkeep();
            }
        }
    });
    Ok((handle, upkeep.abort_handle()))
}

async fn accept_loop(listener: TcpListener, handle: PrometheusHandle) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
            return;
        };
        let Ok((stream, _)) = listener.accept().await else {
            // Out of file descriptors, say: try again shortly.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(READ_LIMIT, answer(stream, &handle)).await;
            drop(permit);
        });
    }
}

/// Read one request head and answer it.
async fn answer(mut stream: TcpStream, handle: &PrometheusHandle) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        if head.len() > MAX_HEAD {
            return respond(&mut stream, "431 Request Header Fields Too Large", "").await;
        }
    }
    let line = head.split(|&b| b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics" | "/") => respond(&mut stream, "200 OK", &handle.render()).await,
        ("GET", _) => respond(&mut stream, "404 Not Found", "try /metrics\n").await,
        _ => respond(&mut stream, "405 Method Not Allowed", "").await,
    }
}

async fn respond(stream: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.shutdown().await
}
