"""Soak and overload over HTTP, sized for CI: bench/soak.py against a server it starts itself
(the default model): capacity at saturation (10 s), then 60 s at 80 % of it with 10 % of the
streams cut by the client, then 10× the capacity for 15 s (90 s, 15 s and 20 s until 2026-12-03:
shortened for CI's 30 minutes). It asserts what bench/results/soak.md reports for
a 20-minute run: RSS flat after the warm-up (< 1 %), every completed stream well-formed, the KV
pool empty afterwards, bounded memory under overload, fast 503s with Retry-After, admitted
requests within twice the latency of a full server, and a clean exit on SIGTERM.
"""
import json
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_soak_and_overload(pagoda_bin, model_path, tmp_path):
    out = tmp_path / "soak.json"
    p = subprocess.run([sys.executable, str(ROOT / "bench" / "soak.py"), "--pagoda", pagoda_bin,
                        "--model", model_path, "--capacity-seconds", "10",
                        "--soak-seconds", "60", "--warmup", "0.33", "--overload-seconds", "15",
                        "--unloaded-requests", "3", "--json", str(out), "--no-check"],
                       capture_output=True, timeout=600)
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-4000:]
    rep = json.loads(out.read_text())
    print(p.stdout.decode())
    missed = [k for k, v in rep["targets"].items() if not v]
    assert not missed, (missed, p.stderr.decode(errors="replace")[-3000:])
