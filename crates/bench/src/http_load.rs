//! bypass's own HTTP/1.1 load generator: what the application row loads its servers with on
//! a machine without `wrk` or `ab`, so the demo's first run on a fresh image shows that row
//! too.
//!
//! It is closed loop, as `wrk` is: N keep-alive connections, each with one request in
//! flight; a connection sends its next request as soon as the previous response is whole, so
//! the offered load follows the server (the rate measured is the server's, at N requests
//! outstanding). All connections run as tasks of one tokio current-thread runtime (one epoll
//! loop over kernel sockets, like `wrk -t1`) on the calling thread, which the demo puts in
//! the peer namespace. Latency is from writing a request to holding its whole response,
//! recorded in an HDR histogram.
//!
//! Responses are parsed as [RFC 9112](https://www.rfc-editor.org/rfc/rfc9112) frames them:
//! a status line, header fields, and a body of exactly `Content-Length` bytes
//! (section 6.3). A connection persists unless the response says `Connection: close`, or is
//! HTTP/1.0 without `Connection: keep-alive` (section 9.3). A response this generator cannot
//! frame (no `Content-Length`, a `Transfer-Encoding`, a malformed status line or header)
//! stops the measurement with an error saying so, since every figure after it would be
//! wrong. A non-2xx status, a connection refused, reset or closed before its response was
//! whole, counts as an error (as `wrk` counts them) and the connection is opened again.

use std::fmt;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The largest response head accepted (status line and header fields).
const MAX_HEAD: usize = 16 * 1024;
/// The largest body accepted: the demo's `GET /` is a short page.
const MAX_BODY: usize = 1 << 20;
/// How long a connection waits before connecting again after a failed connect.
const RECONNECT_PAUSE: Duration = Duration::from_millis(10);

/// Why a response cannot be framed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParseError {
    /// The status line is not `HTTP/1.x NNN reason`.
    StatusLine(String),
    /// A header line has no colon, or a name that is not a token.
    Header(String),
    /// The head is longer than [`MAX_HEAD`] without ending.
    HeadTooLarge,
    /// `Content-Length` is not a decimal number, or two of them disagree.
    ContentLength(String),
    /// The body is longer than [`MAX_BODY`].
    BodyTooLarge(usize),
    /// The response has no `Content-Length`, so its end is unknown on a kept-alive connection.
    NoContentLength(u16),
    /// The response has a `Transfer-Encoding` (e.g. chunked), which this generator does not read.
    TransferEncoding(String),
    /// A 1xx interim response, which no request of ours asks for.
    Interim(u16),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::StatusLine(l) => write!(f, "malformed status line `{l}`"),
            ParseError::Header(l) => write!(f, "malformed header line `{l}`"),
            ParseError::HeadTooLarge => write!(f, "a response head longer than {MAX_HEAD} bytes"),
            ParseError::ContentLength(v) => write!(f, "bad Content-Length `{v}`"),
            ParseError::BodyTooLarge(n) => write!(f, "a body of {n} bytes, more than the {MAX_BODY} accepted"),
            ParseError::NoContentLength(s) => {
                write!(f, "a {s} response without Content-Length (its end is unknown on a kept-alive connection)")
            }
            ParseError::TransferEncoding(v) => {
                write!(f, "a response with Transfer-Encoding `{v}`, which this load generator does not read")
            }
            ParseError::Interim(s) => write!(f, "an unexpected interim {s} response"),
        }
    }
}

/// The head of one response: what framing it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Head {
    pub status: u16,
    /// Bytes of the status line and header fields, the blank line included.
    pub head_len: usize,
    /// Bytes of the body that follows.
    pub body_len: usize,
    /// The server closes the connection after this response.
    pub close: bool,
}

impl Head {
    /// Return the bytes of the whole response.
    pub fn len(&self) -> usize {
        self.head_len + self.body_len
    }
}

