//! `bypass ss`: the connections and listeners of running stacks, as `ss -tin` shows the
//! kernel's (which knows nothing of ours).
//!
//! Each stack's control endpoint answers `{"cmd":"ss"}` with a [`Snapshot`]; we filter it by
//! port and address and print a table (`ss`'s columns: State, Recv-Q, Send-Q, Local, Peer,
//! and the process), with `-i` a second line of TCP internals per connection (`ss -i`'s
//! names: rtt, rto, cwnd, ssthresh, bytes_acked, delivery_rate, ...) and the timer that runs
//! next (`ss -o`'s `timer:(name,when)`), or the documents themselves with `--json`.

use std::net::{IpAddr, SocketAddr};

use bypass_control::snapshot::{Connection, Listener};
use bypass_control::{ClientError, Endpoint, Snapshot, endpoints};

/// What `bypass ss` takes.
#[derive(clap::Args)]
pub struct SsArgs {
    /// Only this process's stacks (default: every running stack).
    pid: Option<u32>,
    /// Show listeners only (`ss -l`).
    #[arg(short = 'l', long)]
    listening: bool,
    /// Show listeners and connections (`ss -a`).
    #[arg(short = 'a', long)]
    all: bool,
    /// Show TCP internals per connection (`ss -i`): rtt, rto, cwnd, bytes, rates, timer.
    #[arg(short = 'i', long)]
    info: bool,
    /// Print the stacks' documents as JSON (one array; filters apply).
    #[arg(long)]
    json: bool,
    /// Only connections whose local port is N (listeners on port N).
    #[arg(long, value_name = "N")]
    sport: Option<u16>,
    /// Only connections whose peer port is N.
    #[arg(long, value_name = "N")]
    dport: Option<u16>,
    /// Only connections whose local address is ADDR.
    #[arg(long, value_name = "ADDR")]
    src: Option<IpAddr>,
    /// Only connections whose peer address is ADDR.
    #[arg(long, value_name = "ADDR")]
    dst: Option<IpAddr>,
}

/// Which connections and listeners to show.
struct Filter<'a>(&'a SsArgs);

impl Filter<'_> {
    fn connection(&self, c: &Connection) -> bool {
        let a = self.0;
        let (Ok(local), Ok(peer)) = (c.local.parse::<SocketAddr>(), c.peer.parse::<SocketAddr>()) else {
            return false;
        };
        !a.listening
            && a.sport.is_none_or(|p| p == local.port())
            && a.dport.is_none_or(|p| p == peer.port())
            && a.src.is_none_or(|ip| ip == local.ip())
            && a.dst.is_none_or(|ip| ip == peer.ip())
    }

    fn listener(&self, l: &Listener) -> bool {
        let a = self.0;
        (a.listening || a.all) && a.dport.is_none() && a.dst.is_none() && a.sport.is_none_or(|p| p == l.port)
    }
}

/// Ask every chosen stack for its snapshot. A stack that fails is reported on standard
/// error and skipped, unless none answers: then its error is ours.
pub fn snapshots(pid: Option<u32>) -> Result<Vec<(Endpoint, Snapshot)>, String> {
    let eps = endpoints(pid).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    let mut failed = Vec::new();
    for ep in eps {
        match query(&ep) {
            Ok(snap) => out.push((ep, snap)),
            Err(e) => failed.push((ep, e)),
        }
    }
    if out.is_empty()
        && let Some((_, e)) = failed.first()
    {
        return Err(e.to_string());
    }
    for (ep, e) in failed {
        eprintln!("bypass: stack {} shard {}: {e}", ep.pid, ep.shard);
    }
    Ok(out)
}

fn query(ep: &Endpoint) -> Result<Snapshot, ClientError> {
    let value = ep.query(&serde_json::json!({"cmd": "ss"}))?;
    serde_json::from_value(value).map_err(|e| ClientError::BadReply { path: ep.path.clone(), detail: e.to_string() })
}

/// Run `bypass ss`.
pub fn run(args: SsArgs) -> Result<(), String> {
    let snaps = snapshots(args.pid)?;
    let filter = Filter(&args);
    if args.json {
        let docs: Vec<Snapshot> = snaps
            .into_iter()
            .map(|(_, mut s)| {
                s.connections.retain(|c| filter.connection(c));
                s.listeners.retain(|l| filter.listener(l));
                s
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&docs).map_err(|e| e.to_string())?);
        return Ok(());
    }
    let mut rows = Vec::new();
    for (_, s) in &snaps {
        let process = format!("pid={},shard={},dev={}", s.pid, s.shard, s.device);
        for l in s.listeners.iter().filter(|l| filter.listener(l)) {
            let extra = args.info.then(|| format!("half_open:{} syn_queue:{}", l.half_open, l.syn_queue));
            rows.push(Row {
                state: "LISTEN".into(),
                recv_q: l.accept_queue,
                send_q: l.backlog,
                local: l.local.clone(),
                peer: "*:*".into(),
                process: process.clone(),
                extra,
            });
        }
        for c in s.connections.iter().filter(|c| filter.connection(c)) {
            rows.push(Row {
                state: c.state.clone(),
                recv_q: c.recv_q,
                send_q: c.send_q,
                local: c.local.clone(),
                peer: c.peer.clone(),
                process: process.clone(),
                extra: args.info.then(|| info_line(c)),
            });
        }
    }
    print!("{}", table(&rows));
    Ok(())
}

