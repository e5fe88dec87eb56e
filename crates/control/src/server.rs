//! The server side: one endpoint per stack.
//!
//! [`Server::bind`] binds `<run dir>/<pid>.<shard>.sock` (mode 0600 in a 0755 directory;
//! a socket left by a killed process is recognised, because connecting to it is refused,
//! and replaced) and starts an accept thread. The thread reads one request line per client
//! (at most 4 KiB, within 1 s), parses it, and hands it to the stack's thread over a
//! channel, raising a flag. The stack's loop calls [`Server::poll`] once per batch: while
//! nobody is attached that is one relaxed load of the flag and a check that the list of
//! live captures is empty, nothing else.
//!
//! Answers are written from the stack's thread: a snapshot is a few hundred bytes per
//! connection, written with a short timeout so that a client that does not read cannot hold
//! the stack up for long. A capture's socket is made non-blocking and handed to the live
//! capture, which never blocks (it counts what the reader could not take).

use std::collections::HashSet;
use std::io::{self, Read, Write};
use std::net::IpAddr;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use bypass_device::Device;
use bypass_stack::Stack;

use crate::client::{run_dir, socket_path};
use crate::snapshot;

/// The longest request line taken.
pub const MAX_REQUEST: usize = 4096;
/// How long a client has to send its request line.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// How long the stack waits for a client to take a one-document answer before giving up
/// on it: the stack's loop stops meanwhile, so this is short.
const ANSWER_TIMEOUT: Duration = Duration::from_millis(100);

/// The endpoint paths this process has bound and not yet removed: a second pool of shards in
/// the same process takes the next free index, and [`remove_all`] finds them on exit.
static BOUND: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

/// A request, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// `{"cmd":"ss"}`: the connections and listeners.
    Ss,
    /// `{"cmd":"stat"}`: the counters.
    Stat,
    /// `{"cmd":"capture","port":N,"host":"ADDR"}`: a live pcapng stream of the frames
    /// matching the filter (either may be left out).
    Capture {
        /// Only frames to or from this TCP/UDP port.
        port: Option<u16>,
        /// Only frames to or from this address.
        host: Option<IpAddr>,
    },
}

/// Parse one request line (without its `'\n'`): a JSON object with a `cmd`. Return the
/// sentence to answer with when it is not a request we take.
pub fn parse_request(line: &[u8]) -> Result<Request, String> {
    let value: serde_json::Value = serde_json::from_slice(line)
        .map_err(|e| format!("the request is not JSON ({e}); send one line such as {{\"cmd\":\"ss\"}}"))?;
    let Some(obj) = value.as_object() else {
        return Err("the request must be a JSON object such as {\"cmd\":\"ss\"}".into());
    };
    let cmd = obj
        .get("cmd")
        .and_then(|c| c.as_str())
        .ok_or("the request has no \"cmd\": send {\"cmd\":\"ss\"}, {\"cmd\":\"stat\"} or {\"cmd\":\"capture\"}")?;
    let allowed: &[&str] = match cmd {
        "ss" | "stat" => &["cmd"],
        "capture" => &["cmd", "port", "host"],
        other => return Err(format!("unknown command {other:?}: use \"ss\", \"stat\" or \"capture\"")),
    };
    if let Some(key) = obj.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!("{cmd:?} takes no field {key:?}"));
    }
    Ok(match cmd {
        "ss" => Request::Ss,
        "stat" => Request::Stat,
        _ => {
            let port = match obj.get("port") {
                None | Some(serde_json::Value::Null) => None,
                Some(p) => Some(
                    p.as_u64()
                        .and_then(|p| u16::try_from(p).ok())
                        .ok_or_else(|| format!("\"port\" must be a number from 0 to 65535, not {p}"))?,
                ),
            };
            let host = match obj.get("host") {
                None | Some(serde_json::Value::Null) => None,
                Some(h) => Some(
                    h.as_str()
                        .and_then(|h| h.parse::<IpAddr>().ok())
                        .ok_or_else(|| format!("\"host\" must be an IPv4 or IPv6 address as a string, not {h}"))?,
                ),
            };
            Request::Capture { port, host }
        }
    })
}

