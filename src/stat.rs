//! `bypass stat`: the counters of running stacks, as `nstat` shows the kernel's.
//!
//! Each stack's control endpoint answers `{"cmd":"stat"}` with every counter by name: the
//! host's (`rx_frames`, `drop.<reason>`, `syn_cookies_sent`, ...), the TCP totals over all
//! connections (`tcp.retransmits`, `tcp.challenge_acks`, ...), the device's
//! (`device.rx_fill_ring_empty`, `device.rx_dropped`, ...) and a few gauges. Without `-i` we
//! print the totals (non-zero ones unless `-a`); with `-i SECS`, every SECS seconds, the
//! counters that moved: name, delta, total (`nstat`'s layout, which prints the delta and the
//! rate; we print the delta and the running total).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bypass_control::{ClientError, Endpoint, endpoints};

/// What `bypass stat` takes.
#[derive(clap::Args)]
pub struct StatArgs {
    /// Only this process's stacks (default: every running stack).
    pid: Option<u32>,
    /// Print the totals, then what changed every SECS seconds (name, delta, total) until
    /// interrupted.
    #[arg(short = 'i', long, value_name = "SECS")]
    interval: Option<f64>,
    /// With `-i`: stop after N intervals.
    #[arg(short = 'c', long, value_name = "N")]
    count: Option<u64>,
    /// Print counters that are zero (or, with `-i`, did not move) too.
    #[arg(short = 'a', long)]
    all: bool,
    /// Print JSON lines: one object per stack (per interval with `-i`), with `total` and,
    /// with `-i`, `delta` and `interval_us`.
    #[arg(long)]
    json: bool,
}

type Counters = BTreeMap<String, u64>;

/// Names that are not counters: the clock.
const NOT_COUNTERS: [&str; 1] = ["now_us"];

fn query(ep: &Endpoint) -> Result<Counters, ClientError> {
    let value = ep.query(&serde_json::json!({"cmd": "stat"}))?;
    serde_json::from_value(value).map_err(|e| ClientError::BadReply { path: ep.path.clone(), detail: e.to_string() })
}

/// Run `bypass stat`.
pub fn run(args: StatArgs) -> Result<(), String> {
    let eps = endpoints(args.pid).map_err(|e| e.to_string())?;
    let Some(secs) = args.interval else {
        let mut answered = Vec::new();
        let mut failed = Vec::new();
        for ep in eps {
            match query(&ep) {
                Ok(total) => answered.push((ep, total)),
                Err(e) => failed.push((ep, e)),
            }
        }
        if answered.is_empty()
            && let Some((_, e)) = failed.first()
        {
            return Err(e.to_string());
        }
        for (ep, e) in failed {
            eprintln!("bypass: stack {} shard {}: {e}", ep.pid, ep.shard);
        }
        for (ep, total) in &answered {
            print_sample(&args, ep, total, None);
        }
        return Ok(());
    };
    if !(secs.is_finite() && secs > 0.0) {
        return Err(format!("-i takes a number of seconds above 0, not {secs}"));
    }
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        ctrlc::set_handler(move || stop.store(true, Ordering::SeqCst))
            .map_err(|e| format!("cannot install the Ctrl-C handler: {e}"))?;
    }
    // The first sample is the base; each interval prints what moved since the last.
    let mut last: Vec<(Endpoint, Counters)> = Vec::new();
    let mut failed = Vec::new();
    for ep in eps {
        match query(&ep) {
            Ok(c) => last.push((ep, c)),
            Err(e) => failed.push((ep, e)),
        }
    }
    if last.is_empty()
        && let Some((_, e)) = failed.first()
    {
        return Err(e.to_string());
    }
    for (ep, e) in failed {
        eprintln!("bypass: stack {} shard {}: {e}", ep.pid, ep.shard);
    }
    // The base, as totals (nstat's first report), so a reader knows when the first
    // interval began.
    for (ep, c) in &last {
        print_sample(&args, ep, c, None);
    }
    let mut done = 0;
    while args.count.is_none_or(|n| done < n) {
        if !sleep_unless(&stop, Duration::from_secs_f64(secs)) {
            break;
        }
        last.retain_mut(|(ep, before)| match query(ep) {
            Ok(now) => {
                print_sample(&args, ep, &now, Some(before));
                *before = now;
                true
            }
            Err(e) => {
                eprintln!("bypass: stack {} shard {}: {e}", ep.pid, ep.shard);
                false
            }
        });
        if last.is_empty() {
            return Err("every stack went away".into());
        }
        done += 1;
    }
    Ok(())
}

/// Sleep for `d` in short steps; return false if `stop` was raised.
fn sleep_unless(stop: &AtomicBool, d: Duration) -> bool {
    let end = std::time::Instant::now() + d;
    while std::time::Instant::now() < end {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        std::thread::sleep((end - std::time::Instant::now()).min(Duration::from_millis(50)));
    }
    !stop.load(Ordering::SeqCst)
}

/// Print one stack's sample: the totals, or with `before` what moved since.
fn print_sample(args: &StatArgs, ep: &Endpoint, now: &Counters, before: Option<&Counters>) {
    let delta = before.map(|b| deltas(b, now));
    if args.json {
        let mut doc = serde_json::json!({ "pid": ep.pid, "shard": ep.shard, "total": now });
        if let (Some(b), Some(d)) = (before, &delta) {
            doc["delta"] = serde_json::json!(d);
            let us = |c: &Counters| c.get("now_us").copied().unwrap_or(0);
            doc["interval_us"] = (us(now).saturating_sub(us(b))).into();
        }
        println!("{doc}");
        return;
    }
    println!("#pid {} shard {}", ep.pid, ep.shard);
    let width = now.keys().map(String::len).max().unwrap_or(0).max(24);
    for (name, total) in now.iter().filter(|(n, _)| !NOT_COUNTERS.contains(&n.as_str())) {
        match &delta {
            Some(d) => {
                let moved = d.get(name).copied().unwrap_or(0);
                if moved != 0 || args.all {
                    println!("{name:<width$} {moved:>12} {total:>14}");
                }
            }
            None if *total != 0 || args.all => println!("{name:<width$} {total:>14}"),
            None => {}
        }
    }
}

/// Return `now - before` per counter (a gauge that fell, such as `connections`, shows 0:
/// deltas are for counters, which only grow).
fn deltas(before: &Counters, now: &Counters) -> Counters {
    now.iter()
        .filter(|(n, _)| !NOT_COUNTERS.contains(&n.as_str()))
        .map(|(n, &v)| (n.clone(), v.saturating_sub(before.get(n).copied().unwrap_or(0))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_are_per_name_and_skip_the_clock() {
        let before: Counters = [("rx_frames".into(), 10), ("now_us".into(), 5)].into();
        let now: Counters = [("rx_frames".into(), 25), ("tx_frames".into(), 3), ("now_us".into(), 9)].into();
        let d = deltas(&before, &now);
        assert_eq!(d, [("rx_frames".into(), 15), ("tx_frames".into(), 3)].into());
    }
}