struct Row {
    state: String,
    recv_q: u64,
    send_q: u64,
    local: String,
    peer: String,
    process: String,
    extra: Option<String>,
}

/// Return `rows` as `ss` lays them out: a header, columns as wide as their widest entry.
fn table(rows: &[Row]) -> String {
    let w = |f: &dyn Fn(&Row) -> usize, min: usize| rows.iter().map(f).max().unwrap_or(0).max(min);
    let (ws, wr, wq) =
        (w(&|r| r.state.len(), 10), w(&|r| r.recv_q.to_string().len(), 6), w(&|r| r.send_q.to_string().len(), 6));
    let (wl, wp) = (w(&|r| r.local.len(), 18), w(&|r| r.peer.len(), 18));
    let mut out = format!(
        "{:<ws$} {:>wr$} {:>wq$} {:<wl$} {:<wp$} Process\n",
        "State", "Recv-Q", "Send-Q", "Local Address:Port", "Peer Address:Port"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<ws$} {:>wr$} {:>wq$} {:<wl$} {:<wp$} {}\n",
            r.state, r.recv_q, r.send_q, r.local, r.peer, r.process
        ));
        if let Some(extra) = &r.extra {
            out.push_str(&format!("\t {extra}\n"));
        }
    }
    out
}

/// Return the `-i` line of `c`, in `ss -i`'s words.
fn info_line(c: &Connection) -> String {
    let ms = |us: u64| format!("{}", us as f64 / 1000.0);
    let mut parts = Vec::new();
    if c.timestamps {
        parts.push("ts".to_string());
    }
    if c.sack {
        parts.push("sack".into());
    }
    if c.ecn {
        parts.push("ecn".into());
    }
    parts.push(format!("wscale:{},{}", c.wscale[1], c.wscale[0]));
    parts.push(format!("rto:{}", ms(c.rto_us)));
    if let Some(rtt) = c.rtt_us {
        parts.push(format!("rtt:{}/{}", ms(rtt), ms(c.rttvar_us)));
    }
    parts.push(format!("mss:{}", c.mss));
    parts.push(format!("cwnd:{}", c.cwnd));
    if c.ssthresh < u64::from(u32::MAX) {
        parts.push(format!("ssthresh:{}", c.ssthresh));
    }
    parts.push(format!("bytes_sent:{}", c.bytes_sent));
    parts.push(format!("bytes_acked:{}", c.bytes_acked));
    parts.push(format!("bytes_received:{}", c.bytes_received));
    parts.push(format!("segs_out:{}", c.segs_out));
    parts.push(format!("segs_in:{}", c.segs_in));
    if let Some(rcv_rtt) = c.rcv_rtt_us {
        parts.push(format!("rcv_rtt:{}", ms(rcv_rtt)));
    }
    if c.pacing_rate > 0 {
        parts.push(format!("pacing_rate {}", rate(c.pacing_rate)));
    }
    if c.delivery_rate > 0 {
        parts.push(format!("delivery_rate {}", rate(c.delivery_rate)));
    }
    if c.unacked > 0 {
        parts.push(format!("unacked:{}", c.unacked));
    }
    parts.push(format!("retrans:{}/{}", c.retrans, c.timeouts));
    parts.push(format!("snd_wnd:{}", c.snd_wnd));
    parts.push(format!("rcv_wnd:{}", c.rcv_wnd));
    if c.owner != "user" {
        parts.push(format!("owner:{}", c.owner));
    }
    if let Some(t) = &c.timer {
        parts.push(format!("timer:({},{})", t.name, duration(t.in_us)));
    }
    parts.join(" ")
}

/// Return a rate of `bytes_per_s` in bits per second, as `ss` prints it (`1.2Gbps`).
fn rate(bytes_per_s: u64) -> String {
    let bits = bytes_per_s as f64 * 8.0;
    match bits {
        b if b >= 1e9 => format!("{:.1}Gbps", b / 1e9),
        b if b >= 1e6 => format!("{:.1}Mbps", b / 1e6),
        b if b >= 1e3 => format!("{:.1}Kbps", b / 1e3),
        b => format!("{b}bps"),
    }
}

/// Return `us` microseconds as `ss -o` prints a timer (`200ms`, `1.5sec`, `2min30sec`).
fn duration(us: u64) -> String {
    match us {
        u if u < 1_000 => format!("{u}us"),
        u if u < 1_000_000 => format!("{}ms", u / 1_000),
        u if u < 60_000_000 => format!("{:.1}sec", u as f64 / 1e6),
        u => format!("{}min{}sec", u / 60_000_000, (u / 1_000_000) % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_timers_read_as_ss_prints_them() {
        assert_eq!(rate(125_000_000), "1.0Gbps");
        assert_eq!(rate(1_500_000), "12.0Mbps");
        assert_eq!(rate(100), "800bps");
        assert_eq!(duration(150), "150us");
        assert_eq!(duration(200_000), "200ms");
        assert_eq!(duration(1_500_000), "1.5sec");
        assert_eq!(duration(150_000_000), "2min30sec");
    }
}
