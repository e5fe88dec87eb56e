#!/usr/bin/env bash
# Make the reference captures in pcap/ from Linux kernel TCP peers.
#
#   sudo pcap/scripts/make-captures.sh            # all scenarios
#   sudo pcap/scripts/make-captures.sh echo rst   # only some (names below)
#
# Lab: two network namespaces cap-<pid>-a (client, 10.88.0.1/24) and cap-<pid>-b
# (server, 10.88.0.2/24) joined by the veth pair cap-<pid>-a / cap-<pid>-b; IPv6
# disabled in both, static ARP entries (no ARP in the captures), fixed MACs,
# offloads off on both ends. tcpdump runs on the client's end (cap-<pid>-a).
# Everything is removed again on every exit path (trap). Needs root, iproute2,
# ethtool, tcpdump, python3; nft for the loss scenario; tshark optional (extra checks).
# KEEP_FAILED=DIR keeps captures of attempts that failed their check (debugging).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$(dirname "$HERE")}
PY=${PYTHON:-$(command -v python3)}
PY=$("$PY" -c 'import sys; print(sys.executable)')   # skip pyenv shims inside netns exec
ID=$$
NSA=cap-$ID-a NSB=cap-$ID-b          # namespaces
IFA=cap-$ID-a IFB=cap-$ID-b          # veth ends (IFA in NSA, IFB in NSB)
MACA=02:88:00:00:00:01 MACB=02:88:00:00:00:02
IPA=10.88.0.1 IPB=10.88.0.2
TMP=$(mktemp -d /tmp/cap-$ID.XXXXXX)

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    for p in $(jobs -p); do kill "$p" 2>/dev/null || true; done   # our own background jobs only
    wait 2>/dev/null || true
    ip netns del "$NSA" 2>/dev/null || true
    ip netns del "$NSB" 2>/dev/null || true
    ip link del "$IFA" 2>/dev/null || true          # only if it never got moved
    rm -rf "$TMP"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

log() { echo "[make-captures] $*" >&2; }
ina() { ip netns exec "$NSA" "$@"; }
inb() { ip netns exec "$NSB" "$@"; }

need() { command -v "$1" >/dev/null || { log "missing $1 (apt-get install -y --no-install-recommends $2)"; exit 1; }; }
need ip iproute2; need ethtool ethtool; need tcpdump tcpdump
[ "$(id -u)" = 0 ] || { log "must run as root"; exit 1; }

# ------------------------------------------------------------------ lab
lab_up() {
    ip netns add "$NSA"
    ip netns add "$NSB"
    for ns in "$NSA" "$NSB"; do
        ip netns exec "$ns" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 \
            net.ipv6.conf.default.disable_ipv6=1 net.ipv6.conf.lo.disable_ipv6=1
        ip -n "$ns" link set lo up
    done
    ip -n "$NSA" link add "$IFA" address $MACA type veth peer name "$IFB" netns "$NSB" address $MACB
    ip -n "$NSA" addr add $IPA/24 dev "$IFA"
    ip -n "$NSB" addr add $IPB/24 dev "$IFB"
    ina ethtool -K "$IFA" tx off tso off gso off gro off >/dev/null
    inb ethtool -K "$IFB" tx off tso off gso off gro off >/dev/null
    ip -n "$NSA" neigh replace $IPB lladdr $MACB dev "$IFA" nud permanent
    ip -n "$NSB" neigh replace $IPA lladdr $MACA dev "$IFB" nud permanent
    ip -n "$NSA" link set "$IFA" up
    ip -n "$NSB" link set "$IFB" up
    log "lab up: $NSA/$IFA $IPA <-> $NSB/$IFB $IPB"
}

# ------------------------------------------------------------------ capture helpers
CAP_PID=
cap_start() {   # cap_start FILE
    : >"$TMP/tcpdump.log"
    # started directly (not via a shell function) so that $! is tcpdump itself
    ip netns exec "$NSA" tcpdump -i "$IFA" -w "$1" -U --immediate-mode -nn -Z root >"$TMP/tcpdump.log" 2>&1 &
    CAP_PID=$!
    for _ in $(seq 100); do
        grep -q "listening on" "$TMP/tcpdump.log" && return 0
        sleep 0.05
    done
    log "tcpdump did not start:"; cat "$TMP/tcpdump.log" >&2; exit 1
}
cap_stop() {
    sleep 0.5                         # trailing ACKs / TIME_WAIT chatter
    # SIGTERM, not SIGINT: background jobs of a non-interactive shell ignore SIGINT
    kill -TERM "$CAP_PID"; wait "$CAP_PID" || true
}

SRV_PID=
server_start() {   # server_start SCENARIO PORT [extra args]
    local sc=$1 port=$2; shift 2
    rm -f "$TMP/ready"
    ip netns exec "$NSB" timeout 30 "$PY" "$HERE/peer.py" server "$sc" --port "$port" --ready "$TMP/ready" "$@" &
    SRV_PID=$!
    for _ in $(seq 200); do [ -e "$TMP/ready" ] && return 0; sleep 0.02; done
    log "server did not start"; exit 1
}
client_run() {     # client_run SCENARIO PORT CPORT [extra args]
    local sc=$1 port=$2 cport=$3; shift 3
    ina timeout 30 "$PY" "$HERE/peer.py" client "$sc" --addr $IPB --port "$port" --cport "$cport" "$@"
}

