//! Answers held until the worker thread runs out of ready connections, then written together.
//!
//! On loopback, a small answer's write runs the receiver's TCP path in the sender and wakes
//! the receiver when it sleeps. Written as each request is answered, a client that handles an
//! answer faster than the server makes one sleeps between answers and is woken for each: a
//! cross-core wake-up per request, on both sides. Held until the worker has no ready task left
//! (tokio's park hook, [`on_park`]) and written then, one batch of answers wakes the client
//! once, and its next requests find the server awake.
//!
//! A worker holds answers only once it has parked (so a runtime without the hook, a test's,
//! writes at once), at most [`HOLD_LIMIT`] bytes per connection (a larger answer is written
//! through, after what is held), and for at most [`HOLD_CONNECTIONS`] connections. What the
//! park could not write (the socket's buffer full) is left to the connection's task, which the
//! park wakes: hyper flushes on every poll, and [`Outbox::poll_flush`] then writes the rest
//! under the socket's own readiness.

use std::cell::{Cell, RefCell};
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker, ready};

use tokio::io::AsyncWrite;
use tokio::net::tcp::OwnedWriteHalf;

/// The most bytes a connection holds for the park; more are written through.
pub(crate) const HOLD_LIMIT: usize = 64 * 1024;
/// The most connections a thread holds answers for: the next answer writes them all, so the
/// first answer of a long batch waits for at most this many others.
const HOLD_CONNECTIONS: usize = 64;

thread_local! {
    /// Whether this thread runs the park hook (a worker of the server's runtime).
    static PARKS: Cell<bool> = const { Cell::new(false) };
    /// Connections with answers held on this thread.
    static HELD: RefCell<Vec<Arc<Outbox>>> = const { RefCell::new(Vec::new()) };
}

/// The runtime's park hook: writes every answer this thread holds.
pub(crate) fn on_park() {
    PARKS.set(true);
    write_all_held();
}

/// Writes every answer this thread holds.
fn write_all_held() {
    let mut held = HELD.with_borrow_mut(std::mem::take);
    for outbox in held.drain(..) {
        outbox.write_held();
    }
    // Keep the list's allocation for the next batch.
    HELD.with_borrow_mut(|h| {
        if h.is_empty() {
            *h = held;
        }
    });
}

/// A connection's write half and the answers it holds.
pub(crate) struct Outbox {
    inner: Mutex<Inner>,
}

struct Inner {
    half: OwnedWriteHalf,
    held: Vec<u8>,
    /// In a thread's [`HELD`] list: written at that thread's next park.
    queued: bool,
    /// The connection's task, woken when the park leaves bytes behind.
    waker: Option<Waker>,
}

impl Inner {
    /// Writes what is held through the socket's readiness.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.held.is_empty() {
            let n = ready!(Pin::new(&mut self.half).poll_write(cx, &self.held))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.held.drain(..n);
        }
        Poll::Ready(Ok(()))
    }
}

impl Outbox {
    pub(crate) fn new(half: OwnedWriteHalf) -> Arc<Outbox> {
        Arc::new(Outbox {
            inner: Mutex::new(Inner {
                half,
                held: Vec::new(),
                queued: false,
                waker: None,
            }),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Writes what is held without waiting; what the socket does not take is left to the
    /// connection's task, which is woken for it.
    fn write_held(&self) {
        let mut inner = self.lock();
        inner.queued = false;
        let mut written = 0;
        while written < inner.held.len() {
            match inner.half.try_write(&inner.held[written..]) {
                Ok(0) => break,
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // Would block, or an error the task meets on its next write.
                Err(_) => break,
            }
        }
        inner.held.drain(..written);
        if !inner.held.is_empty()
            && let Some(w) = inner.waker.take()
        {
            w.wake();
        }
    }

    /// Holds `bufs` for the park where it can, else writes them through.
    pub(crate) fn poll_write_vectored(
        self: &Arc<Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        let mut inner = self.lock();
        // Held bytes the park already gave back (not queued) go out before anything new.
        let holdable = inner.queued || inner.held.is_empty();
        if holdable && PARKS.get() && inner.held.len() + len <= HOLD_LIMIT {
            for b in bufs {
                inner.held.extend_from_slice(b);
            }
            if !inner
                .waker
                .as_ref()
                .is_some_and(|w| w.will_wake(cx.waker()))
            {
                inner.waker = Some(cx.waker().clone());
            }
            let mut full = false;
            if !inner.queued {
                inner.queued = true;
                HELD.with_borrow_mut(|h| {
                    h.push(Arc::clone(self));
                    full = h.len() >= HOLD_CONNECTIONS;
                });
            }
            drop(inner);
            if full {
                write_all_held();
            }
            return Poll::Ready(Ok(len));
        }
        ready!(inner.poll_drain(cx))?;
        Pin::new(&mut inner.half).poll_write_vectored(cx, bufs)
    }

    /// Writes `buf` through, after what is held.
    pub(crate) fn poll_write_through(
        &self,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let mut inner = self.lock();
        ready!(inner.poll_drain(cx))?;
        Pin::new(&mut inner.half).poll_write(cx, buf)
    }

    /// Ready at once while the answers wait for the park; else writes what is held.
    pub(crate) fn poll_flush(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut inner = self.lock();
        if inner.queued {
            return Poll::Ready(Ok(()));
        }
        ready!(inner.poll_drain(cx))?;
        Pin::new(&mut inner.half).poll_flush(cx)
    }

    /// Writes what is held, then shuts the write side down.
    pub(crate) fn poll_shutdown(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut inner = self.lock();
        ready!(inner.poll_drain(cx))?;
        Pin::new(&mut inner.half).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::future::poll_fn;
    use tokio::io::AsyncReadExt;
    use tokio::net::{TcpListener, TcpStream};

    async fn pair() -> (TcpStream, Arc<Outbox>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let (_read, write) = server.into_split();
        // The read half is dropped: the socket stays open through the write half.
        (client, Outbox::new(write))
    }

    /// Writes all of `bytes` as hyper does: again for what a write did not take.
    async fn write(out: &Arc<Outbox>, bytes: &[u8]) {
        let mut at = 0;
        while at < bytes.len() {
            at += poll_fn(|cx| out.poll_write_vectored(cx, &[io::IoSlice::new(&bytes[at..])]))
                .await
                .unwrap();
        }
    }

    #[tokio::test]
    async fn a_thread_that_never_parked_writes_at_once() {
        let (mut client, out) = pair().await;
        write(&out, b"hello").await;
        assert!(out.lock().held.is_empty());
        let mut got = [0u8; 5];
        client.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello");
    }

    #[tokio::test]
    async fn answers_wait_for_the_park_and_go_out_in_order() {
        let (mut client, out) = pair().await;
        on_park();
        write(&out, b"one ").await;
        write(&out, b"two ").await;
        assert_eq!(out.lock().held, b"one two ");
        assert_eq!(HELD.with_borrow(Vec::len), 1, "queued once");
        poll_fn(|cx| out.poll_flush(cx)).await.unwrap();
        on_park();
        assert!(out.lock().held.is_empty());
        // Past the limit the answer is written through, after what is held.
        write(&out, b"three ").await;
        let big = vec![b'x'; HOLD_LIMIT];
        write(&out, &big).await;
        poll_fn(|cx| out.poll_shutdown(cx)).await.unwrap();
        let mut got = Vec::new();
        client.read_to_end(&mut got).await.unwrap();
        assert_eq!(&got[..14], b"one two three ");
        assert_eq!(got.len(), 14 + HOLD_LIMIT);
        on_park();
    }
}