/// Parse the response head at the start of `buf`: `Ok(None)` while it is incomplete.
pub fn parse_head(buf: &[u8]) -> Result<Option<Head>, ParseError> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        return if buf.len() > MAX_HEAD { Err(ParseError::HeadTooLarge) } else { Ok(None) };
    };
    if end + 4 > MAX_HEAD {
        return Err(ParseError::HeadTooLarge);
    }
    let head = String::from_utf8_lossy(&buf[..end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or("");
    // RFC 9112 section 4: status-line = HTTP-version SP status-code SP [ reason-phrase ]
    let bad_status = || ParseError::StatusLine(status_line.to_string());
    let mut parts = status_line.splitn(3, ' ');
    let version = parts.next().ok_or_else(bad_status)?;
    let http10 = match version {
        "HTTP/1.1" => false,
        "HTTP/1.0" => true,
        _ => return Err(bad_status()),
    };
    let code = parts.next().ok_or_else(bad_status)?;
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad_status());
    }
    let status: u16 = code.parse().map_err(|_| bad_status())?;
    if !(100..=599).contains(&status) {
        return Err(bad_status());
    }
    if status < 200 {
        return Err(ParseError::Interim(status));
    }
    let mut content_length: Option<usize> = None;
    let (mut close, mut keep_alive) = (false, false);
    for line in lines {
        let (name, value) = line.split_once(':').ok_or_else(|| ParseError::Header(line.to_string()))?;
        // RFC 9112 section 5.1: no whitespace between the field name and the colon.
        if name.is_empty() || name.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()) {
            return Err(ParseError::Header(line.to_string()));
        }
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            let n: usize = value
                .parse()
                .ok()
                .filter(|_| value.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| ParseError::ContentLength(value.to_string()))?;
            // RFC 9112 section 6.3 (5): differing lengths make the message unframeable.
            if content_length.is_some_and(|c| c != n) {
                return Err(ParseError::ContentLength(value.to_string()));
            }
            content_length = Some(n);
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(ParseError::TransferEncoding(value.to_string()));
        } else if name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                close |= token.eq_ignore_ascii_case("close");
                keep_alive |= token.eq_ignore_ascii_case("keep-alive");
            }
        }
    }
    // RFC 9112 section 6.3 (1): 204 and 304 have no body whatever the headers say.
    let body_len = match (status, content_length) {
        (204 | 304, _) => 0,
        (_, Some(n)) if n > MAX_BODY => return Err(ParseError::BodyTooLarge(n)),
        (_, Some(n)) => n,
        (_, None) => return Err(ParseError::NoContentLength(status)),
    };
    Ok(Some(Head { status, head_len: end + 4, body_len, close: close || (http10 && !keep_alive) }))
}

/// What one load run measured.
pub struct Load {
    /// Complete responses, 2xx or not.
    pub responses: u64,
    /// Non-2xx responses, failed connects, and connections lost before a response was whole.
    pub errors: u64,
    pub elapsed: Duration,
    /// Request-to-response times, in microseconds.
    pub latency: Histogram<u64>,
}

