//! tokio's `AsyncRead` and `AsyncWrite` over a [`Runtime`]'s connections
//! (feature `tokio`), for servers written once for `tokio::net` and for this stack.
//!
//! The shard's thread is the reactor: when it queues received bytes, takes bytes to send,
//! hands out an accepted connection or finishes a connect, it wakes the task waiting for
//! that. Any tokio runtime drives the tasks; none of tokio's I/O driver is used.
//!
//! ```no_run
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//! # async fn serve(runtime: &bypass_runtime::Runtime) -> std::io::Result<()> {
//! let listener = bypass_runtime::tokio::TcpListener::bind(runtime, 7)?;
//! loop {
//!     let (mut stream, _) = listener.accept().await?;
//!     tokio::spawn(async move {
//!         let mut buf = [0u8; 4096];
//!         while let Ok(n @ 1..) = stream.read(&mut buf).await {
//!             if stream.write_all(&buf[..n]).await.is_err() {
//!                 break;
//!             }
//!         }
//!     });
//! }
//! # }
//! ```

use std::future::poll_fn;
use std::io::{self, ErrorKind};
use std::net::{Shutdown, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};

use crossbeam_channel::TryRecvError;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::Runtime;
use crate::stream::Wait;

/// Park `cx`'s waker in `slot`.
fn park(slot: &Mutex<Option<Waker>>, cx: &Context<'_>) {
    let mut slot = slot.lock().unwrap_or_else(PoisonError::into_inner);
    match &*slot {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

/// A listening port of a [`Runtime`], accepting with `.await`.
#[derive(Debug)]
pub struct TcpListener {
    inner: crate::TcpListener,
}

impl TcpListener {
    /// Listen on `port` on every shard of `runtime`.
    pub fn bind(runtime: &Runtime, port: u16) -> io::Result<TcpListener> {
        Ok(TcpListener { inner: runtime.listen(port)? })
    }

    /// Wrap a blocking listener.
    pub fn from_std(inner: crate::TcpListener) -> TcpListener {
        TcpListener { inner }
    }

    /// Return the address listened on.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// Wait for the next established connection.
    pub async fn accept(&self) -> io::Result<(TcpStream, SocketAddr)> {
        poll_fn(|cx| self.poll_accept(cx)).await
    }

    /// Return the next established connection, or register to be woken when one is.
    pub fn poll_accept(&self, cx: &mut Context<'_>) -> Poll<io::Result<(TcpStream, SocketAddr)>> {
        for attempt in 0..2 {
            if let Some(stream) = self.inner.try_accept()? {
                let remote = stream.shared.remote;
                return Poll::Ready(Ok((TcpStream { inner: stream }, remote)));
            }
            if attempt == 0 {
                // Park, then look again: a connection handed out in between is not missed.
                park(&self.inner.shared.waker, cx);
            }
        }
        Poll::Pending
    }
}

/// A connection of a [`Runtime`] with tokio's `AsyncRead` and `AsyncWrite`.
#[derive(Debug)]
pub struct TcpStream {
    inner: crate::TcpStream,
}

impl TcpStream {
    /// Open a connection to `remote` on the next shard in turn.
    pub async fn connect(runtime: &Runtime, remote: impl Into<SocketAddr>) -> io::Result<TcpStream> {
        let waker: Arc<Mutex<Option<Waker>>> = Arc::default();
        let (_, result) = runtime.start_connect(remote.into(), Arc::clone(&waker));
        let stream = poll_fn(|cx| {
            for attempt in 0..2 {
                match result.try_recv() {
                    Ok(r) => return Poll::Ready(r),
                    Err(TryRecvError::Disconnected) => {
                        return Poll::Ready(Err(io::Error::new(ErrorKind::NotConnected, "the runtime has stopped")));
                    }
                    Err(TryRecvError::Empty) if attempt == 0 => park(&waker, cx),
                    Err(TryRecvError::Empty) => {}
                }
            }
            Poll::Pending
        })
        .await?;
        Ok(TcpStream { inner: stream })
    }

    /// Wrap a blocking stream.
    pub fn from_std(inner: crate::TcpStream) -> TcpStream {
        TcpStream { inner }
    }

    /// Return the blocking stream.
    pub fn into_std(self) -> crate::TcpStream {
        self.inner
    }

    /// Return the remote address.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.inner.peer_addr()
    }

    /// Return the local address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// Turn Nagle's algorithm off (`true`) or on.
    pub fn set_nodelay(&self, nodelay: bool) -> io::Result<()> {
        self.inner.set_nodelay(nodelay)
    }
}

impl AsyncRead for TcpStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        for attempt in 0..2 {
            match this.inner.read_waiting(buf.initialize_unfilled(), Wait::No) {
                Ok(Some(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(None) if attempt == 0 => park(&this.inner.shared.read_waker, cx),
                Ok(None) => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Pending
    }
}

impl AsyncWrite for TcpStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        for attempt in 0..2 {
            match this.inner.write_waiting(data, Wait::No) {
                Ok(Some(n)) => return Poll::Ready(Ok(n)),
                Ok(None) if attempt == 0 => park(&this.inner.shared.write_waker, cx),
                Ok(None) => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Pending
    }

    /// Written bytes are queued for the stack already.
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Send FIN after what was written (`shutdown(Write)`).
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        for attempt in 0..2 {
            match this.inner.try_shutdown_write() {
                Ok(true) => return Poll::Ready(Ok(())),
                Ok(false) if attempt == 0 => park(&this.inner.shared.write_waker, cx),
                Ok(false) => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
        Poll::Pending
    }
}

impl TcpStream {
    /// Shut down the reading half, the writing half or both without waiting (as
    /// [`crate::TcpStream::shutdown`]); for the writing half alone prefer `.shutdown().await`.
    pub fn shutdown_std(&mut self, how: Shutdown) -> io::Result<()> {
        self.inner.shutdown(how)
    }
}
