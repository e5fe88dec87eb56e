//! `// @config key=value` directives: the stack's settings and the runner's.

use std::net::Ipv4Addr;
use std::time::Duration;

use bypass_stack::StackConfig;
use bypass_tcp::Algorithm;

/// Everything a script can configure (defaults: `bypass_stack::StackConfig::new` with the
/// addresses below; see the crate docs for the keys).
#[derive(Clone, Debug)]
pub struct Settings {
    /// Our stack's settings.
    pub stack: StackConfig,
    /// The tester's address (`remote_ip`, default 192.168.0.2).
    pub tester_ip: Ipv4Addr,
    /// The tester's port when the script names none (`remote_port`, default 40000; a
    /// `connect` sets it to the port connected to).
    pub tester_port: u16,
    /// Our port for `connect` and for packets before any `listen` (`local_port`, default 8080;
    /// `listen PORT` sets it).
    pub local_port: u16,
    /// Timing tolerance (`tolerance_usecs`, packetdrill's default 4000): outbound segments
    /// may leave this much before or after the script's time, and our TSvals may differ by
    /// this much (in 1 ms ticks) from the script's.
    pub tolerance_usecs: u64,
}

impl Default for Settings {
    fn default() -> Self {
        let mut stack = StackConfig::new(Ipv4Addr::new(192, 168, 0, 1), 24, *b"bypass-script-k!");
        // Scripts show TCP only: an ARP entry never expires during one.
        stack.arp.ttl = Duration::from_secs(1 << 30);
        Settings {
            stack,
            tester_ip: Ipv4Addr::new(192, 168, 0, 2),
            tester_port: 40000,
            local_port: 8080,
            tolerance_usecs: 4000,
        }
    }
}

fn duration(v: &str) -> Result<Duration, String> {
    let bad = || format!("`{v}` is not a duration (like 200ms, 1s, 500us)");
    let (num, unit) = v.find(|c: char| c.is_ascii_alphabetic()).map_or((v, "s"), |at| v.split_at(at));
    let n: u64 = num.parse().map_err(|_| bad())?;
    Ok(match unit {
        "us" => Duration::from_micros(n),
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        _ => return Err(bad()),
    })
}

fn flag(v: &str) -> Result<bool, String> {
    match v {
        "on" | "true" | "1" | "yes" => Ok(true),
        "off" | "false" | "0" | "no" => Ok(false),
        _ => Err(format!("`{v}` is not on/off")),
    }
}

fn num<T: std::str::FromStr>(v: &str) -> Result<T, String> {
    v.parse().map_err(|_| format!("`{v}` is not a number"))
}

fn optional_duration(v: &str) -> Result<Option<Duration>, String> {
    if v == "off" || v == "none" { Ok(None) } else { duration(v).map(Some) }
}

impl Settings {
    /// Return our address (the stack's IPv4 one; scripts speak IPv4).
    pub fn local_ip(&self) -> Ipv4Addr {
        self.stack.ipv4.map_or(Ipv4Addr::UNSPECIFIED, |c| c.addr)
    }

