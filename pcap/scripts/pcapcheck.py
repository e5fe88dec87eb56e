#!/usr/bin/env python3
"""Print a capture's TCP ladder and check what its scenario must show.

    pcapcheck.py SCENARIO FILE [--quiet]

Pure Python (no tshark needed): reads classic pcap, Ethernet link type, IPv4/TCP.
Verifies IPv4 and TCP checksums of every frame, then the scenario's property
(e.g. for simclose: both FINs sent before either is acknowledged). Exit status 0
if the capture is as required, 1 if not (make-captures.sh then retries).
"""
import struct
import sys

CLIENT = "10.88.0.1"
SERVER = "10.88.0.2"


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def ip4(b):
    return ".".join(str(x) for x in b)


def read_pcap(path):
    with open(path, "rb") as f:
        data = f.read()
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        e = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        e = ">"
    else:
        raise SystemExit("%s: not a classic pcap file" % path)
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    linktype = struct.unpack(e + "I", data[20:24])[0]
    if linktype != 1:
        raise SystemExit("%s: link type %d, want 1 (Ethernet)" % (path, linktype))
    off = 24
    while off + 16 <= len(data):
        ts, tf, incl, orig = struct.unpack(e + "IIII", data[off:off + 16])
        off += 16
        yield ts + tf / (1e9 if nano else 1e6), data[off:off + incl], orig
        off += incl


def parse(path):
    pkts, bad = [], []
    for i, (t, fr, orig) in enumerate(read_pcap(path), 1):
        p = {"n": i, "t": t, "wire": orig}
        etype = struct.unpack("!H", fr[12:14])[0]
        if etype != 0x0800:
            p["other"] = "ethertype 0x%04x" % etype
            pkts.append(p)
            continue
        ip = fr[14:]
        ihl = (ip[0] & 15) * 4
        tot = struct.unpack("!H", ip[2:4])[0]
        if csum(ip[:ihl]) != 0xFFFF:
            bad.append((i, "IP checksum"))
        if ip[9] != 6:
            p["other"] = "IP proto %d" % ip[9]
            pkts.append(p)
            continue
        src, dst = ip4(ip[12:16]), ip4(ip[16:20])
        tcp = ip[ihl:tot]
        pseudo = ip[12:20] + struct.pack("!BBH", 0, 6, len(tcp))
        if csum(pseudo + tcp) != 0xFFFF:
            bad.append((i, "TCP checksum"))
        sport, dport, seq, ack, offflags, win = struct.unpack("!HHIIHH", tcp[:16])
        doff = (offflags >> 12) * 4
        p.update(src=src, dst=dst, sport=sport, dport=dport, seq=seq, ack=ack,
                 flags=offflags & 0x1FF, win=win, len=len(tcp) - doff,
                 opts=parse_opts(tcp[20:doff]), size=len(fr))
        pkts.append(p)
    return pkts, bad


def parse_opts(o):
    out, i = [], 0
    while i < len(o):
        k = o[i]
        if k == 0:
            break
        if k == 1:
            out.append(("nop",))
            i += 1
            continue
        ln = o[i + 1] if i + 1 < len(o) else 2
        body = o[i + 2:i + ln]
        if k == 2:
            out.append(("mss", struct.unpack("!H", body)[0]))
        elif k == 3:
            out.append(("wscale", body[0]))
        elif k == 4:
            out.append(("sackOK",))
        elif k == 5:
            out.append(("sack", [struct.unpack("!II", body[j:j + 8]) for j in range(0, len(body), 8)]))
        elif k == 8:
            out.append(("TS",) + struct.unpack("!II", body))
        else:
            out.append(("opt%d" % k,))
        i += max(ln, 2)
    return out


FLAGS = [(0x02, "S"), (0x10, "."), (0x08, "P"), (0x01, "F"), (0x04, "R"), (0x20, "U")]


def fl(p):
    return "".join(c for b, c in FLAGS if p["flags"] & b)


def has(p, c):
    return bool(p["flags"] & {"S": 2, "F": 1, "R": 4, "A": 16, "P": 8}[c])


def side(p):
    return "C" if p["src"] == CLIENT else "S"


