# Shared by the probes that instrument a kernel (wide_wait_accounting.py, barrier_check.py): copy
# the repository's kernels/ to a destination (the script's first argument, else build/<default>)
# and edit a file of the copy by exact replacements, each of which must match a given number of
# times -- a kernel change that moves a pattern stops the script with the pattern it missed.
import os
import shutil
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def copy_kernels(default_name):
    dst = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build", default_name)
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(os.path.join(ROOT, "kernels"), dst)
    return dst


class SourceEdit:
    """A source file's text; sub() replaces a pattern that must occur exactly `count` times."""

    def __init__(self, path):
        self.path = path
        with open(path) as f:
            self.text = f.read()

    def sub(self, old, new, count=1):
        c = self.text.count(old)
        if c != count:
            sys.exit(f"{os.path.basename(self.path)}: expected {count} of {old!r}, found {c}")
        self.text = self.text.replace(old, new)

    def save(self):
        with open(self.path, "w") as f:
            f.write(self.text)


WIDE = os.path.join("megamoe", "impls", "sm90_nvfp4_mega_moe_wide.cuh")


def write_variant(dest, name, edits_by_file):
    """A copy of the repository's kernels/ at dest/name with each file's (old, new) edits
    applied ({path under kernels/: [(old, new), ...]})."""
    dst = os.path.join(dest, name)
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(os.path.join(ROOT, "kernels"), dst)
    for path, edits in edits_by_file.items():
        edit = SourceEdit(os.path.join(dst, path))
        for old, new in edits:
            edit.sub(old, new)
        edit.save()
    print("wrote", dst)
    return dst


def timeline_source(name, marks, tag, with_rank=False):
    """CUDA source of a per-CTA %globaltimer timeline (ep_timeline.py, start_timeline.py): the marks
    g_<name>[2][1024][marks] of launch n in buffer n & 1, so that launch n + 1 reads launch n's
    complete marks while it writes its own; per-CTA launch counters g_<name>_launch / g_<name>_cur;
    and <name>_print(n, [rank,] nctas), with which CTA 0's thread 0 prints at launch 101 one line
    "<tag> [rank] mark min median max" per mark (us from the earliest CTA's mark 0) and, with a
    rank, "<tag>_T0 rank ns" (that mark on the GPU's clock, so that two GPUs' lines align)."""
    nl = "\\n"  # a newline escape inside the CUDA printf formats
    rank_param = "int rank, " if with_rank else ""
    rank_fmt = "%d " if with_rank else ""
    rank_val = "rank, " if with_rank else ""
    t0_line = f'  printf("{tag}_T0 %d %llu{nl}", rank, t0);\n' if with_rank else ""
    return (f"__device__ unsigned long long g_{name}[2][1024][{marks}];\n"
            f"__device__ unsigned g_{name}_launch[1024];\n"
            f"__device__ unsigned g_{name}_cur[1024];\n"
            f"__device__ __noinline__ void {name}_print(unsigned n, {rank_param}int nctas) {{\n"
            "  if (threadIdx.x != 0 || blockIdx.x != 0 || n != 101u) return;\n"
            "  const unsigned b = (n - 1u) & 1u;\n"
            "  unsigned long long t0 = ~0ull;\n"
            f"  for (int c = 0; c < nctas; ++c) t0 = min(t0, g_{name}[b][c][0]);\n"
            + t0_line +
            f"  for (int j = 0; j < {marks}; ++j) {{\n"
            "    unsigned long long lo = ~0ull, hi = 0, med = 0;\n"
            "    for (int c = 0; c < nctas; ++c) {\n"
            f"      const unsigned long long v = g_{name}[b][c][j];\n"
            "      lo = min(lo, v);\n"
            "      hi = max(hi, v);\n"
            "      int below = 0, equal = 0;\n"
            "      for (int d = 0; d < nctas; ++d) {\n"
            f"        below += g_{name}[b][d][j] < v ? 1 : 0;\n"
            f"        equal += g_{name}[b][d][j] == v ? 1 : 0;\n"
            "      }\n"
            "      if (below <= nctas / 2 && nctas / 2 < below + equal) med = v;\n"
            "    }\n"
            f'    printf("{tag} {rank_fmt}%d %.2f %.2f %.2f{nl}", {rank_val}j, (lo - t0) * 1e-3,\n'
            "           (med - t0) * 1e-3, (hi - t0) * 1e-3);\n"
            "  }\n"
            "}\n")
