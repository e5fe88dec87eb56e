//! HTTP clients nobody here wrote against `examples/http_server`: curl, ApacheBench (`ab`,
//! Debian's apache2-utils) and wrk run in the kernel peer's namespace against the server in
//! the bypass namespace, on our stack over AF_XDP (and over AF_PACKET, and on the kernel's
//! sockets for comparison). Bodies of `/bytes/N` are checked byte for byte against the
//! pattern the server documents (byte i is `i % 251`) as they stream in, never stored.
//!
//! Every test stops the server with SIGTERM and expects exit status 0, no panic and the XDP
//! program detached from `bx0`; one stops it in the middle of a transfer and then checks the
//! lab's namespaces are gone once the lab is dropped.
//!
//! Needs root, and `curl`, `ab` and `wrk` on `PATH` (`.ci/run` installs them): without them
//! each test says why it skips, except under `CI=true`, where it fails. Tests hold their lab
//! with the test binary's lock (`common::create_lab`), so they run one at a time.
//!
//! The server is the example's binary, `<target>/<profile>/examples/http_server`, found next
//! to this test's own binary (`<target>/<profile>/deps/`). A plain `cargo test` builds it, but
//! a run that selects targets (`cargo test --test http_clients`) does not, so the test first
//! runs `cargo build --example http_server` with the cargo that runs it, into the same target
//! directory and profile (a no-op of a fraction of a second when the binary is fresh).

mod common;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bypass_lab::testlab::{Lab, lab_available};
use common::TestLab;

/// The port the server listens on.
const PORT: u16 = 8080;
/// The kernel server's address on bx0 (as the demo's: the stack owns the lab's 10.77.0.2).
const KERNEL_IP: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 3);
/// The pattern's period: byte i of `/bytes/N` is `i % PERIOD` (examples/http_server/serve.rs).
const PERIOD: u64 = 251;

// ---------------------------------------------------------------------------------------------
// curl
// ---------------------------------------------------------------------------------------------

/// curl fetches `/` and 64 MiB byte-exact, and reuses one connection for two URLs (HTTP/1.1,
/// and HTTP/1.0 with `Connection: keep-alive`).
#[test]
fn curl_xdp() {
    let Some(lab) = setup("curl_xdp", &[CURL]) else { return };
    let server = Server::start(&lab, Backend::Xdp);
    let base = format!("http://{}:{PORT}", lab.bypass_ip);

    let (code, body) = curl_text(&lab, &format!("{base}/"));
    assert_eq!(code, 200, "GET /: {body}");
    assert!(body.contains("bypass-http-example"), "GET / returned {body:?}");

    let start = Instant::now();
    curl_pattern(&lab, &format!("{base}/bytes/67108864"), 64 << 20);
    eprintln!("curl: 64 MiB over AF_XDP, byte-exact, in {:?}", start.elapsed());

    for http10 in [false, true] {
        let mut cmd = lab.peer_cmd("curl");
        cmd.args(["-sS", "--max-time", "30", "-w", "%{http_code} %{num_connects}\\n"]);
        if http10 {
            cmd.args(["--http1.0", "-H", "Connection: keep-alive"]);
        }
        cmd.args(["-o", "/dev/null", &format!("{base}/"), "-o", "/dev/null", &format!("{base}/bytes/1000")]);
        let out = run(&mut cmd);
        // One connection for both: curl connects for the first URL and not for the second.
        assert_eq!(out, "200 1\n200 0\n", "curl (HTTP/1.{}) did not reuse its connection", u8::from(!http10));
    }
    server.stop();
}

/// curl fetches 1 MiB byte-exact from the server over AF_PACKET.
#[test]
fn curl_packet() {
    let Some(lab) = setup("curl_packet", &[CURL]) else { return };
    let server = Server::start(&lab, Backend::Packet);
    curl_pattern(&lab, &format!("http://{}:{PORT}/bytes/1048576", lab.bypass_ip), 1 << 20);
    server.stop();
}

