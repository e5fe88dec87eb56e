//! A small HTTP/1.1 server, written once for any byte stream: the same code serves tokio's
//! kernel sockets and bypass-runtime's connections on our stack (`examples/http_server`, and
//! the demo, which includes this file as a module). It depends on std, tokio and `log` only.
//!
//! # What it serves
//! - `GET /`: a short text/plain page.
//! - `GET /bytes/N`: exactly N bytes (N from 0 to 1 GiB; more, or not a decimal number, is
//!   400), `Content-Type: application/octet-stream`. Byte i of the body is `(i % 251) as u8`
//!   ([`pattern_byte`]): 251 is prime, so the pattern lines up with no power-of-two buffer,
//!   chunk or segment size, and a client checks every byte without storing the body. The
//!   body is streamed from one shared 64,256-byte block (256 periods), never held whole.
//! - `HEAD` of either: the same headers, no body.
//! - Any other method: 405 with `Allow: GET, HEAD`; any other path: 404. A query string is
//!   ignored; an absolute-form target (`http://host/path`) is served by its path.
//!
//! # Connections ([RFC 9112 section 9.3](https://www.rfc-editor.org/rfc/rfc9112#section-9.3))
//! HTTP/1.1 connections persist unless the request says `Connection: close`; HTTP/1.0 ones
//! close unless it says `Connection: keep-alive` (as `ab -k` does), and then the response says
//! `Connection: keep-alive` too. A response that closes says `Connection: close`. Pipelined
//! requests are answered in order; responses are buffered and flushed whenever the server is
//! about to wait for input, so a pipelined batch leaves in a few segments and nothing waits
//! behind a request that has not arrived. Every response has `Content-Length` and
//! `Server: bypass-http-example` (and no `Date`).
//!
//! # Errors
//! A malformed request is answered 400 and the connection closed; a header section over
//! 8 KiB, 431; an HTTP version other than 1.0 and 1.1, 505; a request with
//! `Transfer-Encoding` (its body cannot be framed here), 501. A request body with
//! `Content-Length` is read and discarded. A connection is closed after 60 s without a
//! request arriving, or without the client taking any of a response. To close, the server
//! sends FIN after its last response and reads (and discards) what the client still sends
//! for up to 2 s: closing with unread data would send RST, which can destroy the response
//! before the client reads it
//! ([RFC 9112 section 9.6](https://www.rfc-editor.org/rfc/rfc9112#section-9.6)). A client
//! that goes away mid-request or mid-response ends its connection's task with a debug log.

use std::future::Future;
use std::io::{self, ErrorKind};
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncWrite, AsyncWriteExt, BufReader, BufWriter};

/// The `Server` header of every response.
pub const SERVER: &str = "bypass-http-example";
/// The largest header section accepted (request line and header fields); more is 431.
pub const MAX_HEAD: usize = 8 * 1024;
/// The largest N of `/bytes/N`: 1 GiB.
pub const MAX_BYTES: u64 = 1 << 30;
/// The pattern's period: byte i of `/bytes/N` is `i % PERIOD`.
const PERIOD: usize = 251;
/// Bytes of the pattern block a body is streamed from: a whole number of periods, so each
/// block continues the pattern where the previous one stopped.
const BLOCK: usize = PERIOD * 256;
/// Buffered response bytes (many pipelined responses, or one header) before a write.
const WRITE_BUFFER: usize = 16 * 1024;
/// How long a connection may wait for its next request (or the rest of one), or for the
/// client to take more of a response.
const IDLE: Duration = Duration::from_secs(60);
/// How long a closing connection drains what the client still sends.
const LINGER: Duration = Duration::from_secs(2);
/// After this many accept errors in a row, give up.
const ACCEPT_ERRORS: u32 = 100;

/// A connection with buffered input and output.
type Conn<S> = BufReader<BufWriter<S>>;

/// Return byte `i` of every `/bytes/N` body.
pub fn pattern_byte(i: u64) -> u8 {
    (i % PERIOD as u64) as u8
}

