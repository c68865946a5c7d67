# L2-policy variants of the wide NVFP4 MegaMoE kernel's f16 token scratch (bench/NOTES.md,
# twentieth session): run 166 found that the FC1 token-decode phase costs the kernel 7-8 % at
# T = 512 through its scratch stores alone (the copy that loads and decodes but stores nothing is
# as fast as the copy without the phase), far more than the stores' own time. Each copy below is a
# real candidate (results correct), written into DEST/<name> (default build/wide_l2_variants):
#   st_cs        the decode phases' stores as st.global.cs (streaming: lines likely read once)
#   st_el        the decode phases' stores with an L2::evict_last cache hint
#   st_en        the decode phases' stores with an L2::evict_normal cache hint (explicit default)
#   tok_normal   the producers' token-chunk copies under evict_normal instead of evict_last
#   tok_first    the token-chunk copies under evict_first
#   st_el_tok_normal
# Run the bench on each with MEGAMOE_KERNEL_DIR=DEST/<name>.
#   python3 bench/probes/wide_l2_variants.py [DEST]
import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_patch import ROOT, SourceEdit  # noqa: E402

STORE = "          ptx::store_global_16(\n              scratch +"
HELPERS = '''
MEGAMOE_DEVICE void store_global_16_cs(void* p, u32x4 v) {
  asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}

MEGAMOE_DEVICE void store_global_16_hint(void* p, u32x4 v, u64 policy) {
  asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(p), "r"(v.x),
               "r"(v.y), "r"(v.z), "r"(v.w), "l"(policy)
               : "memory");
}

MEGAMOE_DEVICE u64 l2_policy_evict_last() {
  u64 policy;
  asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

MEGAMOE_DEVICE u64 l2_policy_evict_normal() {
  u64 policy;
  asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

MEGAMOE_DEVICE u64 l2_policy_evict_first() {
  u64 policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

}  // namespace megamoe::device::ptx'''
END = "}  // namespace megamoe::device::ptx"
TOKPOL = "    const u64 token_policy = ptx::l2_evict_last_policy();"


def st(fn):
    return (STORE, "          ptx::" + fn + "(\n              scratch +")


def st_hint(policy_fn):
    # The policy goes in as the store's last operand: rewrite the call's closing "piece);".
    return [(STORE, "          ptx::store_global_16_hint(\n              scratch +"),
            ("              piece);", "              piece, ptx::" + policy_fn + "());")]


VARIANTS = {
    "st_cs": [st("store_global_16_cs")],
    "st_el": st_hint("l2_policy_evict_last"),
    "st_en": st_hint("l2_policy_evict_normal"),
    "tok_normal": [(TOKPOL, "    const u64 token_policy = ptx::l2_policy_evict_normal();")],
    "tok_first": [(TOKPOL, "    const u64 token_policy = ptx::l2_policy_evict_first();")],
    "st_el_tok_normal": st_hint("l2_policy_evict_last") +
    [(TOKPOL, "    const u64 token_policy = ptx::l2_policy_evict_normal();")],
}

dest = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "wide_l2_variants")
for name, edits in VARIANTS.items():
    dst = os.path.join(dest, name)
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(os.path.join(ROOT, "kernels"), dst)
    vm = SourceEdit(os.path.join(dst, "megamoe", "ptx", "vector_memory.cuh"))
    vm.sub(END, HELPERS.lstrip("\n"))
    vm.save()
    edit = SourceEdit(os.path.join(dst, "megamoe", "impls", "sm90_nvfp4_mega_moe_wide.cuh"))
    for old, new in edits:
        edit.sub(old, new)
    edit.save()
    print("wrote", dst)
