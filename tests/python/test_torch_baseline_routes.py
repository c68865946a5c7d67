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


def route_sets_file(tmp_path, rows, sets=3):
    """A MEGAMOE_BENCH_ROUTES file: one line per (preset, routing, tokens, top_k) row."""
    lines = []
    for preset, routing, tokens, top_k in rows:
        objs = [json.loads(routes_file(tmp_path, tokens, top_k).read_text()) for _ in range(sets)]
        lines.append(json.dumps({"preset": preset, "routing": routing, "tokens": tokens,
                                 "top_k": top_k, "sets": objs}))
    path = tmp_path / "sets.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_route_sets_of_another_top_k_are_refused(tmp_path):
    path = route_sets_file(tmp_path, [("dsv4-flash", "uniform", 2, 6),
                                      ("dsv4-flash", "zipf1.2", 3, 8)])
    rc, lines = run("--preset", "dsv4-flash", "--route-sets", str(path))
    assert rc == 1
    assert "line 2 set 0: top_k 8, the preset's is 6" in lines[0]["error"]


def test_route_sets_without_the_preset_are_refused(tmp_path):
    path = route_sets_file(tmp_path, [("h6144-e256-k8", "uniform", 2, 8)])
    rc, lines = run("--preset", "dsv4-flash", "--route-sets", str(path))
    assert rc == 1
    assert "no row of preset dsv4-flash" in lines[0]["error"]


def test_route_sets_with_a_short_set_are_refused(tmp_path):
    path = route_sets_file(tmp_path, [("dsv4-flash", "masked20", 3, 6)])
    rec = json.loads(path.read_text())
    rec["sets"][1]["topk_idx"].pop()
    path.write_text(json.dumps(rec) + "\n")
    rc, lines = run("--preset", "dsv4-flash", "--route-sets", str(path))
    assert rc == 1
    assert "set 1: 17 ids and 18 weights for 3 tokens of top-6" in lines[0]["error"]


def test_routes_and_route_sets_together_are_refused(tmp_path):
    sets = route_sets_file(tmp_path, [("dsv4-flash", "uniform", 2, 6)])
    single = routes_file(tmp_path, 2, 6)
    rc, lines = run("--preset", "dsv4-flash", "--tokens", "2", "--routes", str(single),
                    "--route-sets", str(sets))
    assert rc == 1 and "give one" in lines[0]["error"]


def test_route_sets_are_timed_per_bench_row(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible to torch")
    path = route_sets_file(tmp_path, [("dsv4-flash", "uniform", 1, 6),
                                      ("h6144-e256-k8", "uniform", 2, 8),
                                      ("dsv4-flash", "masked20", 5, 6)])
    rc, lines = run("--preset", "dsv4-flash", "--route-sets", str(path))
    assert rc == 0
    assert [(l["routing"], l["tokens"], l["routes"], l["sets"]) for l in lines] == [
        ("uniform", 1, "bench", 3), ("masked20", 5, "bench", 3)]
    assert all(l["baseline_us"] > 0 for l in lines)


def test_device_names_the_gpu_and_is_checked(tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU visible to torch")
    path = routes_file(tmp_path, 2, 6)
    last = torch.cuda.device_count() - 1  # `megamoe demo` passes the layer's GPU
    rc, lines = run("--preset", "dsv4-flash", "--tokens", "2", "--routes", str(path),
                    "--device", str(last))
    assert rc == 0 and lines[0]["baseline_us"] > 0
    rc, lines = run("--preset", "dsv4-flash", "--tokens", "2", "--routes", str(path),
                    "--device", str(last + 1))
    assert rc == 1 and "torch sees" in lines[0]["error"]
