; A tc cls_bpf program (direct action) for tests/ecn_kernel.rs, in LLVM IR so that `llc`
; alone builds it (no clang here): mark Congestion Experienced on about one packet in 16
; (bpf_get_prandom_u32, helper 7; bpf_skb_ecn_set_ce, helper 97, which marks only ECT
; packets and leaves the others alone, RFC 3168 5), and let every packet pass (TC_ACT_OK).
; Built with `llc -march=bpf -filetype=obj`; loaded with `tc filter add ... bpf da obj X sec tc`.
;
; Section `tc_quarter` marks one skb in 4, for the egress of a kernel TCP sender: its TCP
; builds GSO super-packets of up to 64 KiB and tc's egress hook runs before they are cut into
; segments (validate_xmit_skb, even with the device's GSO off), so there one mark covers up
; to 45 segments, and a 4 MiB upload is as few as 64 skbs: at one in 16, about 1 run in 60
; would see no mark at all ((15/16)^64); at one in 4, (3/4)^64, about 1 in 10^8.
target datalayout = "e-m:e-p:64:64-i64:64-i128:128-n32:64-S128"
target triple = "bpf"

@_license = global [4 x i8] c"GPL\00", section "license", align 1
@llvm.used = appending global [3 x i8*] [i8* getelementptr inbounds ([4 x i8], [4 x i8]* @_license, i32 0, i32 0), i8* bitcast (i32 (i8*)* @mark to i8*), i8* bitcast (i32 (i8*)* @mark_quarter to i8*)], section "llvm.metadata"

define i32 @mark(i8* %skb) section "tc" {
entry:
  %rand = inttoptr i64 7 to i64 ()*
  %r = call i64 %rand()
  %low = and i64 %r, 15
  %hit = icmp eq i64 %low, 0
  br i1 %hit, label %ce, label %done
ce:
  %set = inttoptr i64 97 to i64 (i8*)*
  %x = call i64 %set(i8* %skb)
  br label %done
done:
  ret i32 0
}

define i32 @mark_quarter(i8* %skb) section "tc_quarter" {
entry:
  %rand = inttoptr i64 7 to i64 ()*
  %r = call i64 %rand()
  %low = and i64 %r, 3
  %hit = icmp eq i64 %low, 0
  br i1 %hit, label %ce, label %done
ce:
  %set = inttoptr i64 97 to i64 (i8*)*
  %x = call i64 %set(i8* %skb)
  br label %done
done:
  ret i32 0
}