/// Read one request line from `stream`: up to `'\n'`, end of stream, or [`MAX_REQUEST`]
/// bytes, whichever comes first.
fn read_line(stream: &mut UnixStream) -> Result<Vec<u8>, String> {
    let mut line = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        let n = match stream.read(&mut buf) {
            Ok(n) => n,
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err("no request line within 1 s: send one JSON object and a newline".into());
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("reading the request failed: {e}")),
        };
        if n == 0 {
            return if line.is_empty() { Err(String::new()) } else { Ok(line) };
        }
        if let Some(end) = buf[..n].iter().position(|&b| b == b'\n') {
            line.extend_from_slice(&buf[..end]);
            return Ok(line);
        }
        line.extend_from_slice(&buf[..n]);
        if line.len() > MAX_REQUEST {
            return Err(format!("the request line is longer than {MAX_REQUEST} bytes"));
        }
    }
}

/// A request waiting for the stack's thread.
struct Pending {
    request: Result<Request, String>,
    stream: UnixStream,
}

/// Why binding the endpoint failed.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// Creating the run directory failed.
    #[error(
        "create the control directory {dir} (run as root, or set BYPASS_RUN_DIR to a directory you may write): {source}"
    )]
    Directory {
        /// The directory.
        dir: PathBuf,
        /// The failure.
        #[source]
        source: io::Error,
    },
    /// Binding the socket failed.
    #[error("bind the control endpoint {path}: {source}")]
    Bind {
        /// The socket's path.
        path: PathBuf,
        /// The failure.
        #[source]
        source: io::Error,
    },
}

/// A live capture the endpoint attached, shared with the stack's tee so the endpoint can see
/// when its reader went away.
struct Live {
    id: bypass_stack::CaptureId,
    capture: Arc<Mutex<bypass_device::live::LiveCapture>>,
}

/// The endpoint of one stack. See the module docs.
pub struct Server {
    path: PathBuf,
    shard: u32,
    pending: Arc<AtomicBool>,
    requests: Receiver<Pending>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    live: Vec<Live>,
}

impl Server {
    /// Bind the endpoint of `stack`, this process's stack number `shard` (see
    /// [`bind`](Server::bind)); a request wakes the stack if it sleeps in its device's
    /// `wait` (through the device's [`Waker`](bypass_device::Waker), where it has one).
    pub fn for_stack<D: Device>(stack: &mut Stack<D>, shard: u32) -> Result<Server, BindError> {
        let waker = stack.device_mut().waker();
        Server::bind_with(&run_dir(), shard, waker)
    }

    /// Bind this process's endpoint for its stack number `shard` (the next free number from
    /// `shard` up, when another stack of this process holds it) in [`run_dir`].
    pub fn bind(shard: u32) -> Result<Server, BindError> {
        Server::bind_in(&run_dir(), shard)
    }

    /// [`Server::bind`] in `dir`.
    pub fn bind_in(dir: &Path, shard: u32) -> Result<Server, BindError> {
        Server::bind_with(dir, shard, None)
    }

