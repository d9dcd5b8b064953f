//! Connections: the accept loop, per-connection header and idle timeouts, JSON answers to
//! malformed request heads, and a graceful shutdown with a bound.
//!
//! hyper 1.x has one timer of its own for HTTP/1, `header_read_timeout`, and it restarts
//! whenever hyper waits for a request head, idle keep-alive included: it cannot hold a short
//! header timeout beside a longer idle one. So it is off, and each connection runs a watchdog
//! fed by its socket and its service, in one of three phases:
//!
//! - **head**: the first request of a new connection, or bytes of the next one, have not yet
//!   made a whole head. The head must be complete [`Timeouts::header`] after the connection
//!   opened or its first byte arrived: a client sending a byte a second gains nothing.
//! - **busy**: a request is in the service (routing, reading the body under the body timeout of
//!   the handlers, predicting). Predictions are bounded; no timer runs.
//! - **idle**: the response is out and no byte of a next request has come. The connection is
//!   closed [`Timeouts::idle`] later. This also bounds a client that stops reading a response.
//!
//! A watchdog that fires drops the connection, which closes the socket without an answer
//! (there is no complete request to answer). hyper answers a head it cannot parse itself
//! (400, 414 or 431 with an empty body, then closes); the socket wrapper replaces that answer,
//! as it is written, by the same status with a JSON body.

use std::future::Future;
use std::io;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::Service;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::tcp::OwnedReadHalf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::api::ApiError;
use crate::outbox::Outbox;

/// The connection timeouts (the body timeout is the handlers').
#[derive(Clone, Copy, Debug)]
pub(crate) struct Timeouts {
    /// From a connection's start or a request's first byte to its complete head.
    pub header: Duration,
    /// From a response to the first byte of the next request.
    pub idle: Duration,
    /// From the shutdown signal to closing every connection still open.
    pub shutdown: Duration,
}

/// Serves `router` on `listener` until `shutdown` resolves; then stops accepting, closes
/// connections waiting for a request, lets those in a request finish, and after
/// `timeouts.shutdown` drops whatever is still open.
pub(crate) async fn serve_router(
    listener: TcpListener,
    router: Router,
    timeouts: Timeouts,
    shutdown: impl Future<Output = ()>,
) {
    serve_router_on(listener, router, timeouts, None, shutdown).await;
}

/// [`serve_router`] with each connection run on one of `workers` in turn (else on the
/// current runtime).
pub(crate) async fn serve_router_on(
    listener: TcpListener,
    router: Router,
    timeouts: Timeouts,
    workers: Option<&Workers>,
    shutdown: impl Future<Output = ()>,
) {
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut connections = JoinSet::new();
    let mut shutdown = pin!(shutdown);
    let mut next = 0usize;
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => match workers {
                    None => {
                        connections.spawn(connection(tcp, router.clone(), timeouts, stop_rx.clone()));
                    }
                    Some(w) => {
                        // The socket moves to the worker's own reactor.
                        let Ok(std) = tcp.into_std() else { continue };
                        let (router, stop) = (router.clone(), stop_rx.clone());
                        let handle = &w.handles[next % w.handles.len()];
                        next = next.wrapping_add(1);
                        connections.spawn_on(
                            async move {
                                if let Ok(tcp) = TcpStream::from_std(std) {
                                    connection(tcp, router, timeouts, stop).await;
                                }
                            },
                            handle,
                        );
                    }
                },
                // A connection reset before it was accepted is that connection's problem.
                Err(e) if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionAborted
                        | io::ErrorKind::ConnectionReset
                        | io::ErrorKind::ConnectionRefused
                ) => {}
                // Out of file descriptors, most likely: let some connections close.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    let _ = stop_tx.send(true);
    let drained = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(timeouts.shutdown, drained)
        .await
        .is_err()
    {
        // Dropping the set aborts the connections still open, closing their sockets.
        connections.abort_all();
    }
}

