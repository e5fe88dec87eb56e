//! A small HTTP/1.1 server on hyper, written once for any byte stream: the same code serves
//! tokio's kernel sockets and bypass-runtime's connections on our stack
//! (`examples/http_server`, and the demo, which includes this file as a module).
//!
//! hyper's HTTP/1 server (`hyper::server::conn::http1`) reads and parses requests, frames and
//! writes responses and decides when a connection persists; [`TokioIo`] adapts the tokio
//! stream to it. What this file adds: the routes (a synchronous service), a response body
//! streamed from one static block, the `Host` check hyper leaves to its services, a write
//! timeout hyper does not have, and a lingering close.
//!
//! # What it serves
//! - `GET /`: a short text/plain page.
//! - `GET /bytes/N`: exactly N bytes (N from 0 to 1 GiB; more, or not a decimal number, is
//!   400), `Content-Type: application/octet-stream`. Byte i of the body is `(i % 251) as u8`
//!   ([`pattern_byte`]): 251 is prime, so the pattern lines up with no power-of-two buffer,
//!   chunk or segment size, and a client checks every byte without storing the body. The
//!   body is streamed in frames sliced from one static 64,256-byte block (256 periods), so
//!   no response allocates or holds its body.
//! - `HEAD` of either: the same headers, no body.
//! - Any other method: 405 with `Allow: GET, HEAD`; any other path: 404. A query string is
//!   ignored; an absolute-form target (`http://host/path`) is served by its path.
//!
//! Every response the service makes has `Server: bypass-http-example` and `Content-Length`;
//! hyper adds `Date` and writes header names in title case (`Content-Length`).
//!
//! # Connections ([RFC 9112 section 9.3](https://www.rfc-editor.org/rfc/rfc9112#section-9.3))
//! hyper keeps HTTP/1.1 connections open unless the request says `Connection: close`, and
//! HTTP/1.0 ones only when it says `Connection: keep-alive` (as `ab -k` does), to which it
//! answers `Connection: keep-alive`; it answers an HTTP/1.0 request with an `HTTP/1.0`
//! status line. A response after which the connection closes says `Connection: close`.
//! Pipelined requests are answered in order, each response written as soon as it is made.
//! The service reads no request body: hyper skips one that a single read finds whole (a
//! short `Content-Length` body sent with its head) and otherwise closes the connection after
//! the response rather than read on.
//!
//! # Errors and timeouts
//! hyper answers a malformed request 400 (an HTTP version other than 1.0 and 1.1 too) and a
//! header section over [`MAX_HEAD`] or of more than 100 fields 431, and closes the
//! connection; these responses are hyper's own, with `Content-Length: 0` and without our
//! `Server`. The service answers an HTTP/1.1 request without `Host`, or any
//! request with more than one, 400 and closes
//! ([RFC 9112 section 3.2](https://www.rfc-editor.org/rfc/rfc9112#section-3.2)).
//! A connection is closed after 60 s without a complete request head (waiting for the next
//! request or the rest of one: hyper's header read timeout), or without the client taking
//! any of a response (this file's [`WriteTimeout`]). To close, the server sends FIN after its
//! last response and reads (and discards) what the client still sends for up to 2 s: closing
//! with unread data would send RST, which can destroy the response before the client reads
//! it ([RFC 9112 section 9.6](https://www.rfc-editor.org/rfc/rfc9112#section-9.6)). A client
//! that goes away, or closes its sending side, mid-request or mid-response ends its
//! connection's task with a debug log.

use std::convert::Infallible;
use std::future::{Future, poll_fn};
use std::io::{self, ErrorKind, IoSlice};
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::{Bytes, Frame, Incoming, SizeHint};
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode, Version};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};

