//! The in-memory link: frames cross, impairments apply as configured and repeat per seed,
//! batches respect their limits, and real-time waits wake for arrivals.

use std::time::Duration;

use bypass_device::{Clock, Device, Instant, LinkConfig, LinkStats, MemoryDevice, MemoryLink};
use bypass_device::{MAC_A, MAC_B};

const MS: Duration = Duration::from_millis(1);

fn init_log() {
    let _ = env_logger::builder().is_test(true).try_init();
}

/// A 100-byte frame carrying `i` in its first four bytes, the rest a pattern of `i`.
fn frame(i: u32) -> Vec<u8> {
    let mut f: Vec<u8> = (0..100u32).map(|k| (k.wrapping_mul(31) ^ i) as u8).collect();
    f[..4].copy_from_slice(&i.to_be_bytes());
    f
}

fn index(f: &[u8]) -> u32 {
    u32::from_be_bytes(f[..4].try_into().unwrap())
}

/// Queue `frame` on `dev`; panic if the queue is full.
fn send(dev: &mut MemoryDevice, frame: &[u8]) {
    let queued = dev
        .send(&mut |buf| {
            buf[..frame.len()].copy_from_slice(frame);
            frame.len()
        })
        .expect("send");
    assert!(queued, "transmit queue full");
}

/// Receive everything due on `dev`, in order.
fn drain(dev: &mut MemoryDevice) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    dev.recv(usize::MAX, &mut |f| out.push(f.to_vec())).expect("recv");
    out
}

#[test]
fn frames_cross_both_ways_after_the_delay() {
    init_log();
    let ab = LinkConfig::default().with_delay(5 * MS);
    let ba = LinkConfig::default().with_delay(2 * MS);
    let (mut a, mut b) = MemoryLink::pair(ab, ba, 1);
    assert_ne!(a.info().mac, b.info().mac);
    assert_eq!((a.info().mac, b.info().mac), (MAC_A, MAC_B));
    assert_eq!(a.info().mtu, 1500);
    assert!(a.info().mode.contains("virtual"), "{}", a.info().mode);
    let clock = a.clock().clone();

    send(&mut a, &frame(1));
    send(&mut b, &frame(2));
    assert!(drain(&mut b).is_empty(), "nothing moves before flush");
    a.flush().unwrap();
    b.flush().unwrap();
    assert_eq!(b.next_arrival(), Some(Instant::ZERO + 5 * MS));
    assert_eq!(a.next_arrival(), Some(Instant::ZERO + 2 * MS));

    clock.advance(2 * MS);
    assert_eq!(drain(&mut a), vec![frame(2)]);
    assert!(drain(&mut b).is_empty(), "a to b takes 5 ms");
    clock.advance(3 * MS);
    assert_eq!(drain(&mut b), vec![frame(1)]);
    assert!(drain(&mut a).is_empty() && drain(&mut b).is_empty());
    assert_eq!(a.tx_stats().delivered, 1);
    assert_eq!(a.rx_stats().delivered, 1);
}