/// One single-threaded runtime per worker thread, each running the connections given to it
/// from start to end. A connection never moves between threads, so the answers a thread holds
/// ([`crate::outbox`]) are written at that thread's park, which no work stolen from another
/// thread postpones.
pub(crate) struct Workers {
    handles: Vec<tokio::runtime::Handle>,
    /// Per worker: the sender that ends it, with the time its runtime's blocking work still
    /// gets, and its thread.
    threads: Vec<(
        tokio::sync::oneshot::Sender<Duration>,
        std::thread::JoinHandle<()>,
    )>,
}

impl Workers {
    /// Starts `n` worker threads.
    pub(crate) fn start(n: usize) -> io::Result<Workers> {
        let n = n.max(1);
        let mut workers = Workers {
            handles: Vec::with_capacity(n),
            threads: Vec::with_capacity(n),
        };
        for i in 0..n {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .on_thread_park(crate::outbox::on_park)
                .build()?;
            workers.handles.push(runtime.handle().clone());
            let (stop, stopped) = tokio::sync::oneshot::channel::<Duration>();
            let thread = std::thread::Builder::new()
                .name(format!("perfcast-serve-{i}"))
                .spawn(move || {
                    let left = runtime.block_on(stopped).unwrap_or(Duration::ZERO);
                    runtime.shutdown_timeout(left);
                })?;
            workers.threads.push((stop, thread));
        }
        Ok(workers)
    }

    /// Ends every worker, giving work still on their blocking pools `left` to finish.
    pub(crate) fn stop(self, left: Duration) {
        let mut threads = Vec::with_capacity(self.threads.len());
        for (stop, thread) in self.threads {
            let _ = stop.send(left);
            threads.push(thread);
        }
        for thread in threads {
            let _ = thread.join();
        }
    }
}

async fn stopped(mut stop: watch::Receiver<bool>) {
    // An error means the server is gone: stop as well.
    let _ = stop.wait_for(|s| *s).await;
}

/// One connection under its watchdog.
async fn connection(
    tcp: TcpStream,
    router: Router,
    timeouts: Timeouts,
    stop: watch::Receiver<bool>,
) {
    // Small request/response pairs: Nagle's delay would add tens of milliseconds.
    let _ = tcp.set_nodelay(true);
    let activity = Arc::new(Activity::new());
    let (read, write) = tcp.into_split();
    let io = TokioIo::new(Watched {
        read,
        out: Outbox::new(write),
        activity: Arc::clone(&activity),
        rewrite: None,
    });
    let service = Tracked {
        inner: TowerToHyperService::new(router),
        activity: Arc::clone(&activity),
    };
    let mut builder = http1::Builder::new();
    // The watchdog keeps the header and idle timeouts (see the module doc).
    builder.header_read_timeout(None);
    let mut conn = pin!(builder.serve_connection(io, service));
    // In this order: the watchdog reads the phase the connection was left in.
    tokio::select! {
        biased;
        _ = conn.as_mut() => return,
        () = Watchdog::new(&activity, timeouts) => return,
        () = stopped(stop) => {}
    }
    // Shutting down: a connection waiting for a request is closed now (dropped); one in a
    // request answers it, then closes.
    if activity.busy() {
        conn.as_mut().graceful_shutdown();
        tokio::select! {
            biased;
            _ = conn.as_mut() => {}
            () = Watchdog::new(&activity, timeouts) => {}
        }
    }
}

/// What a connection is doing, for its watchdog.
#[derive(Clone, Copy, Debug)]
enum Phase {
    /// Waiting for the rest of a request head, since then.
    Head(Instant),
    /// In the service: this many requests.
    Busy(usize),
    /// Answered; no byte of a next request since then.
    Idle(Instant),
}