def ladder(pkts):
    """One line per packet with sequence numbers relative to each side's ISN."""
    isn = {}
    for p in pkts:
        if "other" not in p and has(p, "S"):
            isn.setdefault(side(p), p["seq"])
    lines = []
    t0 = pkts[0]["t"] if pkts else 0
    for p in pkts:
        if "other" in p:
            lines.append("%3d %9.6f %s" % (p["n"], p["t"] - t0, p["other"]))
            continue
        me, peer = side(p), ("S" if side(p) == "C" else "C")
        rs = (p["seq"] - isn.get(me, p["seq"])) & 0xFFFFFFFF
        ra = (p["ack"] - isn.get(peer, p["ack"])) & 0xFFFFFFFF
        arrow = "C->S" if me == "C" else "C<-S"
        s = "%3d %9.6f %s [%-3s] seq=%d" % (p["n"], p["t"] - t0, arrow, fl(p), rs)
        if has(p, "A"):
            s += " ack=%d" % ra
        s += " win=%d len=%d" % (p["win"], p["len"])
        o = []
        for opt in p["opts"]:
            if opt[0] == "mss":
                o.append("mss %d" % opt[1])
            elif opt[0] == "wscale":
                o.append("wscale %d" % opt[1])
            elif opt[0] == "sackOK":
                o.append("sackOK")
            elif opt[0] == "sack":
                o.append("sack " + " ".join("%d-%d" % (((a - isn.get(peer, a)) & 0xFFFFFFFF),
                                                      ((b - isn.get(peer, b)) & 0xFFFFFFFF))
                                            for a, b in opt[1]))
            elif opt[0] == "TS" and has(p, "S"):
                o.append("TS")
        if o:
            s += " <" + ",".join(o) + ">"
        lines.append(s)
    return lines


# ------------------------------------------------------------ scenario checks

def tcp_only(pkts):
    return [p for p in pkts if "other" not in p]


def end_of(p):
    """Sequence number just after the segment (FIN and SYN count one)."""
    return (p["seq"] + p["len"] + has(p, "F") + has(p, "S")) & 0xFFFFFFFF


def seq_ge(a, b):
    return ((a - b) & 0xFFFFFFFF) < 0x80000000