#[test]
fn fill_gets_a_whole_frame_and_zero_cancels() {
    let (mut a, mut b) = MemoryLink::pair(LinkConfig::default(), LinkConfig::default(), 1);
    let max = a.info().max_frame();
    assert_eq!(max, 1514);
    a.send(&mut |buf| {
        assert!(buf.len() >= max);
        0
    })
    .unwrap();
    a.send(&mut |buf| {
        buf[..max].fill(7);
        max
    })
    .unwrap();
    a.flush().unwrap();
    a.clock().advance(MS);
    assert_eq!(drain(&mut b), vec![vec![7u8; max]], "the cancelled frame is not sent");
    let err = a.send(&mut |buf| buf.len() + 1).unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn recv_respects_the_budget() {
    let (mut a, mut b) = MemoryLink::pair(LinkConfig::default(), LinkConfig::default(), 1);
    for i in 0..10 {
        send(&mut a, &frame(i));
    }
    a.flush().unwrap();
    a.clock().advance(MS);
    let mut got = Vec::new();
    let mut batches = Vec::new();
    loop {
        let n = b.recv(3, &mut |f| got.push(index(f))).unwrap();
        if n == 0 {
            break;
        }
        batches.push(n);
    }
    assert_eq!(batches, [3, 3, 3, 1]);
    assert_eq!(got, (0..10).collect::<Vec<_>>());
    assert_eq!(b.recv(0, &mut |_| panic!("budget 0")).unwrap(), 0);
}

#[test]
fn send_reports_a_full_queue_until_flushed() {
    let (mut a, mut b) = MemoryLink::new(LinkConfig::default(), LinkConfig::default(), 1).tx_queue(4).build();
    for i in 0..4 {
        send(&mut a, &frame(i));
    }
    let mut called = false;
    assert!(
        !a.send(&mut |_| {
            called = true;
            0
        })
        .unwrap()
    );
    assert!(!called, "fill is not called when the queue is full");
    a.flush().unwrap();
    send(&mut a, &frame(4));
    a.flush().unwrap();
    a.clock().advance(MS);
    assert_eq!(drain(&mut b).iter().map(|f| index(f)).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
}

/// Send `n` frames from A, one every 100 us of virtual time, and return what B receives with
/// the (virtual) time of each receipt, and the A-to-B link's counters.
fn run(config: LinkConfig, seed: u64, n: u32) -> (Vec<(Instant, Vec<u8>)>, LinkStats) {
    let (mut a, mut b) = MemoryLink::pair(config, LinkConfig::default(), seed);
    let clock = a.clock().clone();
    let mut out = Vec::new();
    for i in 0..n {
        send(&mut a, &frame(i));
        a.flush().unwrap();
        clock.advance(Duration::from_micros(100));
        b.recv(usize::MAX, &mut |f| out.push((clock.now(), f.to_vec()))).unwrap();
    }
    while let Some(t) = b.next_arrival() {
        clock.advance_to(t);
        b.recv(usize::MAX, &mut |f| out.push((t, f.to_vec()))).unwrap();
    }
    (out, a.tx_stats())
}

#[test]
fn loss_applies_at_the_configured_rate() {
    let (out, stats) = run(LinkConfig::default().with_loss(0.3), 5, 2_000);
    // Binomial(2000, 0.3): sd = 20.5, so +-100 is about five sd.
    assert!((500..=700).contains(&stats.lost), "lost {}", stats.lost);
    assert_eq!(out.len() as u64, stats.delivered);
    assert_eq!(stats.delivered + stats.lost, 2_000);
    assert!(out.iter().all(|(_, f)| *f == frame(index(f))), "survivors are intact");
}

#[test]
fn duplication_reordering_and_corruption_apply() {
    let config = LinkConfig::default().with_duplicate(0.1).with_reorder(0.1, 3 * MS).with_corrupt(0.1);
    let (out, stats) = run(config, 9, 2_000);
    assert!((100..=300).contains(&stats.duplicated), "duplicated {}", stats.duplicated);
    assert!(stats.reordered > 100 && stats.corrupted > 100, "{stats:?}");
    assert_eq!(out.len() as u64, 2_000 + stats.duplicated);
    let damaged = out
        .iter()
        .filter(|(_, f)| {
            // A corrupted index field makes the frame match no original; compare bit counts
            // against the closest candidate, its own index's frame.
            let bits: u32 = f.iter().zip(frame(index(f))).map(|(x, y)| (x ^ y).count_ones()).sum();
            bits > 0
        })
        .count() as u64;
    assert!(damaged <= stats.corrupted && damaged * 10 >= stats.corrupted * 9, "{damaged} vs {stats:?}");
    let inversions = out.windows(2).filter(|w| index(&w[0].1) > index(&w[1].1) + 1).count();
    assert!(inversions > 0, "held-back frames are overtaken");
}

#[test]
fn same_seed_same_run() {
    let config = LinkConfig::default()
        .with_loss(0.05)
        .with_reorder(0.1, 3 * MS)
        .with_duplicate(0.02)
        .with_corrupt(0.02)
        .with_bandwidth(10_000_000);
    let first = run(config, 1234, 1_000);
    assert_eq!(first, run(config, 1234, 1_000));
    assert_ne!(first.0, run(config, 1235, 1_000).0);
}

#[test]
fn set_tx_config_changes_later_frames() {
    let (mut a, mut b) = MemoryLink::pair(LinkConfig::default(), LinkConfig::default(), 1);
    a.set_tx_config(LinkConfig::default().with_loss(1.0));
    send(&mut a, &frame(0));
    a.flush().unwrap();
    a.set_tx_config(LinkConfig::default());
    send(&mut a, &frame(1));
    a.flush().unwrap();
    a.clock().advance(MS);
    assert_eq!(drain(&mut b), vec![frame(1)]);
    assert_eq!(a.tx_stats().lost, 1);
}

#[test]
fn virtual_wait_returns_at_once() {
    let (_, mut b) = MemoryLink::pair(LinkConfig::default(), LinkConfig::default(), 1);
    let start = std::time::Instant::now();
    b.wait(None).unwrap();
    b.wait(Some(Duration::from_secs(10))).unwrap();
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[test]
fn real_wait_times_out_without_traffic() {
    let (_, mut b) = MemoryLink::new(LinkConfig::default(), LinkConfig::default(), 1).clock(Clock::real()).build();
    assert!(b.info().mode.contains("real"), "{}", b.info().mode);
    let start = std::time::Instant::now();
    b.wait(Some(50 * MS)).unwrap();
    let waited = start.elapsed();
    assert!(waited >= 50 * MS && waited < Duration::from_secs(2), "waited {waited:?}");
}

#[test]
fn real_wait_wakes_when_a_frame_is_due() {
    init_log();
    let delay = 20 * MS;
    let link = LinkConfig::default().with_delay(delay);
    let (mut a, mut b) = MemoryLink::new(link, link, 1).clock(Clock::real()).build();
    let receiver = std::thread::spawn(move || {
        let start = std::time::Instant::now();
        let mut got = Vec::new();
        while got.len() < 3 && start.elapsed() < Duration::from_secs(10) {
            b.wait(Some(Duration::from_secs(10))).unwrap();
            b.recv(8, &mut |f| got.push((start.elapsed(), index(f)))).unwrap();
        }
        got
    });
    let start = std::time::Instant::now();
    for i in 0..3 {
        std::thread::sleep(30 * MS);
        send(&mut a, &frame(i));
        a.flush().unwrap();
    }
    let got = receiver.join().unwrap();
    assert_eq!(got.iter().map(|&(_, i)| i).collect::<Vec<_>>(), [0, 1, 2]);
    // Frame i leaves at about 30 ms * (i + 1) and is due 20 ms later; the receiver neither
    // wakes before that nor sleeps through to its 10 s timeout.
    for (k, &(at, _)) in got.iter().enumerate() {
        let due = 30 * MS * (k as u32 + 1) + delay;
        assert!(at >= due - 5 * MS && at < due + Duration::from_millis(500), "frame {k} at {at:?}, due {due:?}");
    }
    assert!(start.elapsed() < Duration::from_secs(5));
}

/// A real-time wait with no timeout ends when another thread wakes the device, and a wake
/// before the wait makes that wait return at once.
#[test]
fn a_waker_ends_a_wait_from_another_thread() {
    init_log();
    let (mut a, _b) = MemoryLink::new(LinkConfig::default(), LinkConfig::default(), 3).clock(Clock::real()).build();
    let waker = a.waker().expect("memory devices can be woken");
    let remote = waker.clone();
    let wake_later = std::thread::spawn(move || {
        std::thread::sleep(100 * MS);
        remote.wake();
    });
    let start = std::time::Instant::now();
    a.wait(None).unwrap();
    let waited = start.elapsed();
    wake_later.join().unwrap();
    assert!(waited >= 90 * MS && waited < Duration::from_secs(5), "waited {waited:?}");
    waker.wake();
    let start = std::time::Instant::now();
    a.wait(Some(Duration::from_secs(5))).unwrap();
    assert!(start.elapsed() < 500 * MS, "an earlier wake ends the next wait at once");
}