/// The `Server` header of every response the service makes.
pub const SERVER: &str = "bypass-http-example";
/// The largest header section accepted (request line and header fields); more is 431.
pub const MAX_HEAD: usize = 8 * 1024;
/// The largest N of `/bytes/N`: 1 GiB.
pub const MAX_BYTES: u64 = 1 << 30;
/// The pattern's period: byte i of `/bytes/N` is `i % PERIOD`.
const PERIOD: usize = 251;
/// Bytes of the pattern block a body is streamed from: a whole number of periods, so each
/// frame continues the pattern where the previous one stopped.
const BLOCK: usize = PERIOD * 256;
/// How long a connection may wait for its next request (or the rest of one), or for the
/// client to take more of a response.
const IDLE: Duration = Duration::from_secs(60);
/// How long a closing connection drains what the client still sends.
const LINGER: Duration = Duration::from_secs(2);
/// After this many accept errors in a row, give up.
const ACCEPT_ERRORS: u32 = 100;

/// The block bodies are streamed from: [`BLOCK`] bytes of the pattern from offset 0.
static PATTERN: [u8; BLOCK] = {
    let mut block = [0; BLOCK];
    let mut i = 0;
    while i < BLOCK {
        block[i] = pattern_byte(i as u64);
        i += 1;
    }
    block
};

/// Return byte `i` of every `/bytes/N` body.
pub const fn pattern_byte(i: u64) -> u8 {
    (i % PERIOD as u64) as u8
}

