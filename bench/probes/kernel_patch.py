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
