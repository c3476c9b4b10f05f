"""scripts/gpu-check on this machine, which has no GPU: GPU time comes in windows of minutes, so
the script must not meet its first typo there. Run against the CI build (PGD_GPU_PREBUILT=1)
with a stand-in nvidia-smi, it must reach its table with every row, each pagoda command it runs
must parse its arguments and stop only at the missing device, and the CUDA tests' skips must
count as the failure they would be on a GPU machine."""
import os
import pathlib
import subprocess

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

STAND_IN_SMI = """#!/bin/sh
case "$*" in
  -L) echo "GPU 0: Stand-in GPU (UUID: GPU-0)" ;;
  *compute_cap*) echo "9.0" ;;
  *driver_version*) echo "0.0" ;;
  *name*) echo "Stand-in GPU" ;;
  *) echo "stand-in nvidia-smi" ;;
esac
"""

# a row of each kind the table must hold (the A/B rows' switches, the sampled and prefill rows)
ROWS = ("| batch-1 decode, 1k context, CUDA graphs |", "--enforce-eager", "--batch-invariant",
        "--no-decode-gemv", "PGD_CUDA_PDL=0", "PGD_CUDA_GEMV_EARLY=0", "PGD_CUDA_DECODE_TC=0",
        "sampled at temperature 1 (", "top-k 50, top-p 0.9", "| prefill, 2k-token prompt (after",
        "PGD_CUDA_ATTN_TC_WIDE=0", "cold (--warmup 0", "256 x (1024 in, 128 out)",
        "concurrent streams", "| mixture of experts qwen3-30b-a3b (dummy",
        "| 8-bit weights (--gpu-weights q8_0", "| 4-bit weights (--gpu-weights q4",
        "| llama-3-70b in 4-bit weights", "peer PyTorch",
        "pagoda serve on the GPU", "| targets:")


# the rows made by gpu-check's ab(), which a PGD_GPU_TAIL=1 rerun leaves out
AB_ROWS = ("PGD_CUDA_PDL=0", "PGD_CUDA_GEMV_EARLY=0", "PGD_CUDA_DECODE_TC=0",
           "sampled at temperature 1 (", "top-k 50, top-p 0.9")

# the benchmark runs (their stderr files, build.<name>.err) of a whole run and of a rerun's
# PGD_GPU_TAIL=1: the targets' rows, then llama-3-70b (the peer and serve write other files)
TAIL_RUNS = {"decode", "prefill", "prefill-wide", "prefill-cold", "q4big"}


@pytest.mark.parametrize("tail", [False, True], ids=["whole", "tail"])
def test_gpu_check_without_a_gpu(pagoda_bin, tmp_path, tail):
    build = pathlib.Path(pagoda_bin).parent
    cache = build / "CMakeCache.txt"
    if not cache.exists() or "PGD_CUDA:BOOL=ON" not in cache.read_text():
        pytest.skip("a build without the CUDA backend")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(STAND_IN_SMI)
    smi.chmod(0o755)
    link = tmp_path / "build"  # the script's logs go beside it: build.*.log
    link.symlink_to(build)
    out = tmp_path / "out"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "BUILD": str(link),
           "PGD_GPU_PREBUILT": "1", "PGD_GPU_SANITIZE": "0", "PGD_GPU_NCU": "0",
           "OUT": str(out)}
    for k in ("PGD_GPU_QUICK", "PGD_GPU_SKIP_BENCH", "PGD_GPU_TAIL", "PGD_GPU_CTEST"):
        env.pop(k, None)
    if tail:  # a rerun: the targets' rows and what a first run's budget left, one CUDA test
        env.update(PGD_GPU_TAIL="1", PGD_GPU_CTEST="test_cuda_ops")
    p = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-check")], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=600)
    assert "using the build in" in p.stderr, p.stderr[-3000:]
    assert "unbound variable" not in p.stderr and "syntax error" not in p.stderr, p.stderr
    table = (out / "gpu-check.md").read_text()
    rows = [r for r in table.splitlines() if r.startswith("| ")]
    # (a tail run's table has no A/B rows: it ran none)
    want = [w for w in ROWS if not (tail and w in AB_ROWS)]
    missing = [w for w in want if not any(w in r for r in rows)]
    assert not missing, (missing, table)
    if tail:
        assert not [w for w in AB_ROWS if any(w in r for r in rows)], table
    # exit 77 of every CUDA test is a failure on a GPU machine: said, and the exit status is 1
    assert "skipped**: the tests saw no GPU" in table and p.returncode == 1, p.stderr[-3000:]
    ctest = (tmp_path / "build.ctest.log").read_text()
    assert ("out of 1\n" in ctest) == tail, ctest[-1000:]  # PGD_GPU_CTEST: that test alone
    # every pagoda run (each benchmark row) stopped at the device, none at its arguments
    runs = [f for f in tmp_path.glob("build.*.err")
            if f.name.split(".")[1].split("-")[0] in ("decode", "prefill", "offline", "c1",
                                                      "c16", "c64", "moe", "q8", "q4",
                                                      "q4big")]
    if tail:
        assert {f.name.split(".")[1] for f in runs} == TAIL_RUNS, sorted(f.name for f in runs)
    else:
        assert len(runs) >= 21, sorted(f.name for f in runs)
    for f in runs:
        text = f.read_text()
        assert "no CUDA device is visible" in text, (f.name, text[-500:])
        assert "unknown argument" not in text and "usage:" not in text, (f.name, text[-500:])