/// Return the block bodies are streamed from: [`BLOCK`] bytes of the pattern from offset 0.
fn pattern_block() -> &'static [u8] {
    static BLOCK_BYTES: OnceLock<Vec<u8>> = OnceLock::new();
    BLOCK_BYTES.get_or_init(|| (0..BLOCK as u64).map(pattern_byte).collect())
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

/// Serve HTTP/1.1 requests on `stream` until the client or the protocol closes it: `Ok` when
/// it ended as HTTP says, `Err` when the client went away mid-request or mid-response (or
/// the stream failed).
pub async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin>(stream: S) -> io::Result<()> {
    let mut conn: Conn<S> = BufReader::with_capacity(MAX_HEAD, BufWriter::with_capacity(WRITE_BUFFER, stream));
    let mut head = Vec::with_capacity(1024);
    loop {
        head.clear();
        let read = match tokio::time::timeout(IDLE, read_head(&mut conn, &mut head)).await {
            Ok(read) => read?,
            Err(_) => return close(conn).await,
        };
        match read {
            HeadRead::Closed => return Ok(()),
            HeadRead::Truncated => {
                return Err(io::Error::new(ErrorKind::UnexpectedEof, "the client closed mid-request"));
            }
            HeadRead::TooLarge => {
                let message = format!("the header section exceeds {MAX_HEAD} bytes");
                error_response(&mut conn, Status::HeaderTooLarge, &message).await?;
                return close(conn).await;
            }
            HeadRead::Complete => {}
        }
        let request = match parse_request(&head) {
            Ok(request) => request,
            Err((status, why)) => {
                error_response(&mut conn, status, why).await?;
                return close(conn).await;
            }
        };
        if request.body_len > 0 {
            match tokio::time::timeout(IDLE, discard(&mut conn, request.body_len)).await {
                Ok(done) => done?,
                Err(_) => return close(conn).await,
            }
        }
        let persistent = request.persistent();
        respond(&mut conn, &request, persistent).await?;
        if !persistent {
            return close(conn).await;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Reading requests
// ---------------------------------------------------------------------------------------------

/// How reading a request's header section ended.
enum HeadRead {
    /// The head is in the buffer, up to and including its empty line.
    Complete,
    /// The client closed before sending anything of a request.
    Closed,
    /// The client closed in the middle of a head.
    Truncated,
    /// The head would exceed [`MAX_HEAD`].
    TooLarge,
}

/// Return what has arrived, waiting for more only when nothing is buffered, and flushing the
/// buffered responses before any wait.
async fn fill<S: AsyncRead + AsyncWrite + Unpin>(conn: &mut Conn<S>) -> io::Result<&[u8]> {
    if conn.buffer().is_empty() {
        conn.get_mut().flush().await?;
    }
    conn.fill_buf().await
}

/// Read a request's header section, line by line, into `head` (empty lines before the
/// request line are skipped, as RFC 9112 section 2.2 allows).
async fn read_head<S: AsyncRead + AsyncWrite + Unpin>(conn: &mut Conn<S>, head: &mut Vec<u8>) -> io::Result<HeadRead> {
    let mut line_start = 0;
    let mut skipped = 0;
    loop {
        let buf = fill(conn).await?;
        if buf.is_empty() {
            return Ok(if head.is_empty() { HeadRead::Closed } else { HeadRead::Truncated });
        }
        let (take, line_ends) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        if skipped + head.len() + take > MAX_HEAD {
            return Ok(HeadRead::TooLarge);
        }
        head.extend_from_slice(&buf[..take]);
        conn.consume(take);
        if !line_ends {
            continue;
        }
        let line = &head[line_start..];
        if line == b"\r\n" || line == b"\n" {
            if line_start > 0 {
                return Ok(HeadRead::Complete);
            }
            skipped += line.len();
            head.clear();
        } else {
            line_start = head.len();
        }
    }
}

/// Read and drop `len` bytes of request body.
async fn discard<S: AsyncRead + AsyncWrite + Unpin>(conn: &mut Conn<S>, mut len: u64) -> io::Result<()> {
    while len > 0 {
        let buf = fill(conn).await?;
        if buf.is_empty() {
            return Err(io::Error::new(ErrorKind::UnexpectedEof, "the client closed mid-body"));
        }
        let n = buf.len().min(usize::try_from(len).unwrap_or(usize::MAX));
        conn.consume(n);
        len -= n as u64;
    }
    Ok(())
}

/// The request methods served.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Method {
    Get,
    Head,
    Other,
}

/// What the server needs of a request.
struct Request {
    method: Method,
    /// The path, without a query (origin-form, or the path of an absolute-form target).
    path: String,
    /// The minor version of HTTP/1.x.
    minor: u8,
    /// `Connection: close` was asked for.
    close: bool,
    /// `Connection: keep-alive` was asked for.
    keep_alive: bool,
    /// The body's `Content-Length` (0 without one).
    body_len: u64,
}

impl Request {
    /// Return whether the connection stays open after the response (RFC 9112 section 9.3).
    fn persistent(&self) -> bool {
        !self.close && (self.minor >= 1 || self.keep_alive)
    }
}

/// Parse a header section (RFC 9112 sections 3 and 5), or return the status and reason to
/// refuse it with.
fn parse_request(head: &[u8]) -> Result<Request, (Status, &'static str)> {
    const BAD: Status = Status::BadRequest;
    let mut lines = head.split(|&b| b == b'\n').map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let request_line = lines.next().ok_or((BAD, "no request line"))?;
    let mut words = request_line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) = (words.next(), words.next(), words.next(), words.next())
    else {
        return Err((BAD, "the request line is not METHOD TARGET VERSION"));
    };
    if method.is_empty() || !method.iter().all(|&b| is_token(b)) {
        return Err((BAD, "the method is not a token"));
    }
    if target.is_empty() || !target.iter().all(|b| b.is_ascii_graphic()) {
        return Err((BAD, "the target is not visible ASCII"));
    }
    let minor = match version {
        b"HTTP/1.1" => 1,
        b"HTTP/1.0" => 0,
        [b'H', b'T', b'T', b'P', b'/', major, b'.', minor] if major.is_ascii_digit() && minor.is_ascii_digit() => {
            return Err((Status::VersionNotSupported, "only HTTP/1.0 and HTTP/1.1 are served"));
        }
        _ => return Err((BAD, "the version is not HTTP/x.y")),
    };
    let mut request = Request {
        method: match method {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            _ => Method::Other,
        },
        path: origin_path(std::str::from_utf8(target).expect("visible ASCII")).to_string(),
        minor,
        close: false,
        keep_alive: false,
        body_len: 0,
    };
    let mut hosts = 0;
    let mut content_length = None;
    for line in lines.filter(|l| !l.is_empty()) {
        if line[0] == b' ' || line[0] == b'\t' {
            return Err((BAD, "obsolete line folding"));
        }
        let colon = line.iter().position(|&b| b == b':').ok_or((BAD, "a header field without a colon"))?;
        let (name, value) = (&line[..colon], trim_ows(&line[colon + 1..]));
        if name.is_empty() || !name.iter().all(|&b| is_token(b)) {
            return Err((BAD, "a header field name is not a token"));
        }
        if value.iter().any(|&b| b == b'\r' || b == 0) {
            return Err((BAD, "a header field value holds CR or NUL"));
        }
        if name.eq_ignore_ascii_case(b"host") {
            hosts += 1;
        } else if name.eq_ignore_ascii_case(b"connection") {
            for option in value.split(|&b| b == b',').map(trim_ows) {
                request.close |= option.eq_ignore_ascii_case(b"close");
                request.keep_alive |= option.eq_ignore_ascii_case(b"keep-alive");
            }
        } else if name.eq_ignore_ascii_case(b"content-length") {
            // A list of one value repeated is that value (RFC 9110 section 8.6).
            for item in value.split(|&b| b == b',').map(trim_ows) {
                let len = parse_decimal(item).ok_or((BAD, "Content-Length is not a decimal number"))?;
                if content_length.is_some_and(|l| l != len) {
                    return Err((BAD, "Content-Length values differ"));
                }
                content_length = Some(len);
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            return Err((Status::NotImplemented, "request bodies with Transfer-Encoding are not served"));
        }
    }
    if minor == 1 && hosts != 1 {
        return Err((BAD, "an HTTP/1.1 request needs exactly one Host"));
    }
    request.body_len = content_length.unwrap_or(0);
    Ok(request)
}

/// Return the path of a request target without its query: origin-form as it is, the path of
/// an absolute-form target (`http://host:port/path`, or `/` when it has none).
fn origin_path(target: &str) -> &str {
    let target = target.split_once('?').map_or(target, |(path, _)| path);
    match target.find("://") {
        Some(i) if !target.starts_with('/') => target[i + 3..].find('/').map_or("/", |p| &target[i + 3 + p..]),
        _ => target,
    }
}

/// Return whether `b` may appear in a token (RFC 9110 section 5.6.2).
fn is_token(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Return `s` without leading and trailing spaces and tabs.
fn trim_ows(s: &[u8]) -> &[u8] {
    let start = s.iter().position(|&b| b != b' ' && b != b'\t').unwrap_or(s.len());
    let end = s.iter().rposition(|&b| b != b' ' && b != b'\t').map_or(start, |e| e + 1);
    &s[start..end]
}

/// Parse 1DIGIT+ as a u64 (no sign, no spaces), or `None` if it is not one or overflows.
fn parse_decimal(s: &[u8]) -> Option<u64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(s).ok()?.parse().ok()
}

// ---------------------------------------------------------------------------------------------
// Responses
// ---------------------------------------------------------------------------------------------

/// The statuses the server answers with.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Status {
    Ok,
    BadRequest,
    NotFound,
    MethodNotAllowed,
    HeaderTooLarge,
    NotImplemented,
    VersionNotSupported,
}

impl Status {
    /// Return the status line's code and reason phrase.
    fn line(self) -> &'static str {
        match self {
            Status::Ok => "200 OK",
            Status::BadRequest => "400 Bad Request",
            Status::NotFound => "404 Not Found",
            Status::MethodNotAllowed => "405 Method Not Allowed",
            Status::HeaderTooLarge => "431 Request Header Fields Too Large",
            Status::NotImplemented => "501 Not Implemented",
            Status::VersionNotSupported => "505 HTTP Version Not Supported",
        }
    }
}

