//! The bulk floor (`bypass_lab::bulk_floor`): raw AF_XDP frames streamed one way between a
//! lab's namespaces move bytes in each direction, at MTU 1500 and at a jumbo MTU
//! (multi-buffer), and leave the lab as they found it.
//!
//! Needs root: without it the test says why it skips, except under `CI=true`, where it fails.

use std::time::Duration;

use bypass_lab::bulk_floor::{Direction, xdp_stream};
use bypass_lab::testlab::{Lab, lab_available};

/// The jumbo MTU of the demo's jumbo rows: a frame of 17 UMEM frames.
const JUMBO_MTU: u32 = 65000;

/// Return the line `ip -o link show` prints for the lab's bypass-side or peer-side interface.
fn link(lab: &Lab, bypass: bool) -> String {
    if bypass {
        lab.ip_bypass(&["-o", "link", "show", "dev", &lab.bypass_if]).unwrap()
    } else {
        lab.ip_peer(&["-o", "link", "show", "dev", &lab.peer_if]).unwrap()
    }
}

#[test]
fn the_bulk_floor_moves_bytes_each_way_at_both_mtus_and_cleans_up() {
    if !lab_available("the_bulk_floor_moves_bytes_each_way_at_both_mtus_and_cleans_up") {
        return;
    }
    let lab = Lab::create("bfloor").unwrap();
    let (bypass_ns, peer_ns) = (lab.bypass_ns.clone(), lab.peer_ns.clone());
    for mtu in [1500, JUMBO_MTU] {
        for direction in [Direction::PeerToBypass, Direction::BypassToPeer] {
            let r = xdp_stream(&lab, direction, mtu, Duration::from_millis(50), Duration::from_millis(300))
                .unwrap_or_else(|e| panic!("{direction:?} at MTU {mtu}: {e}"));
            let what = format!("{direction:?} at MTU {mtu}: {r:?}");
            assert!(r.frames > 0 && r.gbit_per_s() > 0.0, "no frame arrived in the window: {what}");
            assert_eq!(r.mtu, mtu, "{what}");
            assert_eq!(r.payload, mtu as usize - 28, "UDP payload of an MTU-sized frame: {what}");
            assert!(r.received >= r.frames && r.sent >= r.received, "counts out of order: {what}");
            assert!(r.mode.contains("copy mode"), "{what}");
            assert_eq!(r.mode.contains("multi-buffer"), mtu == JUMBO_MTU, "{what}");
            eprintln!("{direction:?} MTU {mtu}: {:.2} Gbit/s, {} lost of {} sent", r.gbit_per_s(), r.lost(), r.sent);
            // Cleaned up: both programs detached, the MTU back at the lab's.
            for bypass in [true, false] {
                let line = link(&lab, bypass);
                assert!(!line.contains("xdp"), "an XDP program stayed attached: {line}");
                assert!(line.contains(" mtu 1500 "), "the MTU was not set back: {line}");
            }
        }
    }
    drop(lab);
    for ns in [bypass_ns, peer_ns] {
        assert!(!std::path::Path::new(&format!("/var/run/netns/{ns}")).exists(), "namespace {ns} left behind");
    }
}