    /// Apply one `key=value`.
    pub fn set(&mut self, key: &str, v: &str) -> Result<(), String> {
        let tcp = &mut self.stack.tcp;
        match key {
            "mss" => tcp.mss = num(v)?,
            "recv_buffer" => {
                tcp.recv_buffer = num(v)?;
                tcp.recv_buffer_max = tcp.recv_buffer;
            }
            "send_buffer" => {
                tcp.send_buffer = num(v)?;
                tcp.send_buffer_max = tcp.send_buffer;
            }
            "recv_buffer_max" => tcp.recv_buffer_max = num(v)?,
            "send_buffer_max" => tcp.send_buffer_max = num(v)?,
            "window_scaling" => tcp.window_scaling = flag(v)?,
            "sack" => tcp.sack = flag(v)?,
            "timestamps" => tcp.timestamps = flag(v)?,
            "nagle" => tcp.nagle = flag(v)?,
            "pacing" => tcp.pacing = flag(v)?,
            "congestion" => {
                tcp.congestion = match v {
                    "reno" | "newreno" => Algorithm::NewReno,
                    "cubic" => Algorithm::Cubic,
                    _ => return Err(format!("congestion `{v}`: reno or cubic")),
                }
            }
            "sws_override" => tcp.sws_override = duration(v)?,
            "delayed_ack" => tcp.delayed_ack = optional_duration(v)?,
            "initial_rto" => tcp.initial_rto = duration(v)?,
            "min_rto" => tcp.min_rto = duration(v)?,
            "max_rto" => tcp.max_rto = duration(v)?,
            "msl" => tcp.msl = duration(v)?,
            "syn_retries" => tcp.syn_retries = num(v)?,
            "max_retransmissions" => tcp.max_retransmissions = num(v)?,
            "user_timeout" => tcp.user_timeout = optional_duration(v)?,
            "fin_wait2_timeout" => tcp.fin_wait2_timeout = optional_duration(v)?,
            "rfc1337" => tcp.rfc1337 = flag(v)?,
            "challenge_ack_limit" => tcp.challenge_ack_limit = num(v)?,
            "invalid_ack_interval" => tcp.invalid_ack_interval = duration(v)?,
            "keepalive" => tcp.keepalive = flag(v)?.then(|| tcp.keepalive.unwrap_or_default()),
            "keepalive_idle" => tcp.keepalive.get_or_insert_with(Default::default).idle = duration(v)?,
            "keepalive_interval" => tcp.keepalive.get_or_insert_with(Default::default).interval = duration(v)?,
            "keepalive_probes" => tcp.keepalive.get_or_insert_with(Default::default).probes = num(v)?,
            "ecn" => {
                tcp.ecn = match v {
                    "off" => bypass_tcp::Ecn::Off,
                    "accept" => bypass_tcp::Ecn::Accept,
                    "request" | "on" => bypass_tcp::Ecn::Request,
                    _ => return Err(format!("ecn `{v}`: off, accept or request")),
                }
            }
            "syn_queue" => self.stack.syn_queue = num(v)?,
            "accept_backlog" => self.stack.accept_backlog = num(v)?,
            "window_budget" => self.stack.window_budget = if v == "none" { None } else { Some(num(v)?) },
            "flight_budget" => self.stack.flight_budget = if v == "none" { None } else { Some(num(v)?) },
            "local_ip" => {
                let prefix = self.stack.ipv4.map_or(24, |c| c.prefix_len);
                self.stack.ipv4 = Some(bypass_stack::Cidr { addr: num(v)?, prefix_len: prefix });
            }
            "remote_ip" => self.tester_ip = num(v)?,
            "remote_port" => self.tester_port = num(v)?,
            "local_port" => self.local_port = num(v)?,
            "tolerance_usecs" => self.tolerance_usecs = num(v)?,
            _ => return Err(format!("unknown @config key `{key}` (see the bypass-script crate docs)")),
        }
        Ok(())
    }

    /// Return the defaults with `pairs` applied in order.
    pub fn from_pairs(pairs: &[(String, String)]) -> Result<Settings, String> {
        let mut s = Settings::default();
        for (k, v) in pairs {
            s.set(k, v).map_err(|e| format!("@config {k}={v}: {e}"))?;
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        let pairs = [("min_rto", "300ms"), ("delayed_ack", "off"), ("syn_queue", "0"), ("timestamps", "off")];
        let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let s = Settings::from_pairs(&pairs).unwrap();
        assert_eq!(s.stack.tcp.min_rto, Duration::from_millis(300));
        assert_eq!(s.stack.tcp.delayed_ack, None);
        assert_eq!(s.stack.syn_queue, 0);
        assert!(!s.stack.tcp.timestamps);
        assert!(Settings::from_pairs(&[("bogus".into(), "1".into())]).unwrap_err().contains("unknown @config key"));
        assert!(Settings::from_pairs(&[("min_rto".into(), "fast".into())]).is_err());
        assert_eq!(duration("2").unwrap(), Duration::from_secs(2));
        let pairs = [("keepalive_idle", "2s"), ("keepalive_interval", "500ms")];
        let pairs: Vec<(String, String)> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let ka = Settings::from_pairs(&pairs).unwrap().stack.tcp.keepalive.unwrap();
        assert_eq!((ka.idle, ka.interval, ka.probes), (Duration::from_secs(2), Duration::from_millis(500), 9));
        assert_eq!(Settings::from_pairs(&[("keepalive".into(), "off".into())]).unwrap().stack.tcp.keepalive, None);
        assert!(Settings::from_pairs(&[("keepalive_probes".into(), "many".into())]).is_err());
    }
}
