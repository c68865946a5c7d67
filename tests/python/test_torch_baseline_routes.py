"""bench/torch_baseline.py --routes: the baseline runs the caller's routing (megamoe demo passes
its own), and a routing that does not fit the asked shape is refused before anything runs."""

import json
import pathlib
import random
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench/torch_baseline.py"


def routes_file(tmp_path, tokens, top_k, experts=256):
    rnd = random.Random()
    idx, w = [], []
    for _ in range(tokens):
        row = rnd.sample(range(experts), top_k)
        idx += [e if rnd.random() > 0.2 else -1 for e in row]
        w += [rnd.random() for _ in row]
    path = tmp_path / "routes.json"
    path.write_text(json.dumps({"tokens": tokens, "top_k": top_k, "topk_idx": idx,
                                "topk_weights": w}))
    return path


def run(*args):
    out = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                         timeout=600)
    return out.returncode, [json.loads(line) for line in out.stdout.splitlines() if line]


@pytest.mark.parametrize("tokens, top_k", [(3, 6), (2, 8)])
def test_mismatched_routes_are_refused(tmp_path, tokens, top_k):
    # dsv4-flash is top-6: a file of 2 tokens or of top-8 does not fit --tokens 3.
    path = routes_file(tmp_path, 2, top_k)
    rc, lines = run("--preset", "dsv4-flash", "--tokens", str(tokens), "--routes", str(path))
    assert rc == 1
    assert "error" in lines[0] and "--routes holds 2 tokens" in lines[0]["error"]


def test_given_routes_are_timed_as_given(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible to torch")
    path = routes_file(tmp_path, 4, 6)
    rc, lines = run("--preset", "dsv4-flash", "--tokens", "4", "--routes", str(path))
    assert rc == 0
    assert lines[0]["routing"] == "given" and lines[0]["baseline_us"] > 0