# ------------------------------------------------------------------ scenarios
# name  -> file, server port
declare -A FILE=(
    [handshake]=handshake-options.pcap [echo]=echo-data.pcap
    [close-client]=close-client-first.pcap [close-server]=close-server-first.pcap
    [simclose]=simultaneous-close.pcap [rst]=rst-closed-port.pcap
    [abort]=abort-mid-stream.pcap [zerowin]=zero-window.pcap
    [retrans]=retransmission-after-loss.pcap )
declare -A PORT=( [handshake]=5001 [echo]=5002 [close-client]=5003 [close-server]=5004
    [simclose]=5005 [rst]=5006 [abort]=5007 [zerowin]=5008 [retrans]=5009 )
declare -A TRIES=( [simclose]=40 )
ORDER=(handshake echo close-client close-server simclose rst abort zerowin retrans)

run_one() {   # run_one SCENARIO ATTEMPT PCAPFILE
    local sc=$1 n=$2 f=$3 port=${PORT[$1]} cport=$((40000 + ${PORT[$1]} % 100 * 100 + $2))
    case $sc in
    rst)
        cap_start "$f"
        client_run rst "$port" "$cport"          # nobody listens on $port
        cap_stop ;;
    simclose)
        head -c 3 /dev/zero >"$TMP/sync"
        server_start simclose "$port" --sync "$TMP/sync"
        cap_start "$f"
        client_run simclose "$port" "$cport" --sync "$TMP/sync"
        wait "$SRV_PID"
        cap_stop ;;
    retrans)
        need nft nftables
        inb nft delete table ip capdrop 2>/dev/null || true
        # Loss: at the receiver's ingress (prerouting, before TCP) drop the first
        # segment whose payload starts with "CHUNK-03" exactly once (the source
        # address goes into a dynamic set, the next match is accepted). The
        # capture on the sender's veth end sees the original and the retransmission.
        inb nft -f - <<EOF
table ip capdrop {
    set dropped { type ipv4_addr; flags dynamic; }
    chain pre {
        type filter hook prerouting priority raw; policy accept;
        ip saddr @dropped accept
        tcp dport $port @ih,0,64 0x$(printf 'CHUNK-03' | od -An -tx1 | tr -d ' \n') add @dropped { ip saddr } counter drop
    }
}
EOF
        server_start retrans "$port"
        cap_start "$f"
        client_run retrans "$port" "$cport"
        wait "$SRV_PID"
        cap_stop
        inb nft list chain ip capdrop pre | grep -o 'counter packets [0-9]*' >&2 || true
        inb nft delete table ip capdrop ;;
    *)
        server_start "$sc" "$port"
        cap_start "$f"
        client_run "$sc" "$port" "$cport"
        wait "$SRV_PID"
        cap_stop ;;
    esac
}

tshark_checks() {   # extra checks if tshark is installed
    local f=$1 sc=$2 bad
    command -v tshark >/dev/null || return 0
    bad=$(tshark -r "$f" -o tcp.check_checksum:TRUE -o ip.check_checksum:TRUE \
        -Y 'tcp.checksum.status == "Bad" || ip.checksum.status == "Bad"' 2>/dev/null)
    [ -z "$bad" ] || { log "tshark: bad checksums in $f"; echo "$bad" >&2; return 1; }
    case $sc in
    zerowin)
        [ -n "$(tshark -r "$f" -Y tcp.analysis.zero_window 2>/dev/null)" ] ||
            { log "tshark: no tcp.analysis.zero_window"; return 1; } ;;
    retrans)
        [ -n "$(tshark -r "$f" -Y 'tcp.analysis.retransmission || tcp.analysis.fast_retransmission' 2>/dev/null)" ] ||
            { log "tshark: no retransmission flagged"; return 1; } ;;
    esac
}

main() {
    local list=("$@"); [ ${#list[@]} -gt 0 ] || list=("${ORDER[@]}")
    for sc in "${list[@]}"; do [ -n "${FILE[$sc]:-}" ] || { log "unknown scenario $sc (know: ${ORDER[*]})"; exit 2; }; done
    mkdir -p "$OUT"
    lab_up
    for sc in "${list[@]}"; do
        local ok=0 tries=${TRIES[$sc]:-3} f="$TMP/${FILE[$sc]}"
        for n in $(seq 1 "$tries"); do
            rm -f "$f"
            run_one "$sc" "$n" "$f"
            if "$PY" "$HERE/pcapcheck.py" "$sc" "$f" --quiet && tshark_checks "$f" "$sc"; then
                ok=1; break
            fi
            log "$sc: attempt $n not as required, retrying"
            if [ -n "${KEEP_FAILED:-}" ]; then mkdir -p "$KEEP_FAILED"; cp "$f" "$KEEP_FAILED/$n-${FILE[$sc]}"; fi
        done
        [ $ok = 1 ] || { log "$sc: giving up after $tries attempts"; exit 1; }
        mv "$f" "$OUT/${FILE[$sc]}"
        log "$sc: ${FILE[$sc]} ok (attempt $n, $(stat -c %s "$OUT/${FILE[$sc]}") bytes)"
    done
}

main "$@"
