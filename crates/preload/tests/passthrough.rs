//! The library preloaded into programs that `bypass run` did not configure, or whose stack
//! cannot start: every call reaches the C library as if the library were not there. (The
//! calls it serves are tried against real programs in the workspace's `tests/run_programs.rs`.)
//!
//! The library is this package's own build (`<target>/<profile>/deps/libbypass_preload.so`,
//! beside this test's binary), preloaded into `python3`.

use std::path::PathBuf;
use std::process::Command;

fn library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary");
    let lib = exe.parent().expect("deps/").join("libbypass_preload.so");
    assert!(lib.exists(), "{} is not built", lib.display());
    lib
}

/// A loopback TCP echo, a pipe and a file in one Python program: what it prints.
const PROGRAM: &str = r#"
import os, socket, tempfile, threading
srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
srv.bind(("127.0.0.1", 0)); srv.listen(1)
def serve():
    c, _ = srv.accept()
    c.sendall(c.recv(100).upper()); c.close()
threading.Thread(target=serve).start()
s = socket.create_connection(srv.getsockname())
s.sendall(b"hello")
print(s.recv(100).decode())
r, w = os.pipe(); os.write(w, b"pipe"); print(os.read(r, 4).decode())
with tempfile.TemporaryFile() as f:
    f.write(b"file"); f.seek(0); print(f.read().decode())
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.bind(("127.0.0.1", 0))
u.sendto(b"udp", u.getsockname()); print(u.recv(10).decode())
"#;

fn run(env: &[(&str, &str)]) -> String {
    let out = Command::new("python3")
        .args(["-c", PROGRAM])
        .env("LD_PRELOAD", library())
        .envs(env.iter().copied())
        .output()
        .expect("run python3");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "python3 failed: {}\n{stderr}", out.status);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn without_bypass_run_every_call_passes_through() {
    assert_eq!(run(&[]), "HELLO\npipe\nfile\nudp\n");
}

#[test]
fn loopback_files_pipes_and_udp_pass_through_when_the_stack_cannot_start() {
    // Configured, but for an interface that does not exist: the stack fails to start at the
    // first TCP socket, says so once, and loopback still goes to the kernel.
    let env = [("BYPASS_IFACE", "no-such-if0"), ("BYPASS_IP", "10.99.0.2/24"), ("BYPASS_LOG", "off")];
    assert_eq!(run(&env), "HELLO\npipe\nfile\nudp\n");
}
