# SASS of the kernels in a megamoe JIT disk cache (MEGAMOE_CACHE_DIR, e.g. filled by
# `megamoe precompile`), with a size and opcode count of every loop that issues MMAs -- how the
# nineteenth session counted the wide kernel's instructions per block and per epilogue group
# (bench/NOTES.md). cuobjdump and the nvdisasm it runs come from NVIDIA's wheels
# (requirements-sass.txt), installed by this script into build/tools on first use when no
# cuobjdump is on PATH.
#   python3 bench/probes/jit_sass.py CACHE_DIR [--name REGEX] [--out DIR] [--max-loop N]
import argparse
import collections
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(ROOT, "build", "tools")
REQUIREMENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "requirements-sass.txt")
MAGIC = b"megamoe-jit-cache 1\n"  # src/jit/disk_cache.cpp owns the format


def cuobjdump():
    """cuobjdump with its nvdisasm findable (both on PATH, or the wheels' copies)."""
    found = shutil.which("cuobjdump")
    if found and shutil.which("nvdisasm"):
        return found
    bin_dir = os.path.join(TOOLS, "nvidia", "cu13", "bin")
    if not all(os.path.exists(os.path.join(bin_dir, t)) for t in ("cuobjdump", "nvdisasm")):
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", TOOLS, "-r",
                        REQUIREMENTS], check=True)
    for t in ("cuobjdump", "nvdisasm"):
        os.chmod(os.path.join(bin_dir, t), 0o755)
    os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    return os.path.join(bin_dir, "cuobjdump")


def read_entry(path):
    """(header fields, cubin bytes) of one cache file, or None if it is not a cache entry; stops
    on an entry this reader does not understand (another format version, a malformed header)."""
    with open(path, "rb") as f:
        data = f.read()
    if not data.startswith(b"megamoe-jit-cache "):
        return None
    if not data.startswith(MAGIC):
        sys.exit(f"{path}: a cache format this script does not read (src/jit/disk_cache.cpp)")
    # Header lines "field value" up to "end" (src/jit/disk_cache.cpp), then the cubin, then the log.
    end = data.find(b"\nend\n")
    if end < 0:
        sys.exit(f"{path}: no end of header (src/jit/disk_cache.cpp)")
    fields = {}
    for line in data[len(MAGIC):end].split(b"\n"):
        key, _, value = line.partition(b" ")
        fields[key.decode()] = value.decode(errors="replace")
    start = end + len(b"\nend\n")
    cubin = data[start:start + int(fields.get("cubin_bytes", "0"))]
    if not cubin.startswith(b"\x7fELF"):
        sys.exit(f"{path}: the header's cubin_bytes do not lead to an ELF image")
    if hashlib.sha256(cubin).hexdigest() != fields.get("cubin_sha256"):
        sys.exit(f"{path}: cubin does not match its sha256")
    return fields, cubin


def loops(sass):
    """Backward branches that enclose an MMA: (start, end, instruction count, opcode counter)."""
    ins = []
    for line in sass.splitlines():
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m:
            ins.append((int(m.group(1), 16), m.group(2)))
    out = []
    for addr, text in ins:
        if "BRA" not in text:
            continue
        target = re.search(r"0x([0-9a-f]+)", text)
        if not target or int(target.group(1), 16) >= addr:
            continue
        body = [t for a, t in ins if int(target.group(1), 16) <= a <= addr]
        ops = collections.Counter(
            (t.split()[1] if t.startswith("@") else t.split()[0]).split(".")[0] for t in body)
        if ops["HMMA"] or ops["HGMMA"]:
            out.append((int(target.group(1), 16), addr, len(body), ops))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("cache_dir")
    ap.add_argument("--name", default="", help="regex on the kernel's name or lowered name")
    ap.add_argument("--out", default="", help="directory for the .sass files")
    ap.add_argument("--max-loop", type=int, default=4000,
                    help="loops of more instructions (whole phases) are not listed")
    args = ap.parse_args()
    tool = cuobjdump()
    for file in sorted(os.listdir(args.cache_dir)):
        entry = read_entry(os.path.join(args.cache_dir, file))
        if entry is None:
            continue
        fields, cubin = entry
        label = fields.get("name", "") + " " + fields.get("lowered_name", "")
        if args.name and not re.search(args.name, label):
            continue
        with tempfile.NamedTemporaryFile(suffix=".cubin") as tmp:
            tmp.write(cubin)
            tmp.flush()
            sass = subprocess.run([tool, "-sass", tmp.name], check=True, capture_output=True,
                                  text=True).stdout
        print(f"== {fields.get('name')} {fields.get('lowered_name')}: "
              f"{fields.get('registers')} registers, spills {fields.get('spill_bytes')} bytes")
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, fields["key"][:16] + ".sass"), "w") as f:
                f.write(sass)
        for start, end, n, ops in loops(sass):
            if n > args.max_loop:
                continue
            top = ", ".join(f"{k} {v}" for k, v in ops.most_common(10))
            print(f"  loop {start:#x}..{end:#x}: {n} instructions ({top})")


if __name__ == "__main__":
    main()