    /// [`Server::bind`] in `dir`, waking the stack with `waker` when a request comes.
    pub fn bind_with(dir: &Path, shard: u32, waker: Option<bypass_device::Waker>) -> Result<Server, BindError> {
        if !dir.exists() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(dir)
                .map_err(|e| BindError::Directory { dir: dir.to_path_buf(), source: e })?;
        }
        // Endpoints left by processes that are gone (killed, or a program under `bypass run`
        // that died of a signal, which runs no destructor) go whenever a stack starts, as
        // they go whenever a client lists the stacks.
        let _ = crate::client::endpoints_in(dir, None);
        let pid = std::process::id();
        let (shard, path) = {
            let mut bound = BOUND.lock().unwrap_or_else(PoisonError::into_inner);
            let bound = bound.get_or_insert_with(HashSet::new);
            let mut shard = shard;
            while bound.contains(&socket_path(dir, pid, shard)) {
                shard += 1;
            }
            let path = socket_path(dir, pid, shard);
            bound.insert(path.clone());
            (shard, path)
        };
        let listener = match bind_replacing_stale(&path) {
            Ok(listener) => listener,
            Err(e) => {
                forget(&path);
                return Err(BindError::Bind { path, source: e });
            }
        };
        // Owner only (root can always connect): the snapshot shows every connection.
        if let Err(e) = std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)) {
            log::warn!("control endpoint {}: chmod 0600 failed: {e}", path.display());
        }
        let pending = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, requests) = mpsc::channel();
        let thread = {
            let (pending, stop) = (pending.clone(), stop.clone());
            std::thread::Builder::new()
                .name(format!("bypass-control-{shard}"))
                .spawn(move || accept_loop(listener, tx, pending, stop, waker))
                .map_err(|e| {
                    forget(&path);
                    let _ = std::fs::remove_file(&path);
                    BindError::Bind { path: path.clone(), source: e }
                })?
        };
        log::debug!("control endpoint at {}", path.display());
        Ok(Server { path, shard, pending, requests, stop, thread: Some(thread), live: Vec::new() })
    }

    /// Return the socket's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Return the stack number this endpoint has in its process.
    pub fn shard(&self) -> u32 {
        self.shard
    }

    /// Answer the requests waiting, from `stack`, and look after the live captures: call once
    /// per batch of the stack's loop. Costs one relaxed load (and an empty-list check) while
    /// nobody is attached.
    #[inline]
    pub fn poll<D: Device>(&mut self, stack: &mut Stack<D>) {
        if !self.live.is_empty() {
            self.tend_captures(stack);
        }
        if self.pending.load(Ordering::Relaxed) {
            self.answer_all(stack);
        }
    }

    #[cold]
    fn answer_all<D: Device>(&mut self, stack: &mut Stack<D>) {
        self.pending.store(false, Ordering::Relaxed);
        while let Ok(p) = self.requests.try_recv() {
            self.answer(stack, p);
        }
    }

    fn answer<D: Device>(&mut self, stack: &mut Stack<D>, p: Pending) {
        let Pending { request, mut stream } = p;
        let doc = match request {
            Ok(Request::Ss) => serde_json::to_vec(&snapshot::snapshot(stack, self.shard)),
            Ok(Request::Stat) => serde_json::to_vec(&snapshot::stat(stack)),
            Ok(Request::Capture { port, host }) => {
                self.attach(stack, stream, port, host);
                return;
            }
            Err(sentence) => serde_json::to_vec(&serde_json::json!({ "error": sentence })),
        };
        match doc {
            Ok(mut doc) => {
                doc.push(b'\n');
                send_answer(&mut stream, &doc);
            }
            Err(e) => log::warn!("control endpoint: encoding an answer failed: {e}"),
        }
    }

    /// Attach a live capture writing to `stream`.
    fn attach<D: Device>(
        &mut self,
        stack: &mut Stack<D>,
        mut stream: UnixStream,
        port: Option<u16>,
        host: Option<IpAddr>,
    ) {
        use bypass_device::live::{CaptureFilter, LiveCapture};
        let filter = CaptureFilter { port, host };
        let iface = stack.device().info().name.clone();
        let description = format!("bypass pid {} shard {} on {iface}", std::process::id(), self.shard);
        let made = stream.set_nonblocking(true).and_then(|()| {
            let out = stream.try_clone()?;
            LiveCapture::new(out, filter, &iface, &description, stack.epoch())
        });
        match made {
            Ok(capture) => {
                let capture = Arc::new(Mutex::new(capture));
                let id = stack.add_capture(Box::new(Shared(capture.clone())));
                log::debug!("control endpoint {}: live capture attached", self.path.display());
                self.live.push(Live { id, capture });
            }
            Err(e) => {
                let _ = stream.set_nonblocking(false);
                let doc = serde_json::json!({ "error": format!("could not start the capture: {e}") });
                send_answer(&mut stream, format!("{doc}\n").as_bytes());
            }
        }
    }

    /// Push the live captures' frames out, and detach those whose reader went away.
    #[cold]
    fn tend_captures<D: Device>(&mut self, stack: &mut Stack<D>) {
        let mut i = 0;
        while i < self.live.len() {
            let closed = self.live[i].capture.lock().unwrap_or_else(PoisonError::into_inner).closed();
            if closed {
                let live = self.live.swap_remove(i);
                stack.remove_capture(live.id);
                let dropped = live.capture.lock().unwrap_or_else(PoisonError::into_inner).dropped();
                log::debug!(
                    "control endpoint {}: capture reader left ({dropped} frames not taken)",
                    self.path.display()
                );
            } else {
                i += 1;
            }
        }
    }

    /// Return how many live captures this endpoint has attached.
    pub fn live_captures(&self) -> usize {
        self.live.len()
    }
}