/// A connection's phase, shared by its socket, its service and its watchdog, which all run in
/// the connection's task.
struct Activity {
    phase: Mutex<Phase>,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            phase: Mutex::new(Phase::Head(Instant::now())),
        }
    }

    fn phase(&self) -> Phase {
        *self.phase.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn busy(&self) -> bool {
        matches!(self.phase(), Phase::Busy(_))
    }

    fn update(&self, f: impl FnOnce(Phase) -> Option<Phase>) {
        let mut phase = self.phase.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(next) = f(*phase) {
            *phase = next;
        }
    }

    /// Bytes arrived: on an idle connection they start the next request's head.
    fn on_bytes(&self) {
        self.update(|p| match p {
            Phase::Idle(_) => Some(Phase::Head(Instant::now())),
            _ => None,
        });
    }

    fn begin(&self) {
        self.update(|p| {
            Some(Phase::Busy(match p {
                Phase::Busy(n) => n.saturating_add(1),
                _ => 1,
            }))
        });
    }

    fn end(&self) {
        self.update(|p| {
            Some(match p {
                Phase::Busy(n) if n > 1 => Phase::Busy(n - 1),
                _ => Phase::Idle(Instant::now()),
            })
        });
    }
}

/// Resolves when the connection has been in its head or idle phase for too long.
///
/// It is polled after the connection, in the same task, on every wake-up, so it sees each
/// phase the connection rests in without being told. Its timer is moved only to an earlier
/// deadline, or when it fires before the phase's own: a request read and answered within one
/// wake-up moves it not at all.
struct Watchdog<'a> {
    activity: &'a Activity,
    timeouts: Timeouts,
    sleep: Pin<Box<tokio::time::Sleep>>,
    /// The timer's deadline; `None` until it is first set.
    armed: Option<Instant>,
}

impl<'a> Watchdog<'a> {
    fn new(activity: &'a Activity, timeouts: Timeouts) -> Watchdog<'a> {
        Watchdog {
            activity,
            timeouts,
            sleep: Box::pin(tokio::time::sleep_until(Instant::now())),
            armed: None,
        }
    }

    fn arm(&mut self, at: Instant) {
        self.sleep.as_mut().reset(at);
        self.armed = Some(at);
    }
}

impl Future for Watchdog<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            let deadline = match self.activity.phase() {
                Phase::Head(since) => since + self.timeouts.header,
                Phase::Idle(since) => since + self.timeouts.idle,
                // A busy connection has no deadline; the connection's progress wakes the task.
                Phase::Busy(_) => return Poll::Pending,
            };
            match self.armed {
                Some(at) if at <= deadline => {}
                _ => self.arm(deadline),
            }
            ready!(self.sleep.as_mut().poll(cx));
            // The timer fired at or before the deadline: at it, time is up; before it, the
            // phase moved on since the timer was set, so it is set again.
            if self.armed == Some(deadline) {
                return Poll::Ready(());
            }
            self.arm(deadline);
        }
    }
}

/// Marks the connection busy while a request is in the service.
struct Busy(Arc<Activity>);

impl Busy {
    fn begin(activity: &Arc<Activity>) -> Busy {
        activity.begin();
        Busy(Arc::clone(activity))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.end();
    }
}

/// The router as a hyper service that reports each request to the watchdog.
struct Tracked {
    inner: TowerToHyperService<Router>,
    activity: Arc<Activity>,
}

type ServiceResult = Result<axum::response::Response, std::convert::Infallible>;

impl Service<hyper::Request<Incoming>> for Tracked {
    type Response = axum::response::Response;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = ServiceResult> + Send>>;

    fn call(&self, req: hyper::Request<Incoming>) -> Self::Future {
        let busy = Busy::begin(&self.activity);
        let response = self.inner.call(req);
        Box::pin(async move {
            let r = response.await;
            drop(busy);
            r
        })
    }
}

/// The socket, reporting arrivals to the watchdog and putting a JSON body in hyper's own
/// answer to a malformed head.
struct Watched {
    read: OwnedReadHalf,
    /// The write half, holding answers for the worker's park ([`crate::outbox`]).
    out: Arc<Outbox>,
    activity: Arc<Activity>,
    /// The JSON answer replacing hyper's, and how much of it is written.
    rewrite: Option<(Vec<u8>, usize)>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.read).poll_read(cx, buf))?;
        if buf.filled().len() > before {
            self.activity.on_bytes();
        }
        Poll::Ready(Ok(()))
    }
}