// ---------------------------------------------------------------------------------------------
// ApacheBench and wrk
// ---------------------------------------------------------------------------------------------

/// `ab -k -c 100 -n 100000` (HTTP/1.0 with `Connection: Keep-Alive`) completes every request
/// with a 2xx status and keep-alive, against our stack over AF_XDP and then against the
/// kernel's sockets (the same server code, at 10.77.0.3 on bx0).
#[test]
fn ab_xdp_and_kernel() {
    let Some(lab) = setup("ab_both", &[AB]) else { return };
    let server = Server::start(&lab, Backend::Xdp);
    let ours = ab(&lab, lab.bypass_ip);
    server.stop();

    let cidr = format!("{KERNEL_IP}/{}", lab.prefix_len);
    lab.ip_bypass(&["addr", "add", &cidr, "dev", &lab.bypass_if]).expect("give bx0 the kernel server's address");
    // The same frames as our stack sends: MTU-sized, software checksums (as the demo does).
    lab.in_bypass(|| bypass_io::netdev::segmentation_offloads_off(&lab.bypass_if)).expect("bx0 offloads off");
    let server = Server::start(&lab, Backend::Kernel);
    let kernel = ab(&lab, KERNEL_IP);
    server.stop();
    eprintln!("ab -k -c 100 -n 100000: our stack over AF_XDP {ours:.0} req/s, kernel sockets {kernel:.0} req/s");
}

/// Run `ab -k -c 100 -n 100000` against `ip`, check its report and return its requests per second.
fn ab(lab: &Lab, ip: Ipv4Addr) -> f64 {
    let url = format!("http://{ip}:{PORT}/");
    let out = run(lab.peer_cmd("ab").args(["-k", "-q", "-c", "100", "-n", "100000", "-s", "20", &url]));
    let field = |name: &str| report_field(&out, name);
    assert_eq!(field("Complete requests:").as_deref(), Some("100000"), "ab against {url}:\n{out}");
    assert_eq!(field("Failed requests:").as_deref(), Some("0"), "ab against {url}:\n{out}");
    assert!(field("Non-2xx responses:").is_none_or(|n| n == "0"), "ab against {url}:\n{out}");
    assert_eq!(field("Keep-Alive requests:").as_deref(), Some("100000"), "ab against {url}:\n{out}");
    field("Requests per second:").and_then(|r| r.parse().ok()).unwrap_or_else(|| panic!("no rate from ab:\n{out}"))
}

/// `wrk -t2 -c100 -d5s` (HTTP/1.1, keep-alive) sees no socket error and no non-2xx response.
#[test]
fn wrk_xdp() {
    let Some(lab) = setup("wrk_xdp", &[WRK]) else { return };
    let server = Server::start(&lab, Backend::Xdp);
    let url = format!("http://{}:{PORT}/", lab.bypass_ip);
    let out = run(lab.peer_cmd("wrk").args(["-t2", "-c100", "-d5s", "--timeout", "5s", &url]));
    server.stop();
    let requests: u64 = out
        .lines()
        .find_map(|l| l.trim().split_once(" requests in ").and_then(|(n, _)| n.parse().ok()))
        .unwrap_or_else(|| panic!("no request count from wrk:\n{out}"));
    assert!(requests > 0, "wrk made no request:\n{out}");
    assert!(!out.contains("Socket errors"), "wrk saw socket errors:\n{out}");
    assert!(!out.contains("Non-2xx"), "wrk saw non-2xx responses:\n{out}");
    let rate = report_field(&out, "Requests/sec:").unwrap_or_default();
    eprintln!("wrk -t2 -c100 -d5s: {requests} requests, {rate} req/s, over AF_XDP");
}

// ---------------------------------------------------------------------------------------------
// HTTP details curl, ab and wrk do not try, with a socket of our own
// ---------------------------------------------------------------------------------------------