/// A response body.
enum Body {
    /// Text, sent as it is.
    Text(String),
    /// `len` bytes of the pattern.
    Pattern(u64),
}

impl Body {
    fn len(&self) -> u64 {
        match self {
            Body::Text(text) => text.len() as u64,
            Body::Pattern(len) => *len,
        }
    }
}

/// The page of `GET /`.
const INDEX: &str = "Hello from bypass-http-example.\n\
GET /bytes/N returns N bytes (N up to 1073741824); byte i is (i % 251).\n";

/// Answer `request`; `persistent` says whether the connection stays open after it.
async fn respond<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut Conn<S>,
    request: &Request,
    persistent: bool,
) -> io::Result<()> {
    let response = Response { head_only: request.method == Method::Head, persistent, minor: request.minor };
    if request.method == Method::Other {
        let body = Body::Text("405 Method Not Allowed: this server serves GET and HEAD\n".into());
        return response.write(conn, Status::MethodNotAllowed, "text/plain", "Allow: GET, HEAD\r\n", &body).await;
    }
    let (status, content_type, body) = if request.path == "/" {
        (Status::Ok, "text/plain; charset=utf-8", Body::Text(INDEX.into()))
    } else if let Some(n) = request.path.strip_prefix("/bytes/") {
        match parse_decimal(n.as_bytes()) {
            Some(len) if len <= MAX_BYTES => (Status::Ok, "application/octet-stream", Body::Pattern(len)),
            _ => {
                let why = format!("400 Bad Request: /bytes/N takes a decimal N from 0 to {MAX_BYTES}\n");
                (Status::BadRequest, "text/plain", Body::Text(why))
            }
        }
    } else {
        (Status::NotFound, "text/plain", Body::Text(format!("404 Not Found: {}\n", request.path)))
    };
    response.write(conn, status, content_type, "", &body).await
}

