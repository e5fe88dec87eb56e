//! What the runtime's tests share.

use std::io::{Read, Write};

use bypass_runtime::Runtime;

/// Echo every accepted connection on its own thread until the runtime stops.
pub fn echo_forever(runtime: &Runtime, port: u16) {
    let listener = runtime.listen(port).expect("listen");
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 16 * 1024];
                loop {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if stream.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
}