/// Pipelined requests are answered in order on one connection (404, 405 with `Allow`, and 400
/// for N over 1 GiB among them, none closing it); HEAD has headers only; `Connection: close`
/// and HTTP/1.0 close after the response (saying so), `Connection: keep-alive` keeps an
/// HTTP/1.0 connection; a malformed request (or an HTTP/1.1 one without Host) gets 400 and an
/// oversized header section 431, each closing the connection with a request behind it.
#[test]
fn protocol_details_xdp() {
    let Some(lab) = setup("proto_xdp", &[]) else { return };
    let server = Server::start(&lab, Backend::Xdp);
    let addr = SocketAddr::from((lab.bypass_ip, PORT));
    let exchange = |request: &[u8]| -> String {
        let mut stream = lab.in_peer(|| TcpStream::connect_timeout(&addr, Duration::from_secs(5))).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(5))).expect("read timeout");
        stream.write_all(request).expect("send the request");
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply).unwrap_or_else(|e| panic!("read to the server's close: {e}"));
        String::from_utf8_lossy(&reply).into_owned()
    };

    let reply = exchange(
        b"GET /bytes/3 HTTP/1.1\r\nHost: t\r\n\r\n\
          HEAD /bytes/5 HTTP/1.1\r\nHost: t\r\n\r\n\
          GET /nowhere HTTP/1.1\r\nHost: t\r\n\r\n\
          DELETE / HTTP/1.1\r\nHost: t\r\nContent-Length: 4\r\n\r\nabcd\
          GET /bytes/1073741825 HTTP/1.1\r\nHost: t\r\n\r\n\
          GET /bytes/2 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n\
          GET / HTTP/1.1\r\nHost: t\r\n\r\n",
    );
    let responses: Vec<&str> = reply.split("HTTP/1.1 ").skip(1).collect();
    let statuses: Vec<&str> = responses.iter().map(|r| &r[..3]).collect();
    assert_eq!(statuses, ["200", "200", "404", "405", "400", "200"], "{reply}");
    // hyper writes `Date` (RFC 9110 section 6.6.1) after the service's headers.
    assert!(
        responses[0].contains("\r\nContent-Length: 3\r\n") && responses[0].ends_with("\r\n\r\n\x00\x01\x02"),
        "{reply}"
    );
    assert!(
        responses[1].contains("\r\nContent-Length: 5\r\n") && responses[1].ends_with("\r\n\r\n"),
        "HEAD sent a body: {reply}"
    );
    assert!(responses[3].contains("Allow: GET, HEAD\r\n"), "{reply}");
    assert!(responses[5].contains("Connection: close\r\n") && responses[5].ends_with("\r\n\r\n\x00\x01"), "{reply}");
    assert!(reply.contains("Server: bypass-http-example\r\n"), "{reply}");

    // hyper answers an HTTP/1.0 request in HTTP/1.0.
    let reply = exchange(b"GET /bytes/1 HTTP/1.0\r\n\r\n");
    assert!(reply.starts_with("HTTP/1.0 200 OK\r\n") && reply.contains("Connection: close\r\n"), "{reply}");
    let reply = exchange(b"GET /bytes/1 HTTP/1.0\r\nConnection: keep-alive\r\n\r\nGET / HTTP/1.0\r\n\r\n");
    assert_eq!(reply.matches("HTTP/1.0 200 OK\r\n").count(), 2, "{reply}");
    assert!(reply.contains("Connection: keep-alive\r\n"), "{reply}");

    for (request, status) in [
        (b"NOT-HTTP\r\n\r\n".to_vec(), "400"),
        (b"GET / HTTP/1.1\r\n\r\n".to_vec(), "400"), // HTTP/1.1 without Host
        ([&b"GET / HTTP/1.1\r\nHost: t\r\nX-Big: "[..], &[b'a'; 9000], b"\r\n\r\n"].concat(), "431"),
    ] {
        // Closed after the error, even with another request behind it.
        let reply = exchange(&[&request[..], b"GET / HTTP/1.1\r\nHost: t\r\n\r\n"].concat());
        assert!(reply.starts_with(&format!("HTTP/1.1 {status} ")), "{reply}");
        // One response (hyper's own 400 and 431 have no `Server`, but all have a length).
        assert_eq!(reply.matches("\r\nContent-Length: ").count(), 1, "a response after the error: {reply}");
        assert!(reply.contains("Connection: close\r\n"), "{reply}");
    }
    server.stop();
}