impl Watched {
    /// Writes the JSON answer if `first` (the start of what hyper writes) is hyper's own
    /// error answer, or one is under way; `None`: write hyper's bytes as they are.
    fn poll_rewrite(
        &mut self,
        cx: &mut Context<'_>,
        first: &[u8],
        len: usize,
    ) -> Option<Poll<io::Result<usize>>> {
        if self.rewrite.is_none() {
            let status = automatic_error_status(first)?;
            self.rewrite = Some((json_error_response(status), 0));
        }
        let (bytes, written) = self.rewrite.as_mut()?;
        while *written < bytes.len() {
            match self.out.poll_write_through(cx, &bytes[*written..]) {
                Poll::Ready(Ok(0)) => {
                    return Some(Poll::Ready(Err(io::ErrorKind::WriteZero.into())));
                }
                Poll::Ready(Ok(n)) => *written += n,
                Poll::Ready(Err(e)) => return Some(Poll::Ready(Err(e))),
                Poll::Pending => return Some(Poll::Pending),
            }
        }
        // hyper's bytes are taken and dropped; it closes the connection after them.
        Some(Poll::Ready(Ok(len)))
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if let Some(p) = self.poll_rewrite(cx, buf, buf.len()) {
            return p;
        }
        self.out.poll_write_vectored(cx, &[io::IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let first = bufs
            .iter()
            .find(|b| !b.is_empty())
            .map_or(&[][..], |b| &b[..]);
        let len = bufs.iter().map(|b| b.len()).sum();
        if let Some(p) = self.poll_rewrite(cx, first, len) {
            return p;
        }
        self.out.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.out.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.out.poll_shutdown(cx)
    }
}

/// The status of hyper's own answer to a head it could not parse: a 4xx head with
/// `content-length: 0` and no `content-type`. Every answer of the service has a JSON body and
/// its content type, so none is taken for one; hyper writes a head in one piece, so a write
/// that starts with a status line starts a head.
fn automatic_error_status(buf: &[u8]) -> Option<u16> {
    let rest = buf.strip_prefix(b"HTTP/1.1 4")?;
    let code = std::str::from_utf8(rest.get(..2)?)
        .ok()?
        .parse::<u16>()
        .ok()?;
    let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = buf[..end + 2].to_ascii_lowercase();
    let has = |needle: &[u8]| head.windows(needle.len()).any(|w| w == needle);
    (has(b"\r\ncontent-length: 0\r\n") && !has(b"\r\ncontent-type:")).then_some(400 + code)
}

/// A whole HTTP/1.1 answer with a JSON error body, closing the connection.
fn json_error_response(status: u16) -> Vec<u8> {
    let error = match status {
        400 => "malformed HTTP request: the request line or a header could not be parsed",
        414 => "the request target (URI) is too long",
        431 => "the request head is too large (too many or too long header fields)",
        _ => "the request head could not be parsed",
    };
    let body = serde_json::to_vec(&ApiError::status(status, error)).unwrap_or_default();
    let reason = StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error");
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_hypers_own_empty_4xx_is_taken_for_an_automatic_answer() {
        let auto = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\ndate: Thu, 01 Jan 2026 00:00:00 GMT\r\n\r\n";
        assert_eq!(automatic_error_status(auto), Some(400));
        let big = b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(automatic_error_status(big), Some(431));
        // The service's answers carry a JSON body and its type.
        let app = b"HTTP/1.1 422 Unprocessable Entity\r\ncontent-type: application/json\r\ncontent-length: 0\r\n\r\n";
        assert_eq!(automatic_error_status(app), None);
        assert_eq!(
            automatic_error_status(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"),
            None
        );
        // A write that continues a head, or a body.
        assert_eq!(automatic_error_status(b"content-length: 0\r\n\r\n"), None);
        let r = String::from_utf8(json_error_response(400)).unwrap();
        let (head, body) = r.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{head}");
        assert!(head.contains(&format!("content-length: {}", body.len())));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert!(v["error"].as_str().unwrap().contains("malformed"));
        assert!(v["field"].is_null());
    }
}