/// Answer a request that could not be read with `status` and `why` (the connection then
/// closes).
async fn error_response<S: AsyncRead + AsyncWrite + Unpin>(
    conn: &mut Conn<S>,
    status: Status,
    why: &str,
) -> io::Result<()> {
    let body = Body::Text(format!("{}: {why}\n", status.line()));
    let response = Response { head_only: false, persistent: false, minor: 1 };
    response.write(conn, status, "text/plain", "", &body).await
}

/// How a response goes out.
struct Response {
    /// Headers only (`HEAD`).
    head_only: bool,
    /// The connection stays open after it.
    persistent: bool,
    /// The request's minor HTTP/1.x version.
    minor: u8,
}

impl Response {
    /// Write the status line, the headers (`extra` holds more header lines, each ending in
    /// CRLF) and, unless `head_only`, the body.
    async fn write<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        conn: &mut Conn<S>,
        status: Status,
        content_type: &str,
        extra: &str,
        body: &Body,
    ) -> io::Result<()> {
        let connection = match (self.persistent, self.minor) {
            (false, _) => "Connection: close\r\n",
            (true, 0) => "Connection: keep-alive\r\n",
            (true, _) => "",
        };
        let (status, len) = (status.line(), body.len());
        let head = format!(
            "HTTP/1.1 {status}\r\nServer: {SERVER}\r\nContent-Type: {content_type}\r\n\
             Content-Length: {len}\r\n{connection}{extra}\r\n"
        );
        write(conn, head.as_bytes()).await?;
        if self.head_only {
            return Ok(());
        }
        match body {
            Body::Text(text) => write(conn, text.as_bytes()).await,
            Body::Pattern(len) => {
                let block = pattern_block();
                let mut left = *len;
                while left > 0 {
                    let n = usize::try_from(left).map_or(block.len(), |l| l.min(block.len()));
                    write(conn, &block[..n]).await?;
                    left -= n as u64;
                }
                Ok(())
            }
        }
    }
}