// ---------------------------------------------------------------------------------------------
// Stopping
// ---------------------------------------------------------------------------------------------

/// SIGTERM in the middle of a 1 GiB download and with an idle keep-alive connection open: the
/// server exits 0 within seconds, XDP is detached, and dropping the lab leaves no namespace.
#[test]
fn sigterm_mid_transfer_xdp() {
    let Some(lab) = setup("sigterm_xdp", &[CURL]) else { return };
    let server = Server::start(&lab, Backend::Xdp);
    let addr = SocketAddr::from((lab.bypass_ip, PORT));
    let mut idle = lab.in_peer(|| TcpStream::connect_timeout(&addr, Duration::from_secs(5))).expect("connect");
    idle.write_all(b"GET / HTTP/1.1\r\nHost: t\r\n\r\n").expect("send a request");
    let mut first = [0u8; 17];
    idle.read_exact(&mut first).expect("the response's status line");
    assert_eq!(&first, b"HTTP/1.1 200 OK\r\n");

    let url = format!("http://{}:{PORT}/bytes/1073741824", lab.bypass_ip);
    let mut curl = lab
        .peer_cmd("curl")
        .args(["-sS", "--max-time", "60", "-o", "/dev/null", &url])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run curl");
    std::thread::sleep(Duration::from_millis(500));
    assert!(curl.try_wait().expect("curl's status").is_none(), "1 GiB came in 0.5 s: too fast to stop mid-transfer");
    let start = Instant::now();
    server.stop();
    eprintln!("stopped mid-transfer in {:?}", start.elapsed());
    let status = curl.wait().expect("reap curl");
    assert!(!status.success(), "curl finished 1 GiB although the server stopped");
    drop(idle);

    let namespaces = [lab.bypass_ns.clone(), lab.peer_ns.clone()];
    drop(lab);
    for ns in namespaces {
        assert!(!Path::new("/var/run/netns").join(&ns).exists(), "namespace {ns} is left after the lab");
    }
}

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

/// A client program the tests run, with the Debian package that has it.
type Tool = (&'static str, &'static str);
const CURL: Tool = ("curl", "curl");
const AB: Tool = ("ab", "apache2-utils");
const WRK: Tool = ("wrk", "wrk");

/// Return the lab for `test`, or `None` to skip it: without root (see `lab_available`) or
/// one of `tools`, which under `CI=true` fails instead.
fn setup(test: &str, tools: &[Tool]) -> Option<TestLab> {
    if !lab_available(test) {
        return None;
    }
    let missing: Vec<String> =
        tools.iter().filter(|(program, _)| !on_path(program)).map(|(p, pkg)| format!("{p} ({pkg})")).collect();
    if !missing.is_empty() {
        let why = format!("{test}: not installed: {} (apt-get install -y {})", missing.join(", "), packages(tools));
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{why} (CI=true: every client must run)");
        }
        let _ = writeln!(std::io::stderr(), "skipping {why}");
        return None;
    }
    common::init_log();
    server_binary(); // Before the lab, which holds the lock while it lives.
    Some(common::create_lab(test, 1))
}

fn packages(tools: &[Tool]) -> String {
    tools.iter().map(|(_, pkg)| *pkg).collect::<Vec<_>>().join(" ")
}

/// Return whether `program` is an executable file in a directory of `PATH`.
fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .any(|p| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0))
}

/// Run `cmd` to completion and return its standard output, failing the test if it fails.
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{cmd:?}: {}\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    stdout
}

/// Return the first word after `name` on the line of a report that starts with it (ab's
/// `Complete requests:      100000`, wrk's `Requests/sec:  52693.69`).
fn report_field(report: &str, name: &str) -> Option<String> {
    report.lines().find_map(|l| l.trim().strip_prefix(name)?.split_whitespace().next().map(str::to_string))
}

