"""The fair scheduler over HTTP, measured by bench/fairness.py (the openai SDK, the client's own
clock), sized for CI: both tenants backlogged with equal weights and ten times the load on one
side get equal service; weights 3:1 get service 3:1; a light tenant beside a backlogged one gets
a p99 TTFT within twice its p99 TTFT alone. The committed numbers (fair and fcfs side by side,
longer runs) are in bench/results/fairness.md.
"""
import json
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
DURATION, WARMUP = "30", "6"


def run_fairness(pagoda_bin, model_path, out, *args):
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "fairness.py"), "--pagoda",
                        pagoda_bin, "--model", model_path, "--policies", "fair", "--duration",
                        DURATION, "--warmup", WARMUP, "--json", str(out), *args],
                       capture_output=True, timeout=900)
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-3000:]
    print(p.stdout.decode())
    return json.loads(out.read_text())["results"]


@pytest.fixture(scope="module")
def fairness(pagoda_bin, model_path, tmp_path_factory):
    d = tmp_path_factory.mktemp("fairness")
    return run_fairness(pagoda_bin, model_path, d / "shares.json", "--scenario", "equal-10x",
                        "--scenario", "weights-3-1")


def light_tenant(pagoda_bin, model_path, out):
    r = run_fairness(pagoda_bin, model_path, out, "--scenario", "light-b", "--alone", "B",
                     "--calibrate", "10")["light-b"]
    return r["fair"]["B"], r["_alone"]["fair"]["B"]


def service(res, scenario, tenant, policy="fair"):
    s = res[scenario][policy][tenant]
    assert s["errors"] == 0 and s["refused_429"] == 0, s
    return s["service_raw"]


def test_equal_weights_ten_times_the_load(fairness):
    a, b = service(fairness, "equal-10x", "A"), service(fairness, "equal-10x", "B")
    assert a > 0 and b > 0
    assert abs(a - b) <= 0.1 * max(a, b), (a, b)


def test_weights_three_to_one(fairness):
    a, b = service(fairness, "weights-3-1", "A"), service(fairness, "weights-3-1", "B")
    assert abs(a / b - 3.0) <= 0.3, (a, b)


def test_light_tenant_ttft(pagoda_bin, model_path, tmp_path):
    """B at a quarter of the capacity beside A at 2.5 times it: B's p99 TTFT within twice its
    p99 alone. About 15 of B's requests fall in the window, so the p99 is close to the slowest
    one, and client and server share this machine's 2 cores: one slow request in a run is
    noise, so a run that misses is run once more and the check holds if either run meets it
    (both are printed)."""
    runs = []
    for attempt in range(2):
        together, alone = light_tenant(pagoda_bin, model_path, tmp_path / f"light{attempt}.json")
        runs.append((together["ttft_p50"], together["ttft_p99"], alone["ttft_p50"],
                     alone["ttft_p99"], together["ttft_unfinished"]))
        print(f"light-b run {attempt}: B TTFT p50 {runs[-1][0]:.3f} s p99 {runs[-1][1]:.3f} s, "
              f"alone p50 {runs[-1][2]:.3f} s p99 {runs[-1][3]:.3f} s")
        if together["ttft_unfinished"] == 0 and together["ttft_p99"] <= 2 * alone["ttft_p99"]:
            return
    assert False, f"B's p99 TTFT over twice its p99 alone in both runs: {runs}"