/// Write all of `bytes`, failing with `TimedOut` when the client takes none for [`IDLE`].
async fn write<S: AsyncRead + AsyncWrite + Unpin>(conn: &mut Conn<S>, bytes: &[u8]) -> io::Result<()> {
    match tokio::time::timeout(IDLE, conn.write_all(bytes)).await {
        Ok(written) => written,
        Err(_) => Err(io::Error::new(ErrorKind::TimedOut, "the client took no response bytes for 60 s")),
    }
}

/// Close as RFC 9112 section 9.6 says: send what is buffered and FIN, then read and discard
/// what the client still sends until it closes or [`LINGER`] passes (a client that takes
/// nothing more gets [`LINGER`] for the buffered bytes, then the stream is dropped).
async fn close<S: AsyncRead + AsyncWrite + Unpin>(mut conn: Conn<S>) -> io::Result<()> {
    match tokio::time::timeout(LINGER, conn.shutdown()).await {
        Ok(shut) => shut?,
        Err(_) => return Err(io::Error::new(ErrorKind::TimedOut, "the client took no more bytes while closing")),
    }
    let drained = tokio::time::timeout(LINGER, tokio::io::copy(&mut conn, &mut tokio::io::sink())).await;
    if let Ok(Err(e)) = drained {
        log::trace!("draining a closing connection: {e}");
    }
    Ok(())
}
