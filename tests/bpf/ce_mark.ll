; A tc cls_bpf program (direct action) for tests/ecn_kernel.rs, in LLVM IR so that `llc`
; alone builds it (no clang here): mark Congestion Experienced on about one packet in 16
; (bpf_get_prandom_u32, helper 7; bpf_skb_ecn_set_ce, helper 97, which marks only ECT
; packets and leaves the others alone, RFC 3168 5), and let every packet pass (TC_ACT_OK).
; Built with `llc -march=bpf -filetype=obj`; loaded with `tc filter add ... bpf da obj X sec tc`.
target datalayout = "e-m:e-p:64:64-i64:64-i128:128-n32:64-S128"
target triple = "bpf"

@_license = global [4 x i8] c"GPL\00", section "license", align 1
@llvm.used = appending global [2 x i8*] [i8* getelementptr inbounds ([4 x i8], [4 x i8]* @_license, i32 0, i32 0), i8* bitcast (i32 (i8*)* @mark to i8*)], section "llvm.metadata"

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