impl Load {
    /// Return the complete responses per second.
    pub fn per_sec(&self) -> f64 {
        self.responses as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// What one connection's task counted.
struct Tally {
    responses: u64,
    errors: u64,
    latency: Histogram<u64>,
}

fn histogram() -> Histogram<u64> {
    // 1 µs to 100 s, 3 significant digits.
    Histogram::new_with_bounds(1, 100_000_000, 3).expect("valid histogram bounds")
}

/// Load `addr` with `GET /` over `connections` keep-alive connections for `duration`, from
/// the calling thread's network namespace; fail on a response that cannot be framed, or
/// when no response came back at all.
pub fn run(addr: SocketAddr, connections: usize, duration: Duration) -> Result<Load, String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the load generator's runtime: {e}"))?;
    let request = format!("GET / HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: bypass-demo\r\n\r\n").into_bytes();
    rt.block_on(async move {
        let start = Instant::now();
        let deadline = tokio::time::Instant::from_std(start + duration);
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..connections.max(1) {
            let request = request.clone();
            tasks.spawn(connection(addr, request, deadline));
        }
        let mut load = Load { responses: 0, errors: 0, elapsed: Duration::ZERO, latency: histogram() };
        let mut failure = None;
        while let Some(joined) = tasks.join_next().await {
            match joined {
                Ok(Ok(t)) => {
                    load.responses += t.responses;
                    load.errors += t.errors;
                    load.latency.add(&t.latency).map_err(|e| format!("cannot merge latencies: {e}"))?;
                }
                Ok(Err(e)) => {
                    // The first bad response says it all; stop the other connections.
                    failure.get_or_insert(e);
                    tasks.abort_all();
                }
                Err(e) if e.is_cancelled() => {}
                Err(e) => failure = Some(format!("a load generator connection panicked: {e}")),
            }
        }
        load.elapsed = start.elapsed();
        if let Some(e) = failure {
            return Err(e);
        }
        if load.responses == 0 {
            return Err(format!(
                "bypass's HTTP load generator got no response from {addr} in {:.1} s ({} errors)",
                duration.as_secs_f64(),
                load.errors
            ));
        }
        Ok(load)
    })
}

/// Keep one connection busy until `deadline`: a request, its whole response, the next.
async fn connection(addr: SocketAddr, request: Vec<u8>, deadline: tokio::time::Instant) -> Result<Tally, String> {
    let mut tally = Tally { responses: 0, errors: 0, latency: histogram() };
    // One timer for the whole run, not one per request: the tally outlives the loop it
    // stops, and a request in flight at the deadline is not counted.
    match tokio::time::timeout_at(deadline, drive(addr, &request, &mut tally)).await {
        Ok(Err(e)) => Err(e),
        Err(_) | Ok(Ok(())) => Ok(tally),
    }
}

/// Send `request` over one connection again and again, opening it again when it is lost or
/// the server closes it, into `tally`; return only on a response that cannot be framed.
async fn drive(addr: SocketAddr, request: &[u8], tally: &mut Tally) -> Result<(), String> {
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    let mut stream: Option<TcpStream> = None;
    loop {
        let s = match stream.as_mut() {
            Some(s) => s,
            None => match TcpStream::connect(addr).await {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    buf.clear();
                    stream.insert(s)
                }
                Err(e) => {
                    log::debug!("load generator: connect to {addr}: {e}");
                    tally.errors += 1;
                    tokio::time::sleep(RECONNECT_PAUSE).await;
                    continue;
                }
            },
        };
        let sent = Instant::now();
        match exchange(s, request, &mut buf).await {
            Ok(Some(head)) => {
                let us = sent.elapsed().as_micros().clamp(1, 100_000_000) as u64;
                tally.latency.saturating_record(us);
                tally.responses += 1;
                if !(200..300).contains(&head.status) {
                    tally.errors += 1;
                }
                buf.drain(..head.len());
                if head.close {
                    stream = None;
                }
            }
            Ok(None) => {
                log::debug!("load generator: {addr} closed the connection before a whole response");
                tally.errors += 1;
                stream = None;
            }
            Err(Exchange::Io(e)) => {
                log::debug!("load generator: connection to {addr}: {e}");
                tally.errors += 1;
                stream = None;
            }
            Err(Exchange::Bad(e)) => return Err(format!("bad HTTP response from {addr}: {e}")),
        }
    }
}

/// Why an exchange failed.
enum Exchange {
    Io(std::io::Error),
    Bad(ParseError),
}