/// A live capture behind a lock, so the endpoint keeps a handle on it while the stack's tee
/// owns the other (the lock is never contended: both are used from the stack's thread).
struct Shared(Arc<Mutex<bypass_device::live::LiveCapture>>);

impl bypass_device::Capture for Shared {
    fn frame(&mut self, now: bypass_device::Instant, dir: bypass_device::Direction, frame: &[u8], note: &str) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).frame(now, dir, frame, note);
    }

    fn flush(&mut self) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).flush();
    }

    fn batch(&mut self) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).batch();
    }
}

/// Write a one-document answer and close; a client that does not take it within
/// [`ANSWER_TIMEOUT`] loses it.
fn send_answer(stream: &mut UnixStream, doc: &[u8]) {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_write_timeout(Some(ANSWER_TIMEOUT));
    if let Err(e) = stream.write_all(doc) {
        log::debug!("control endpoint: the client did not take its answer: {e}");
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

impl Drop for Server {
    /// Stop the accept thread and remove the socket.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept thread with a connection of our own. If the socket is gone already
        // (`remove_all`, or someone removed it by hand), the thread cannot be woken: leave it
        // blocked in accept, it holds nothing but the listening socket.
        let woken = UnixStream::connect(&self.path).is_ok();
        if let Some(thread) = self.thread.take()
            && woken
        {
            let _ = thread.join();
        }
        let _ = std::fs::remove_file(&self.path);
        forget(&self.path);
    }
}

/// Remove every endpoint this process still has bound: for exit paths that do not run
/// destructors (`std::process::exit` from a signal handler). The accept threads go with the
/// process.
pub fn remove_all() {
    let bound = BOUND.lock().unwrap_or_else(PoisonError::into_inner).take();
    for path in bound.into_iter().flatten() {
        let _ = std::fs::remove_file(&path);
    }
}

fn forget(path: &Path) {
    if let Some(bound) = BOUND.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
        bound.remove(path);
    }
}

/// Bind `path`; if it is taken, replace it when nobody answers on it (a stale socket left by
/// a killed process). A live one is an error: another stack answers there.
pub fn bind_replacing_stale(path: &Path) -> io::Result<UnixListener> {
    match UnixListener::bind(path) {
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => match UnixStream::connect(path) {
            Err(c) if c.kind() == io::ErrorKind::ConnectionRefused => {
                log::debug!("replacing the stale control endpoint {}", path.display());
                std::fs::remove_file(path)?;
                UnixListener::bind(path)
            }
            Ok(_) => Err(io::Error::new(io::ErrorKind::AddrInUse, "another running stack answers on this endpoint")),
            Err(_) => Err(e),
        },
        r => r,
    }
}

