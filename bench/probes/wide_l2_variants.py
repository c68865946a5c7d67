# L2-policy variants of the wide NVFP4 MegaMoE kernel's f16 token scratch (bench/NOTES.md,
# twentieth session): run 166 found that the FC1 token-decode phase's scratch stores alone cost
# the kernel 7-8 % at T = 512 (later traced to the clock: run 167). Each copy below is a real
# candidate (results correct), written into DEST/<name> (default build/wide_l2_variants):
#   st_cs        the decode phases' stores as st.global.cs (streaming: lines likely read once)
#   st_el        the decode phases' stores with an L2::evict_last cache hint
#   st_en        the decode phases' stores with an L2::evict_normal cache hint (explicit default)
#   tok_normal   the producers' token-chunk copies under evict_normal instead of evict_last
#   tok_first    the token-chunk copies under evict_first
#   st_el_tok_normal
# Run 167 measured all of them level or slower. Run the bench on each with
# MEGAMOE_KERNEL_DIR=DEST/<name>.
#   python3 bench/probes/wide_l2_variants.py [DEST]
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kernel_patch import ROOT, WIDE, write_variant  # noqa: E402

VECTOR_MEMORY = os.path.join("megamoe", "ptx", "vector_memory.cuh")
BULK_COPY = os.path.join("megamoe", "ptx", "bulk_copy.cuh")
# Added to vector_memory.cuh: two stores with cache behaviour.
STORES = ('}  // namespace megamoe::device::ptx', '''MEGAMOE_DEVICE void store_global_16_cs(void* p, u32x4 v) {
  asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}

MEGAMOE_DEVICE void store_global_16_hint(void* p, u32x4 v, u64 policy) {
  asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(p), "r"(v.x),
               "r"(v.y), "r"(v.z), "r"(v.w), "l"(policy)
               : "memory");
}

}  // namespace megamoe::device::ptx''')
# Added to bulk_copy.cuh beside its evict_first / evict_last policies.
NORMAL = ('// Orders this thread\'s earlier generic-proxy global writes', '''MEGAMOE_DEVICE u64 l2_evict_normal_policy() {
  u64 policy;
  asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(policy));
  return policy;
}

// Orders this thread's earlier generic-proxy global writes''')
STORE = "          ptx::store_global_16(\n              scratch +"
TOKPOL = "    const u64 token_policy = ptx::l2_evict_last_policy();"


def st_hint(policy_fn):
    # The policy goes in as the store's last operand: rewrite the call's closing "piece);".
    return [(STORE, "          ptx::store_global_16_hint(\n              scratch +"),
            ("              piece);", "              piece, ptx::" + policy_fn + "());")]


def tok(policy_fn):
    return [(TOKPOL, "    const u64 token_policy = ptx::" + policy_fn + "();")]


VARIANTS = {
    "st_cs": [(STORE, "          ptx::store_global_16_cs(\n              scratch +")],
    "st_el": st_hint("l2_evict_last_policy"),
    "st_en": st_hint("l2_evict_normal_policy"),
    "tok_normal": tok("l2_evict_normal_policy"),
    "tok_first": tok("l2_evict_first_policy"),
    "st_el_tok_normal": st_hint("l2_evict_last_policy") + tok("l2_evict_normal_policy"),
}

dest = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", "wide_l2_variants")
for name, edits in VARIANTS.items():
    write_variant(dest, name, {VECTOR_MEMORY: [STORES], BULK_COPY: [NORMAL], WIDE: edits})