def check(sc, pkts):
    t = tcp_only(pkts)
    errs = []
    if len(t) != len(pkts):
        errs.append("non-TCP frames present")
    C = [p for p in t if side(p) == "C"]
    S = [p for p in t if side(p) == "S"]
    fins = {x: [p for p in t if side(p) == x and has(p, "F")] for x in "CS"}
    rsts = [p for p in t if has(p, "R")]
    payload = {x: sum(p["len"] for p in t if side(p) == x) for x in "CS"}

    def first_ack_of(fin, start_idx=0):
        other = "S" if side(fin) == "C" else "C"
        e = end_of(fin)
        for p in t:
            if side(p) == other and has(p, "A") and seq_ge(p["ack"], e):
                return p
        return None

    def four_way(first):
        second = "S" if first == "C" else "C"
        if not fins[first] or not fins[second]:
            return errs.append("missing FIN")
        f1, f2 = fins[first][0], fins[second][0]
        if f1["n"] > f2["n"]:
            return errs.append("%s's FIN is not first" % first)
        a1 = first_ack_of(f1)
        if a1 is None or has(a1, "F"):
            return errs.append("first FIN not acknowledged by a separate pure ACK")
        a2 = first_ack_of(f2)
        if a2 is None or not (f1["n"] < a1["n"] < f2["n"] < a2["n"]):
            errs.append("not FIN, ACK, FIN, ACK")

    if sc != "rst":
        if len(t) < 3 or not (fl(t[0]) == "S" and fl(t[1]) == "S." and has(t[2], "A")
                              and side(t[0]) == "C"):
            errs.append("does not start with SYN, SYN-ACK, ACK")
    if sc not in ("rst", "abort") and rsts:
        errs.append("unexpected RST")

    if sc == "handshake":
        for p in t[:2]:
            kinds = {o[0] for o in p["opts"]}
            miss = {"mss", "sackOK", "TS", "wscale"} - kinds
            if miss:
                errs.append("packet %d lacks %s" % (p["n"], sorted(miss)))
        if payload["C"] or payload["S"]:
            errs.append("data present")
        four_way("C")
    elif sc == "echo":
        if payload["C"] != 3500 or payload["S"] != 3500:
            errs.append("payload C=%d S=%d, want 3500 each" % (payload["C"], payload["S"]))
        if not fins["C"] or not fins["S"] or fins["C"][0]["n"] > fins["S"][0]["n"]:
            errs.append("client should close first")
    elif sc == "close-client":
        four_way("C")
    elif sc == "close-server":
        four_way("S")
    elif sc == "simclose":
        if not fins["C"] or not fins["S"]:
            errs.append("missing FIN")
        else:
            fc, fs = fins["C"][0], fins["S"][0]
            # Crossing FINs: neither FIN acknowledges the other, and nobody
            # acknowledges a FIN before both FINs were on the wire.
            if seq_ge(fc["ack"], end_of(fs)) or seq_ge(fs["ack"], end_of(fc)):
                errs.append("FINs did not cross (one FIN acknowledges the other)")
            last = max(fc["n"], fs["n"])
            for f in (fc, fs):
                a = first_ack_of(f)
                if a is None:
                    errs.append("FIN %d never acknowledged" % f["n"])
                elif a["n"] < last:
                    errs.append("FIN %d acknowledged before both FINs were sent" % f["n"])
            if len(fins["C"]) > 1 or len(fins["S"]) > 1:
                errs.append("FIN retransmitted")
    elif sc == "rst":
        if len(t) != 2 or fl(t[0]) != "S" or side(t[0]) != "C" or fl(t[1]) != ".R" \
                or t[1]["ack"] != end_of(t[0]):
            errs.append("want exactly SYN then RST,ACK (ack = ISN+1)")
    elif sc == "abort":
        cr = [p for p in rsts if side(p) == "C"]
        if not cr:
            errs.append("no RST from the client")
        elif fins["C"] and fins["C"][0]["n"] < cr[0]["n"]:
            errs.append("client sent FIN before RST")
        else:
            before = sum(p["len"] for p in C if p["n"] < cr[0]["n"])
            if before != 1500 + 20000 or cr[0]["seq"] != end_of(C[-2] if C[-1] is cr[0] else C[-1]):
                errs.append("want 3x500 + 20000 bytes, then RST at snd_nxt (%d bytes before)" % before)
            if len(cr) != 1 or cr[0] is not C[-1]:
                errs.append("want exactly one RST, the client's last segment")
            if any(has(p, "R") for p in S):
                errs.append("server sent RST")
        if fins["C"]:
            errs.append("client FIN present")
    elif sc == "zerowin":
        zw = [p for p in S if p["win"] == 0 and not has(p, "R")]
        if not zw:
            errs.append("no zero-window advertisement from the server")
        else:
            z = zw[0]
            # window probes: client segments with no new data after the first zero window,
            # sequence one below what the server has acknowledged
            probes = [p for p in C if p["n"] > z["n"] and p["len"] == 0 and not has(p, "F")
                      and (p["seq"] + 1) & 0xFFFFFFFF == z["ack"]]
            if len(probes) < 2:
                errs.append("fewer than 2 zero-window probes (%d)" % len(probes))
            upd = [p for p in S if p["n"] > z["n"] and p["win"] > 0]
            if not upd:
                errs.append("no window update after the zero window")
        # Linux may add a tail-loss probe (a retransmission) just before the window
        # closes, because the filling receiver delays its ACK: count unique bytes.
        top = max((((p["seq"] + p["len"] - C[0]["seq"]) & 0xFFFFFFFF) - 1 for p in C if p["len"]),
                  default=0)
        if top != 65536:
            errs.append("client data ends at %d, want 65536" % top)
    elif sc == "retrans":
        seen, retx = {}, []
        for p in C:
            if p["len"]:
                k = (p["seq"], p["len"])
                if k in seen:
                    retx.append(p)
                seen[k] = p
        if len(retx) != 1:
            errs.append("want exactly one retransmitted data segment, got %d" % len(retx))
        if payload["C"] != 8 * 1448 + sum(p["len"] for p in retx):
            errs.append("client payload %d" % payload["C"])
    else:
        errs.append("unknown scenario")
    return errs


def main():
    sc, path = sys.argv[1], sys.argv[2]
    quiet = "--quiet" in sys.argv
    pkts, bad = parse(path)
    if not quiet:
        print("\n".join(ladder(pkts)))
    errs = ["frame %d: bad %s" % b for b in bad] + check(sc, pkts)
    for e in errs:
        print("CHECK FAILED (%s): %s" % (sc, e), file=sys.stderr)
    sys.exit(1 if errs else 0)


if __name__ == "__main__":
    main()
