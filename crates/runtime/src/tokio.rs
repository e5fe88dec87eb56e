//! tokio's `AsyncRead` and `AsyncWrite` over a [`Runtime`]'s connections
//! (feature `tokio`), for servers written once for `tokio::net` and for this stack.
//!
//! In-thread ([`Mode::InThread`](crate::Mode)), the stack runs on the tokio runtime's own
//! workers: a call that cannot complete polls the stack, and a driver task, spawned on the
//! first call, polls it between the tasks it wakes, so one turn of a worker answers every
//! ready connection with one transmit, and no byte or wake-up crosses to another thread.
//! Idle for the spin time (never when busy-polling), the driver sleeps and the stack's
//! helper thread wakes it, and the tasks, when frames arrive. The tokio runtime needs no
//! I/O or time driver of its own for this.
//!
//! With shards ([`Mode::Shard`](crate::Mode)), each shard's thread is the reactor: when it
//! queues received bytes, takes bytes to send, hands out an accepted connection or finishes
//! a connect, it wakes the task waiting for that.
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
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use crossbeam_channel::TryRecvError;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::local_socket::{LocalStream, abandon};
use crate::wait::park;
use crate::{Connecting, Runtime};

/// A listening port of a [`Runtime`], accepting with `.await`.
#[derive(Debug)]
pub struct TcpListener {
    inner: crate::TcpListener,
}

impl TcpListener {
    /// Listen on `port` on every stack of `runtime`.
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
        self.inner.poll_accept(cx).map_ok(|stream| {
            let remote = stream.peer_addr().expect("known");
            (TcpStream { inner: stream }, remote)
        })
    }
}

/// A connection of a [`Runtime`] with tokio's `AsyncRead` and `AsyncWrite`.
#[derive(Debug)]
pub struct TcpStream {
    inner: crate::TcpStream,
}

impl TcpStream {
    /// Open a connection to `remote` on the next stack in turn.
    pub async fn connect(runtime: &Runtime, remote: impl Into<SocketAddr>) -> io::Result<TcpStream> {
        let waker: Arc<Mutex<Option<Waker>>> = Arc::default();
        let stream: crate::TcpStream = match runtime.start_connect(remote.into(), Arc::clone(&waker))? {
            Connecting::Shard(result) => poll_fn(|cx| {
                for attempt in 0..2 {
                    match result.try_recv() {
                        Ok(r) => return Poll::Ready(r),
                        Err(TryRecvError::Disconnected) => {
                            return Poll::Ready(Err(io::Error::new(
                                ErrorKind::NotConnected,
                                "the runtime has stopped",
                            )));
                        }
                        Err(TryRecvError::Empty) if attempt == 0 => park(&waker, cx),
                        Err(TryRecvError::Empty) => {}
                    }
                }
                Poll::Pending
            })
            .await?
            .into(),
            Connecting::Local(core, id) => {
                // Abandon the attempt if this future is dropped before it completes.
                struct Attempt(Option<(Arc<crate::local::Core>, bypass_stack::SocketId)>);
                impl Drop for Attempt {
                    fn drop(&mut self) {
                        if let Some((core, id)) = self.0.take() {
                            abandon(&core, id);
                        }
                    }
                }
                let mut attempt = Attempt(Some((Arc::clone(&core), id)));
                let result = poll_fn(|cx| LocalStream::poll_connect(&core, id, cx)).await;
                if result.is_ok() {
                    attempt.0 = None;
                }
                result?.into()
            }
        };
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
        self.get_mut().inner.poll_read(cx, buf)
    }
}

impl AsyncWrite for TcpStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        self.get_mut().inner.poll_write(cx, data)
    }

    /// Written bytes are queued for the stack already.
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Send FIN after what was written (`shutdown(Write)`).
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().inner.poll_shutdown(cx)
    }
}

impl TcpStream {
    /// Shut down the reading half, the writing half or both without waiting (as
    /// [`crate::TcpStream::shutdown`]); for the writing half alone prefer `.shutdown().await`.
    pub fn shutdown_std(&mut self, how: Shutdown) -> io::Result<()> {
        self.inner.shutdown(how)
    }
}
