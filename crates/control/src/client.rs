//! The client side: find the running stacks' endpoints and send them requests.
//!
//! [`endpoints`] lists the sockets in the run directory, removes those whose process is gone
//! (a stack killed with SIGKILL cannot remove its own), and says in one sentence what to do
//! when there is nothing to talk to. [`Endpoint::request`] sends one request line and returns
//! the connected socket to read the answer from; [`Endpoint::query`] reads a one-document
//! answer and turns an `{"error": ...}` reply into [`ClientError::Refused`].

use std::io::{self, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The environment variable that moves the run directory away from `/run/bypass` (tests use
/// a temporary directory so they stay apart from each other and from real stacks).
pub const RUN_DIR_ENV: &str = "BYPASS_RUN_DIR";

/// The default run directory.
pub const DEFAULT_RUN_DIR: &str = "/run/bypass";

/// How long [`Endpoint::query`] waits for an answer: a stack answers between two batches, so
/// anything longer means its loop is stuck.
const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// Return the directory the endpoints live in: `$BYPASS_RUN_DIR`, or `/run/bypass`.
pub fn run_dir() -> PathBuf {
    match std::env::var_os(RUN_DIR_ENV) {
        Some(dir) if !dir.is_empty() => PathBuf::from(dir),
        _ => PathBuf::from(DEFAULT_RUN_DIR),
    }
}

/// Return the path of the endpoint of `pid`'s stack number `shard` in `dir`.
pub fn socket_path(dir: &Path, pid: u32, shard: u32) -> PathBuf {
    dir.join(format!("{pid}.{shard}.sock"))
}

/// Parse an endpoint's file name, `<pid>.<shard>.sock`.
pub(crate) fn parse_name(name: &str) -> Option<(u32, u32)> {
    let rest = name.strip_suffix(".sock")?;
    let (pid, shard) = rest.split_once('.')?;
    Some((pid.parse().ok()?, shard.parse().ok()?))
}

/// Return whether process `pid` exists (`/proc/<pid>`).
pub(crate) fn process_alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Why talking to a running stack failed. Each message is one sentence that says what to do.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No endpoint in the run directory.
    #[error(
        "no running bypass stack in {dir}: start one with `bypass echo`, `bypass run` or a program on bypass-runtime (or set BYPASS_RUN_DIR to where it runs)"
    )]
    NoStack {
        /// The run directory searched.
        dir: PathBuf,
    },
    /// The pid asked for has no endpoint.
    #[error(
        "process {pid} is not a running bypass stack (no endpoint in {dir}): run `bypass ss` without a pid to list the running stacks"
    )]
    NotAStack {
        /// The pid asked for.
        pid: u32,
        /// The run directory searched.
        dir: PathBuf,
    },
    /// The endpoint exists but its process no longer answers (it was killed and left it behind).
    #[error("the endpoint {path} was left by a stack that is no longer running (removed it): start the stack again")]
    Stale {
        /// The endpoint's path.
        path: PathBuf,
    },
    /// Connecting was refused for lack of permission.
    #[error("no permission to connect to {path}: run as root or as the user the stack runs as")]
    Permission {
        /// The endpoint's path.
        path: PathBuf,
    },
    /// The stack answered `{"error": ...}`.
    #[error("the stack refused the request: {0}")]
    Refused(String),
    /// The stack did not answer in time.
    #[error(
        "stack {pid} shard {shard} did not answer within 5 s: its loop may be stuck (or the machine overloaded); try again"
    )]
    NoAnswer {
        /// The stack's process.
        pid: u32,
        /// Its shard.
        shard: u32,
    },
    /// The stack's answer was not the JSON document expected.
    #[error(
        "the stack at {path} sent an answer that is not a JSON document ({detail}): check that `bypass` and the stack are the same version"
    )]
    BadReply {
        /// The endpoint's path.
        path: PathBuf,
        /// What was wrong with it.
        detail: String,
    },
    /// Another I/O failure, with what was being attempted.
    #[error("{what}: {source}")]
    Io {
        /// What was being attempted.
        what: String,
        /// The failure.
        #[source]
        source: io::Error,
    },
}

/// One running stack's endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The process the stack runs in.
    pub pid: u32,
    /// Which stack of that process (a runtime's shard index; 0 for a single stack).
    pub shard: u32,
    /// The socket's path.
    pub path: PathBuf,
}

/// List the running stacks' endpoints in [`run_dir`], sorted by pid and shard; with `pid`,
/// only that process's. Endpoints whose process is gone are removed on the way (when we may).
///
/// Errors: [`ClientError::NoStack`] when there are none, [`ClientError::NotAStack`] when
/// `pid` has none.
pub fn endpoints(pid: Option<u32>) -> Result<Vec<Endpoint>, ClientError> {
    endpoints_in(&run_dir(), pid)
}

/// [`endpoints`] in `dir`.
pub fn endpoints_in(dir: &Path, pid: Option<u32>) -> Result<Vec<Endpoint>, ClientError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(none(dir, pid)),
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            return Err(ClientError::Permission { path: dir.to_path_buf() });
        }
        Err(e) => return Err(ClientError::Io { what: format!("list {}", dir.display()), source: e }),
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some((p, shard)) = name.to_str().and_then(parse_name) else { continue };
        if pid.is_some_and(|want| want != p) {
            continue;
        }
        let path = entry.path();
        if !process_alive(p) {
            // SIGKILL left it behind: clean up for the next reader (the next stack with this
            // pid would replace it anyway, see `Server::bind`).
            match std::fs::remove_file(&path) {
                Ok(()) => log::debug!("removed the stale endpoint {}", path.display()),
                Err(e) => log::debug!("stale endpoint {} left in place: {e}", path.display()),
            }
            continue;
        }
        found.push(Endpoint { pid: p, shard, path });
    }
    if found.is_empty() {
        return Err(none(dir, pid));
    }
    found.sort_by_key(|e| (e.pid, e.shard));
    Ok(found)
}