/// GET `url` with curl; return the status and the body.
fn curl_text(lab: &Lab, url: &str) -> (u32, String) {
    let out = lab
        .peer_cmd("curl")
        .args(["-sS", "--max-time", "30", "-o", "-", "-w", "%{stderr}%{http_code}", url])
        .output()
        .expect("run curl");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "curl {url}: {}: {stderr}", out.status);
    let code = stderr.trim().rsplit('\n').next().and_then(|c| c.trim().parse().ok());
    (code.unwrap_or_else(|| panic!("no status from curl: {stderr}")), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// GET `url` with curl, which writes the body to a pipe this test reads; check that it is
/// `len` bytes of the pattern, and what curl reports: status 200, `len` bytes downloaded.
fn curl_pattern(lab: &Lab, url: &str, len: u64) {
    let mut curl = lab
        .peer_cmd("curl")
        .args(["-sS", "--max-time", "60", "-o", "-"])
        .args(["-w", "%{stderr}code=%{http_code} size=%{size_download}\\n", url])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run curl");
    let mut stdout = curl.stdout.take().expect("piped stdout");
    let mut buf = vec![0u8; 1 << 18];
    let (mut offset, mut wrong) = (0u64, None);
    loop {
        let n = stdout.read(&mut buf).expect("read curl's output");
        if n == 0 {
            break;
        }
        if wrong.is_none()
            && let Some(i) =
                buf[..n].iter().enumerate().position(|(i, &b)| u64::from(b) != (offset + i as u64) % PERIOD)
        {
            wrong = Some((offset + i as u64, buf[i]));
        }
        offset += n as u64;
    }
    let mut report = String::new();
    curl.stderr.take().expect("piped stderr").read_to_string(&mut report).expect("read curl's report");
    let status = curl.wait().expect("reap curl");
    assert!(status.success(), "curl {url}: {status}: {report}");
    if let Some((at, byte)) = wrong {
        panic!("curl {url}: byte {at} is {byte}, not {}", at % PERIOD);
    }
    assert_eq!(offset, len, "curl {url}: {offset} bytes, not {len}; {report}");
    assert_eq!(report.trim(), format!("code=200 size={len}"), "curl {url}");
}

/// Which TCP the server runs on.
#[derive(Clone, Copy, Debug)]
enum Backend {
    /// Our stack over AF_XDP.
    Xdp,
    /// Our stack over AF_PACKET.
    Packet,
    /// The kernel's sockets, at [`KERNEL_IP`].
    Kernel,
}

/// The example server, running in the lab's bypass namespace; dropping the guard kills it
/// (SIGKILL) and reaps it, [`Server::stop`] ends it with SIGTERM and judges its exit.
struct Server {
    child: Option<Child>,
    backend: Backend,
    bypass_ns: String,
    bypass_if: String,
    output: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Start the server on `backend` and wait until it says where it serves.
    fn start(lab: &Lab, backend: Backend) -> Server {
        let (ip, mode) = match backend {
            Backend::Xdp => (lab.bypass_ip, None),
            Backend::Packet => (lab.bypass_ip, Some("packet")),
            Backend::Kernel => (KERNEL_IP, Some("kernel")),
        };
        let mut cmd = lab.bypass_cmd(server_binary().to_str().expect("a UTF-8 path"));
        cmd.args([&lab.bypass_if, &ip.to_string(), &PORT.to_string()]).args(mode);
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
        let output = Arc::new(Mutex::new(String::new()));
        let readers = vec![
            common::collect(child.stdout.take().expect("piped stdout"), output.clone()),
            common::collect(child.stderr.take().expect("piped stderr"), output.clone()),
        ];
        let mut server = Server {
            child: Some(child),
            backend,
            bypass_ns: lab.bypass_ns.clone(),
            bypass_if: lab.bypass_if.clone(),
            output,
            readers,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !server.output().contains("http_server on http://") {
            if let Some(status) = server.child.as_mut().expect("running").try_wait().expect("wait for the server") {
                server.join_readers();
                panic!("http_server ({backend:?}) exited before serving ({status}): {}", server.output());
            }
            assert!(
                Instant::now() < deadline,
                "http_server ({backend:?}) did not start within 10 s: {}",
                server.output()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        server
    }

    /// Return what the server printed so far (standard output and error).
    fn output(&self) -> String {
        self.output.lock().unwrap().clone()
    }

    /// Send SIGTERM; check that the server exits 0 within 10 s without a panic and that
    /// no XDP program is left on the interface.
    fn stop(mut self) {
        let mut child = self.child.take().expect("running");
        let pid = libc::pid_t::try_from(child.id()).expect("a pid");
        // SAFETY: kill(2) takes plain integers; `pid` is our child (`ip netns exec` execs the
        // server), not yet reaped, so the pid names no other process.
        let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
        assert_eq!(rc, 0, "kill -TERM {pid}: {}", std::io::Error::last_os_error());
        let status = common::wait_exit(&mut child, Duration::from_secs(10));
        let status = status.unwrap_or_else(|| {
            let _ = child.kill();
            let _ = child.wait();
            panic!("http_server ({:?}) did not exit within 10 s of SIGTERM: {}", self.backend, self.output())
        });
        self.join_readers();
        let output = self.output();
        assert!(status.success(), "http_server ({:?}) exited with {status} on SIGTERM: {output}", self.backend);
        assert!(!output.contains("panicked"), "http_server ({:?}) panicked: {output}", self.backend);
        let link = Command::new("ip")
            .args(["-n", &self.bypass_ns, "link", "show", "dev", &self.bypass_if])
            .output()
            .expect("run ip link show");
        let link = String::from_utf8_lossy(&link.stdout);
        // `mtu 1500 xdp qdisc ...` (or xdpgeneric) and `prog/xdp id N` while one is attached.
        let attached = link.split_whitespace().any(|w| w.starts_with("xdp") || w.starts_with("prog/xdp"));
        assert!(!attached, "an XDP program is still attached after the server exited: {link}");
    }

    fn join_readers(&mut self) {
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            if std::thread::panicking() {
                eprintln!("http_server ({:?}) printed: {}", self.backend, self.output());
            }
        }
        self.join_readers();
    }
}

/// Return the example server's binary, `<target>/<profile>/examples/http_server` beside this
/// test's `<target>/<profile>/deps/`, brought up to date (once per test binary) by the cargo
/// that runs the test.
fn server_binary() -> &'static Path {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let exe = std::env::current_exe().expect("the test binary's path");
        let profile_dir = exe
            .parent()
            .filter(|d| d.ends_with("deps"))
            .and_then(Path::parent)
            .unwrap_or_else(|| panic!("{} is not in <target>/<profile>/deps", exe.display()));
        match std::env::var_os("CARGO") {
            Some(cargo) => build_example(&cargo, profile_dir),
            None => eprintln!("not run by cargo: using the example binary as it is"),
        }
        let binary = profile_dir.join("examples").join("http_server");
        assert!(binary.is_file(), "{} is missing: cargo build --example http_server", binary.display());
        binary
    })
}

/// Build the example with `cargo` into `profile_dir`'s target directory and profile: a
/// plain `cargo test` has built it already (and this finds it fresh), a run that selects
/// targets (`cargo test --test http_clients`) has not.
fn build_example(cargo: &std::ffi::OsStr, profile_dir: &Path) {
    let target_dir = profile_dir.parent().expect("<target>/<profile> has a parent");
    let profile = match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev",
        Some(name) => name,
        None => panic!("{} names no profile", profile_dir.display()),
    };
    let mut cmd = Command::new(cargo);
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["build", "--quiet", "--example", "http_server", "--profile", profile, "--target-dir"])
        .arg(target_dir);
    let out = cmd.output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(out.status.success(), "{cmd:?}: {}: {}", out.status, String::from_utf8_lossy(&out.stderr));
}