/// Send `request` and read until `buf` holds its whole response; `None` if the server closed
/// the connection first.
async fn exchange(s: &mut TcpStream, request: &[u8], buf: &mut Vec<u8>) -> Result<Option<Head>, Exchange> {
    s.write_all(request).await.map_err(Exchange::Io)?;
    loop {
        if let Some(head) = parse_head(buf).map_err(Exchange::Bad)?
            && buf.len() >= head.len()
        {
            return Ok(Some(head));
        }
        // Straight into the buffer's spare room: no zeroing, no second copy.
        buf.reserve(4096);
        if s.read_buf(buf).await.map_err(Exchange::Io)? == 0 {
            return Ok(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A response as hyper writes it for the demo's `GET /`.
    const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nServer: bypass-http-example\r\nContent-Length: 5\r\nDate: Sun, 06 Dec 2026 12:00:00 GMT\r\n\r\nhello";

    #[test]
    fn frames_a_whole_response() {
        let head = parse_head(OK).unwrap().expect("a whole head");
        assert_eq!(head.status, 200);
        assert_eq!(head.body_len, 5);
        assert_eq!(head.len(), OK.len());
        assert!(!head.close);
    }

    #[test]
    fn waits_for_the_rest_of_a_head_at_every_cut() {
        let end = OK.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        for cut in 0..end {
            assert_eq!(parse_head(&OK[..cut]), Ok(None), "cut at {cut}");
        }
        // The head is whole before the body is: the caller waits for `len()` bytes.
        assert_eq!(parse_head(&OK[..end]).unwrap().unwrap().len(), OK.len());
    }

    #[test]
    fn reads_pipelined_responses_one_at_a_time() {
        let mut two = OK.to_vec();
        two.extend_from_slice(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n");
        let first = parse_head(&two).unwrap().unwrap();
        let rest = &two[first.len()..];
        let second = parse_head(rest).unwrap().unwrap();
        assert_eq!((second.status, second.body_len, second.len()), (404, 0, rest.len()));
    }

    #[test]
    fn knows_when_the_server_closes() {
        let close = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
        assert!(parse_head(close).unwrap().unwrap().close);
        let keep = b"HTTP/1.1 200 OK\r\nConnection: Keep-Alive, Upgrade\r\nContent-Length: 0\r\n\r\n";
        assert!(!parse_head(keep).unwrap().unwrap().close);
        // HTTP/1.0 closes unless it says keep-alive (RFC 9112 section 9.3).
        let old = b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n";
        assert!(parse_head(old).unwrap().unwrap().close);
        let old_kept = b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n";
        assert!(!parse_head(old_kept).unwrap().unwrap().close);
    }

    #[test]
    fn refuses_what_it_cannot_frame() {
        let cases: [(&[u8], ParseError); 9] = [
            (b"HTTP/2 200 OK\r\n\r\n", ParseError::StatusLine("HTTP/2 200 OK".into())),
            (b"HTTP/1.1 20 OK\r\n\r\n", ParseError::StatusLine("HTTP/1.1 20 OK".into())),
            (b"hello\r\n\r\n", ParseError::StatusLine("hello".into())),
            (b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n", ParseError::Header("no colon".into())),
            (b"HTTP/1.1 200 OK\r\nContent-Length : 1\r\n\r\n", ParseError::Header("Content-Length : 1".into())),
            (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", ParseError::ContentLength("-1".into())),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                ParseError::ContentLength("2".into()),
            ),
            (b"HTTP/1.1 200 OK\r\n\r\n", ParseError::NoContentLength(200)),
            (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", ParseError::TransferEncoding("chunked".into())),
        ];
        for (bytes, want) in cases {
            assert_eq!(parse_head(bytes), Err(want), "{}", String::from_utf8_lossy(bytes));
        }
        assert_eq!(parse_head(b"HTTP/1.1 100 Continue\r\n\r\n"), Err(ParseError::Interim(100)));
        assert_eq!(parse_head(&vec![b'a'; MAX_HEAD + 1]), Err(ParseError::HeadTooLarge));
        let huge = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", MAX_BODY + 1);
        assert_eq!(parse_head(huge.as_bytes()), Err(ParseError::BodyTooLarge(MAX_BODY + 1)));
        // 204 and 304 have no body, with or without a length.
        assert_eq!(parse_head(b"HTTP/1.1 204 No Content\r\n\r\n").unwrap().unwrap().body_len, 0);
    }

    #[test]
    fn loads_a_local_server_and_counts_errors() {
        // A tiny keep-alive server on loopback: 200 to the first request of each connection,
        // 500 to the second, then close (announced).
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { return };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    let mut got = Vec::new();
                    for answer in [
                        &b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"[..],
                        b"HTTP/1.1 500 Oops\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
                    ] {
                        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                            match s.read(&mut buf) {
                                Ok(0) | Err(_) => return,
                                Ok(n) => got.extend_from_slice(&buf[..n]),
                            }
                        }
                        let end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                        got.drain(..end);
                        if s.write_all(answer).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        let load = run(addr, 4, Duration::from_millis(300)).expect("a measurement");
        assert!(load.responses >= 8, "{} responses", load.responses);
        // Every second response is a 500, and each such connection is opened again.
        let errors = load.errors as f64;
        assert!((errors - load.responses as f64 / 2.0).abs() <= 4.0, "{} errors of {}", load.errors, load.responses);
        assert_eq!(load.latency.len(), load.responses);
        assert!(load.per_sec() > 0.0);
    }

    #[test]
    fn a_bad_response_stops_the_run_saying_why() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            use std::io::{Read, Write};
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { return };
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf);
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n");
            }
        });
        let e = run(addr, 2, Duration::from_secs(5)).err().expect("a failure");
        assert!(e.contains("bad HTTP response") && e.contains("Transfer-Encoding `chunked`"), "{e}");
    }

    #[test]
    fn a_silent_server_is_no_figure() {
        // A listener that never accepts: the kernel completes the handshakes, nothing answers.
        // (Kept bound for the whole test, so no other test's server can take its port.)
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let e = run(listener.local_addr().unwrap(), 2, Duration::from_millis(100)).err().expect("a failure");
        assert!(e.contains("got no response"), "{e}");
        drop(listener);
    }
}