fn none(dir: &Path, pid: Option<u32>) -> ClientError {
    match pid {
        Some(pid) => ClientError::NotAStack { pid, dir: dir.to_path_buf() },
        None => ClientError::NoStack { dir: dir.to_path_buf() },
    }
}

impl Endpoint {
    /// Connect, send `req` as one line, and return the socket to read the answer from (the
    /// stack closes it after a one-document answer; a capture streams until we close it).
    pub fn request(&self, req: &serde_json::Value) -> Result<UnixStream, ClientError> {
        let mut stream = match UnixStream::connect(&self.path) {
            Ok(stream) => stream,
            Err(e) => return Err(self.connect_error(e)),
        };
        let mut line = serde_json::to_vec(req)
            .map_err(|e| ClientError::Io { what: "encode the request".into(), source: io::Error::other(e) })?;
        line.push(b'\n');
        stream
            .write_all(&line)
            .map_err(|e| ClientError::Io { what: format!("send the request to {}", self.path.display()), source: e })?;
        Ok(stream)
    }

    /// Send `req` and return the one JSON document answered; an `{"error": ...}` answer is
    /// [`ClientError::Refused`].
    pub fn query(&self, req: &serde_json::Value) -> Result<serde_json::Value, ClientError> {
        let stream = self.request(req)?;
        let io_err =
            |e: io::Error| ClientError::Io { what: format!("read the answer from {}", self.path.display()), source: e };
        stream.set_read_timeout(Some(QUERY_TIMEOUT)).map_err(io_err)?;
        let mut text = Vec::new();
        match BufReader::new(stream).read_to_end(&mut text) {
            Ok(_) => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                return Err(ClientError::NoAnswer { pid: self.pid, shard: self.shard });
            }
            Err(e) => return Err(io_err(e)),
        }
        let value: serde_json::Value = serde_json::from_slice(&text)
            .map_err(|e| ClientError::BadReply { path: self.path.clone(), detail: e.to_string() })?;
        if let Some(error) = value.get("error") {
            return Err(ClientError::Refused(error.as_str().unwrap_or("unknown error").to_string()));
        }
        Ok(value)
    }

    fn connect_error(&self, e: io::Error) -> ClientError {
        match e.kind() {
            io::ErrorKind::PermissionDenied => ClientError::Permission { path: self.path.clone() },
            io::ErrorKind::ConnectionRefused => {
                // Nobody listens: the process that bound it is gone (or the pid was reused).
                if let Err(e) = std::fs::remove_file(&self.path) {
                    log::debug!("stale endpoint {} left in place: {e}", self.path.display());
                }
                ClientError::Stale { path: self.path.clone() }
            }
            io::ErrorKind::NotFound => ClientError::NotAStack {
                pid: self.pid,
                dir: self.path.parent().map(Path::to_path_buf).unwrap_or_default(),
            },
            _ => ClientError::Io { what: format!("connect to {}", self.path.display()), source: e },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_and_reject() {
        assert_eq!(parse_name("1234.0.sock"), Some((1234, 0)));
        assert_eq!(parse_name("1.17.sock"), Some((1, 17)));
        assert_eq!(parse_name("1234.sock"), None);
        assert_eq!(parse_name("x.0.sock"), None);
        assert_eq!(parse_name("1234.0.sock.tmp"), None);
        assert_eq!(socket_path(Path::new("/d"), 7, 2), PathBuf::from("/d/7.2.sock"));
    }

    #[test]
    fn empty_or_missing_directory_says_what_to_do() {
        let dir = std::env::temp_dir().join(format!("bypass-control-none-{}", std::process::id()));
        let err = endpoints_in(&dir, None).unwrap_err();
        assert!(matches!(err, ClientError::NoStack { .. }), "{err}");
        assert!(err.to_string().contains("bypass echo"), "{err}");
        std::fs::create_dir_all(&dir).unwrap();
        let err = endpoints_in(&dir, Some(99)).unwrap_err();
        assert!(matches!(err, ClientError::NotAStack { pid: 99, .. }), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn endpoint_of_a_dead_process_is_removed() {
        let dir = std::env::temp_dir().join(format!("bypass-control-dead-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        // A pid above the kernel's limit (pid_max is at most 2^22) is never alive.
        let dead = socket_path(&dir, 4_000_000_000, 0);
        std::fs::write(&dead, b"").unwrap();
        let ours = socket_path(&dir, std::process::id(), 3);
        std::fs::write(&ours, b"").unwrap();
        let found = endpoints_in(&dir, None).unwrap();
        assert_eq!(found, vec![Endpoint { pid: std::process::id(), shard: 3, path: ours.clone() }]);
        assert!(!dead.exists(), "the dead process's endpoint is removed");
        // Ours is a plain file, not a socket: connecting is refused, so it is stale.
        let err = found[0].request(&serde_json::json!({"cmd": "ss"})).unwrap_err();
        assert!(matches!(err, ClientError::Stale { .. }), "{err}");
        assert!(!ours.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