/// Accept connections with `accept` until it fails for good, serving each on its own tokio
/// task with [`serve_connection`].
///
/// `accept` is the listener's accept, for any listener: `|| listener.accept()` with
/// `tokio::net::TcpListener` or `bypass_runtime::tokio::TcpListener`. `NotConnected` (the
/// listener has gone: bypass-runtime says so when its runtime stopped) ends the loop with that
/// error; other errors (a connection aborted before it was accepted, no descriptors left) are
/// logged and accepting resumes after 100 ms, unless [`ACCEPT_ERRORS`] come in a row.
pub async fn accept_loop<F, Fut, S>(mut accept: F) -> io::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = io::Result<(S, SocketAddr)>>,
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut errors = 0;
    loop {
        match accept().await {
            Ok((stream, peer)) => {
                errors = 0;
                tokio::spawn(async move {
                    match serve_connection(stream).await {
                        Ok(()) => log::trace!("{peer}: closed"),
                        Err(e) => log::debug!("{peer}: connection ended: {e}"),
                    }
                });
            }
            Err(e) if e.kind() == ErrorKind::NotConnected => return Err(e),
            Err(e) => {
                errors += 1;
                if errors >= ACCEPT_ERRORS {
                    return Err(io::Error::new(e.kind(), format!("accept failed {errors} times in a row: {e}")));
                }
                log::warn!("accept: {e}; trying again in 100 ms");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Serve HTTP/1.x requests on `stream` with hyper until the client or the protocol closes
/// it, then close it with [`close`]: `Ok` when it ended as HTTP says, `Err` when hyper
/// reports an error (a malformed or oversized request, which hyper has answered; a timeout;
/// a client that went away mid-request or mid-response; a failed stream).
pub async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin>(stream: S) -> io::Result<()> {
    let service = service_fn(|request: Request<Incoming>| std::future::ready(Ok::<_, Infallible>(respond(&request))));
    let mut conn = http1().serve_connection(TokioIo::new(WriteTimeout::new(stream)), service);
    // Without hyper's shutdown, which would close at once: the stream comes back for ours.
    let served = poll_fn(|cx| conn.poll_without_shutdown(cx)).await;
    let closed = close(conn.into_parts().io.into_inner().inner).await;
    served.map_err(io_error)?;
    closed
}

/// Return hyper's HTTP/1 server settings.
fn http1() -> http1::Builder {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        // Counted from when a connection starts waiting for a request's head.
        .header_read_timeout(IDLE)
        .max_header_size(MAX_HEAD)
        // `Content-Length`, not `content-length`, as this server has always written them:
        // names are case-insensitive, so this is for people and byte-exact checks.
        .title_case_headers(true);
    // Not `pipeline_flush(true)`: with it hyper takes a body's frames without bound before
    // writing them (its write buffer never says full), so `/bytes/1073741824` holds 1 GiB.
    http
}

/// Return hyper's `error` as an `io::Error` that names its cause too (hyper's message names
/// only the step that failed, "error writing a body to connection").
fn io_error(error: hyper::Error) -> io::Error {
    match std::error::Error::source(&error) {
        Some(cause) => io::Error::other(format!("{error}: {cause}")),
        None => io::Error::other(error),
    }
}

/// Close as RFC 9112 section 9.6 says: send FIN after what hyper wrote, then read and
/// discard what the client still sends until it closes or [`LINGER`] passes (a client that
/// takes nothing more gets [`LINGER`] for the unsent bytes, then the stream is dropped).
async fn close<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S) -> io::Result<()> {
    match tokio::time::timeout(LINGER, stream.shutdown()).await {
        Ok(shut) => shut?,
        Err(_) => return Err(io::Error::new(ErrorKind::TimedOut, "the client took no more bytes while closing")),
    }
    let drained = tokio::time::timeout(LINGER, tokio::io::copy(&mut stream, &mut tokio::io::sink())).await;
    if let Ok(Err(e)) = drained {
        log::trace!("draining a closing connection: {e}");
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The service
// ---------------------------------------------------------------------------------------------

/// The page of `GET /`.
const INDEX: &str = "Hello from bypass-http-example.\n\
GET /bytes/N returns N bytes (N up to 1073741824); byte i is (i % 251).\n";

/// Answer `request` (its body, if any, is left to hyper).
fn respond(request: &Request<Incoming>) -> Response<Body> {
    let head_only = request.method() == Method::HEAD;
    let hosts = request.headers().get_all(header::HOST).iter().count();
    if hosts > 1 || (hosts == 0 && request.version() >= Version::HTTP_11) {
        let why = "400 Bad Request: a request needs one Host field (HTTP/1.0: at most one)\n";
        return Answer { head_only, closes: true }.reply(StatusCode::BAD_REQUEST, "text/plain", Body::text(why));
    }
    let answer = Answer { head_only, closes: !persistent(request) };
    if !head_only && request.method() != Method::GET {
        let body = Body::text("405 Method Not Allowed: this server serves GET and HEAD\n");
        let mut response = answer.reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", body);
        response.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return response;
    }
    let path = request.uri().path();
    if path == "/" {
        answer.reply(StatusCode::OK, "text/plain; charset=utf-8", Body::text(INDEX))
    } else if let Some(n) = path.strip_prefix("/bytes/") {
        match parse_decimal(n) {
            Some(len) if len <= MAX_BYTES => {
                answer.reply(StatusCode::OK, "application/octet-stream", Body::Pattern(len))
            }
            _ => {
                let why = format!("400 Bad Request: /bytes/N takes a decimal N from 0 to {MAX_BYTES}\n");
                answer.reply(StatusCode::BAD_REQUEST, "text/plain", Body::Text(why.into()))
            }
        }
    } else {
        answer.reply(StatusCode::NOT_FOUND, "text/plain", Body::Text(format!("404 Not Found: {path}\n").into()))
    }
}

/// Return whether the request lets its connection persist after the response (RFC 9112
/// section 9.3): HTTP/1.1 unless it says `Connection: close`, HTTP/1.0 if it says
/// `Connection: keep-alive`.
fn persistent(request: &Request<Incoming>) -> bool {
    let (mut close, mut keep_alive) = (false, false);
    let values = request.headers().get_all(header::CONNECTION);
    for option in values.iter().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(',')).map(str::trim) {
        close |= option.eq_ignore_ascii_case("close");
        keep_alive |= option.eq_ignore_ascii_case("keep-alive");
    }
    !close && (request.version() >= Version::HTTP_11 || keep_alive)
}

/// Parse 1DIGIT+ as a u64 (no sign, no spaces), or `None` if it is not one or overflows.
fn parse_decimal(s: &str) -> Option<u64> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// How every response to a request goes out, whatever its route.
#[derive(Clone, Copy)]
struct Answer {
    /// Headers only (`HEAD`).
    head_only: bool,
    /// The connection closes after the response.
    closes: bool,
}

impl Answer {
    /// Return a response with `status`, `Server`, `Content-Type`, `Content-Length` (of
    /// `body`, for HEAD too), `Connection: close` if the connection closes after it, and
    /// `body` unless headers only.
    fn reply(self, status: StatusCode, content_type: &'static str, body: Body) -> Response<Body> {
        let len = body.len();
        let mut response = Response::new(if self.head_only { Body::Text(Bytes::new()) } else { body });
        *response.status_mut() = status;
        let headers = response.headers_mut();
        headers.insert(header::SERVER, HeaderValue::from_static(SERVER));
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        if self.closes {
            // hyper closes when the response says so (as after a missing Host), and says so
            // itself only for an HTTP/1.1 request that asked to close.
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        response
    }
}

/// A response body.
enum Body {
    /// Text, sent as one frame.
    Text(Bytes),
    /// This many more bytes of the pattern, sent in frames of up to [`BLOCK`] bytes that
    /// share [`PATTERN`] (no copy, no allocation).
    Pattern(u64),
}

impl Body {
    /// Return a body of static text (no copy).
    fn text(text: &'static str) -> Body {
        Body::Text(Bytes::from_static(text.as_bytes()))
    }

    /// Return the bytes left to send.
    fn len(&self) -> u64 {
        match self {
            Body::Text(text) => text.len() as u64,
            Body::Pattern(left) => *left,
        }
    }
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let data = match self.get_mut() {
            Body::Text(text) => std::mem::take(text),
            Body::Pattern(left) => {
                // Every frame but the last is the whole block, a whole number of periods.
                let n = usize::try_from(*left).map_or(BLOCK, |l| l.min(BLOCK));
                *left -= n as u64;
                Bytes::from_static(&PATTERN[..n])
            }
        };
        Poll::Ready((!data.is_empty()).then(|| Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.len() == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.len())
    }
}

// ---------------------------------------------------------------------------------------------
// The stream
// ---------------------------------------------------------------------------------------------

/// A stream whose writes and flushes fail with `TimedOut` once one has waited [`IDLE`] for
/// the client to take bytes: hyper has no write timeout, and a client that stops reading
/// would otherwise hold its connection and task for ever.
struct WriteTimeout<S> {
    inner: S,
    /// When the waiting write gives up; set when a write starts waiting.
    deadline: Pin<Box<tokio::time::Sleep>>,
    /// A write or flush is waiting, and `deadline` is set for it.
    waiting: bool,
}

impl<S> WriteTimeout<S> {
    /// Wrap `inner`; needs a tokio runtime with its timer.
    fn new(inner: S) -> WriteTimeout<S> {
        WriteTimeout { inner, deadline: Box::pin(tokio::time::sleep(IDLE)), waiting: false }
    }

    /// Return `poll`, the outcome of a write or flush, unless it has waited [`IDLE`]: then
    /// fail with `TimedOut`.
    fn limit<T>(&mut self, cx: &mut Context<'_>, poll: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if poll.is_ready() {
            self.waiting = false;
            return poll;
        }
        if !self.waiting {
            self.waiting = true;
            self.deadline.as_mut().reset(tokio::time::Instant::now() + IDLE);
        }
        match self.deadline.as_mut().poll(cx) {
            Poll::Ready(()) => {
                Poll::Ready(Err(io::Error::new(ErrorKind::TimedOut, "the client took no response bytes for 60 s")))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for WriteTimeout<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for WriteTimeout<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write(cx, data);
        this.limit(cx, poll)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write_vectored(cx, data);
        this.limit(cx, poll)
    }

    /// As the stream's: hyper queues body frames for `writev` where it has one, and copies
    /// them into one buffer where not.
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_flush(cx);
        this.limit(cx, poll)
    }

    /// Without a limit: [`close`] has its own.
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}
