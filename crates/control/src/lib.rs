//! `bypass-control`: the control endpoint of a running stack and the client that talks to it.
//!
//! Every running stack (every shard of a `bypass-runtime` pool, `bypass echo`, programs under
//! `bypass run`) listens on one Unix stream socket, `/run/bypass/<pid>.<shard>.sock`
//! ([`run_dir`] honours `BYPASS_RUN_DIR`). A client connects, writes one request line (a JSON
//! object) and reads the answer:
//!
//! | request | answer |
//! |---|---|
//! | `{"cmd":"ss"}` | one JSON document: the connections and listeners ([`Snapshot`]), then close |
//! | `{"cmd":"stat"}` | one JSON document: every counter, name to `u64`, and `now_us` |
//! | `{"cmd":"capture","port":N,"host":"ADDR"}` | a pcapng byte stream until the reader closes |
//! | anything else | `{"error":"sentence"}`, then close |
//!
//! The server side ([`Server`]) costs the data path one relaxed atomic load per batch while
//! nobody is attached: an accept thread reads the request line and hands it to the stack's
//! thread, which answers it in [`Server::poll`] between batches (the stack is not shared).
//!
//! ```no_run
//! let endpoints = bypass_control::endpoints(None)?;
//! for endpoint in &endpoints {
//!     let reply = endpoint.query(&serde_json::json!({"cmd": "stat"}))?;
//!     println!("{} shard {}: {}", endpoint.pid, endpoint.shard, reply["rx_frames"]);
//! }
//! # Ok::<(), bypass_control::ClientError>(())
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod client;
pub mod server;
pub mod snapshot;

pub use client::{ClientError, Endpoint, endpoints, run_dir, socket_path};
pub use server::{BindError, Request, Server, parse_request, remove_all};
pub use snapshot::Snapshot;