fn accept_loop(
    listener: UnixListener,
    tx: Sender<Pending>,
    pending: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    waker: Option<bypass_device::Waker>,
) {
    for stream in listener.incoming() {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let mut stream = match stream {
            Ok(s) => s,
            Err(e) => {
                log::debug!("control endpoint: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        if stream.set_read_timeout(Some(REQUEST_TIMEOUT)).is_err() {
            continue;
        }
        let request = match read_line(&mut stream) {
            Ok(line) => parse_request(&line),
            // The client connected and left without a word (a liveness probe).
            Err(sentence) if sentence.is_empty() => continue,
            Err(sentence) => Err(sentence),
        };
        if tx.send(Pending { request, stream }).is_err() {
            return;
        }
        pending.store(true, Ordering::Release);
        if let Some(waker) = &waker {
            waker.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_parse() {
        assert_eq!(parse_request(br#"{"cmd":"ss"}"#), Ok(Request::Ss));
        assert_eq!(parse_request(br#" {"cmd" : "stat"} "#), Ok(Request::Stat));
        assert_eq!(parse_request(br#"{"cmd":"capture"}"#), Ok(Request::Capture { port: None, host: None }));
        assert_eq!(
            parse_request(br#"{"cmd":"capture","port":7,"host":"10.0.0.1"}"#),
            Ok(Request::Capture { port: Some(7), host: Some("10.0.0.1".parse().unwrap()) })
        );
        assert_eq!(
            parse_request(br#"{"cmd":"capture","host":"fd00::2","port":null}"#),
            Ok(Request::Capture { port: None, host: Some("fd00::2".parse().unwrap()) })
        );
    }

    #[test]
    fn bad_requests_get_a_sentence() {
        for (line, says) in [
            (&b"ss"[..], "not JSON"),
            (b"", "not JSON"),
            (b"[1,2]", "JSON object"),
            (b"{}", "no \"cmd\""),
            (br#"{"cmd":7}"#, "no \"cmd\""),
            (br#"{"cmd":"reboot"}"#, "unknown command"),
            (br#"{"cmd":"ss","port":7}"#, "takes no field"),
            (br#"{"cmd":"capture","port":70000}"#, "0 to 65535"),
            (br#"{"cmd":"capture","port":"7"}"#, "0 to 65535"),
            (br#"{"cmd":"capture","host":"example.org"}"#, "IPv4 or IPv6"),
            (b"\xff\xfe", "not JSON"),
        ] {
            let err = parse_request(line).unwrap_err();
            assert!(err.contains(says), "{:?}: {err}", String::from_utf8_lossy(line));
        }
    }

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("bypass-control-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn a_starting_stack_removes_the_endpoints_of_processes_that_are_gone() {
        let dir = temp_dir("sweep");
        std::fs::create_dir_all(&dir).unwrap();
        // No process can have this pid (Linux's pid_max is at most 2^22).
        let dead = dir.join("4294967.0.sock");
        drop(std::os::unix::net::UnixListener::bind(&dead).expect("bind the dead process's socket"));
        assert!(dead.exists());
        let server = Server::bind_in(&dir, 0).expect("bind");
        assert!(!dead.exists(), "the dead process's endpoint is gone");
        drop(server);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn stale_socket_is_replaced_and_live_one_kept() {
        let dir = temp_dir("stale");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("1.0.sock");
        // A socket whose listener is gone, as SIGKILL leaves one.
        drop(UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        assert_eq!(UnixStream::connect(&path).unwrap_err().kind(), io::ErrorKind::ConnectionRefused);
        let live = bind_replacing_stale(&path).expect("stale socket replaced");
        // Now somebody answers there: binding again must not steal it.
        let err = bind_replacing_stale(&path).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AddrInUse);
        assert!(UnixStream::connect(&path).is_ok(), "the live endpoint still answers");
        drop(live);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn endpoint_lifecycle_and_request_reading() {
        let dir = temp_dir("life");
        let a = Server::bind_in(&dir, 0).unwrap();
        let b = Server::bind_in(&dir, 0).unwrap();
        assert_eq!((a.shard(), b.shard()), (0, 1), "a second stack in the process takes the next number");
        let mode = std::fs::metadata(a.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let found = crate::client::endpoints_in(&dir, Some(std::process::id())).unwrap();
        assert_eq!(found.len(), 2);
        // A request line reaches the stack's side, parsed, and raises the flag.
        let mut c = UnixStream::connect(a.path()).unwrap();
        c.write_all(b"{\"cmd\":\"stat\"}\n").unwrap();
        let p = a.requests.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(p.request, Ok(Request::Stat));
        // The flag goes up just after the hand-over.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !a.pending.load(Ordering::Acquire) {
            assert!(std::time::Instant::now() < deadline, "the flag is raised");
            std::thread::sleep(Duration::from_millis(1));
        }
        // One that never ends its line gets a sentence after the timeout.
        let mut c = UnixStream::connect(a.path()).unwrap();
        c.write_all(b"{\"cmd\"").unwrap();
        let p = a.requests.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(p.request.unwrap_err().contains("within 1 s"));
        // Too long a line.
        let mut c = UnixStream::connect(a.path()).unwrap();
        let _ = c.write_all(&vec![b' '; MAX_REQUEST + 600]);
        let p = a.requests.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(p.request.unwrap_err().contains("longer than"));
        let (pa, pb) = (a.path().to_path_buf(), b.path().to_path_buf());
        drop(a);
        assert!(!pa.exists(), "the endpoint is removed when dropped");
        assert!(pb.exists());
        remove_all();
        assert!(!pb.exists(), "remove_all removes what is left");
        drop(b);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
