"""Serving and benchmarking without a model file: `--load-format dummy --model-preset NAME`
(the shapes of a published model, deterministic dummy weights, a byte-level tokenizer). This is
how GPU benchmarks run without a model hub; here it runs on the CPU."""
import glob
import json
import os
import re
import subprocess
import sys

import pytest
from openai import OpenAI

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_serve_dummy_preset(start_server):
    s = start_server("--load-format", "dummy", "--model-preset", "smollm2-135m", model=False)
    st, _, models = s.request("GET", "/v1/models")
    assert st == 200
    assert [m["id"] for m in json.loads(models)["data"]] == ["smollm2-135m"]
    client = OpenAI(base_url=f"http://{s.host}:{s.port}/v1", api_key="unused")
    a = client.chat.completions.create(model="smollm2-135m", max_tokens=8, temperature=0,
                                       messages=[{"role": "user", "content": "Hello"}])
    b = client.chat.completions.create(model="smollm2-135m", max_tokens=8, temperature=0,
                                       messages=[{"role": "user", "content": "Hello"}])
    assert a.usage.completion_tokens >= 1
    assert a.choices[0].message.content == b.choices[0].message.content  # deterministic
    stream = client.completions.create(model="smollm2-135m", prompt="abc", max_tokens=5,
                                       temperature=0, stream=True, extra_body={"ignore_eos": True})
    text = "".join(c.choices[0].text for c in stream if c.choices)
    assert text.count("<t") == 5  # five plain tokens of the dummy vocabulary
    assert "KV blocks" in s.log() and "smollm2-135m" in s.log()
    # the backend, and why --device auto (the default) took the CPU when it did
    assert re.search(r"; (cuda backend \(cuda:\d+, .+\)|cpu backend \(--device auto: "
                     r"(no CUDA device is visible: .+|this build has no CUDA backend)\)), steps of",
                     s.log()), s.log()


def test_bench_dummy_preset(run_pagoda):
    out = json.loads(run_pagoda("bench", "--load-format", "dummy", "--model-preset",
                                "smollm2-135m", "--batch", "1,4", "--prompt-len", "16",
                                "--gen-len", "8", "--json").stdout)
    assert [r["batch"] for r in out] == [1, 4]
    assert all(r["prefill_tokens_per_s"] > 0 and r["decode_tokens_per_s"] > 0 for r in out)
    online = json.loads(run_pagoda("bench", "--model-preset", "smollm2-135m", "--num-prompts", 4,
                                   "--concurrency", 2, "--prompt-len", 16, "--gen-len", 8,
                                   "--json").stdout)
    assert online["completed"] == 4 and online["failed"] == 0


def test_bench_sampling(run_pagoda):
    """bench samples as a request would when asked (what sampling costs a step: on a GPU the
    device sampler's top-p path), reports what it ran, and refuses bad values before loading."""
    out = json.loads(run_pagoda("bench", "--model-preset", "smollm2-135m", "--batch", "2",
                                "--prompt-len", 16, "--gen-len", 8, "--temperature", "0.7",
                                "--top-p", "0.9", "--top-k", 50, "--json").stdout)
    assert [(r["temperature"], r["top_p"], r["top_k"]) for r in out] == [(0.7, 0.9, 50)]
    assert out[0]["decode_tokens_per_s"] > 0
    online = json.loads(run_pagoda("bench", "--model-preset", "smollm2-135m", "--num-prompts", 3,
                                   "--prompt-len", 16, "--gen-len", 6, "--temperature", 1,
                                   "--min-p", "0.05", "--json").stdout)
    assert online["completed"] == 3 and online["failed"] == 0
    assert (online["temperature"], online["min_p"]) == (1, 0.05)
    greedy = run_pagoda("bench", "--model-preset", "smollm2-135m", "--batch", 1, "--prompt-len",
                        8, "--gen-len", 2).stdout
    assert b"tokens: greedy" in greedy
    for flag, value, words in (("--top-p", "0", b"top_p must be in (0, 1]"),
                               ("--temperature", "-1", b"temperature"),
                               ("--top-k", "x", b"--top-k")):
        p = run_pagoda("bench", "--model-preset", "smollm2-135m", flag, value, check=False)
        assert p.returncode == 2 and words in p.stderr, (flag, p.stderr)
        assert b"on the CPU" not in p.stderr  # refused before the model was loaded


def test_bench_warmup(run_pagoda):
    """Offline bench times the steady state: untimed warm-up runs of the first batch size first
    (default 1; --warmup 0 none), said on stderr and in the JSON; the warm-up is a real run (a KV
    cache too small for its prompt fails it, by name); --warmup is refused past 100. The online
    mode runs serve's warm-up instead (said on stderr and in the JSON; --warmup 0: none; more
    than 1 refused), which leaves nothing in the prefix cache and no request counted."""
    args = ("bench", "--model-preset", "smollm2-135m", "--batch", "2,1", "--prompt-len", 16,
            "--gen-len", 4)
    p = run_pagoda(*args, "--json")
    out = json.loads(p.stdout)
    assert [(r["batch"], r["warmup"]) for r in out] == [(2, 1), (1, 1)]
    m = re.search(rb"1 warm-up run \(batch 2, 16 \+ 3 tokens\) in ([0-9.]+) s", p.stderr)
    assert m and float(m.group(1)) > 0, p.stderr
    p = run_pagoda(*args, "--warmup", 0, "--json")
    assert [r["warmup"] for r in json.loads(p.stdout)] == [0, 0] and b"warm-up" not in p.stderr
    assert b"; 3 warm-up runs" in run_pagoda(*args, "--warmup", 3).stdout
    p = run_pagoda("bench", "--model-preset", "smollm2-135m", "--batch", 1, "--prompt-len", 4000,
                   "--gen-len", 2, "--kv-cache-mb", 1, check=False)
    assert p.returncode == 1 and b"warm-up, batch 1: the KV cache is too small" in p.stderr
    online = ("bench", "--model-preset", "smollm2-135m", "--num-prompts", 3, "--prompt-len", 16,
              "--gen-len", 4, "--json")
    p = run_pagoda(*online)
    out = json.loads(p.stdout)
    assert out["warmup"] == 1 and out["completed"] == 3 and out["prompt_tokens"] == 48, out
    assert out["prefix_hit_tokens"] == 0 and out["output_tokens"] == 12, out
    assert re.search(rb"warm-up \(serve's\): 2 runs, 6 steps, 88 tokens in [0-9.]+ s", p.stderr)
    p = run_pagoda(*online, "--warmup", 0)
    assert json.loads(p.stdout)["warmup"] == 0 and b"warm-up" not in p.stderr
    for extra, words in ((("--warmup", 101), b"0 to 100"),
                         (("--num-prompts", 2, "--warmup", 2), b"--warmup 0 or 1")):
        p = run_pagoda("bench", "--model-preset", "smollm2-135m", *extra, check=False)
        assert p.returncode == 2 and words in p.stderr, p.stderr


def test_dummy_needs_a_preset(run_pagoda):
    p = run_pagoda("generate", "--load-format", "dummy", "--prompt", "x", check=False)
    assert p.returncode == 2 and b"--model-preset" in p.stderr
    p = run_pagoda("generate", "--model-preset", "gpt-5", "--prompt", "x", check=False)
    assert p.returncode == 1 and b"no model preset 'gpt-5'" in p.stderr
    assert b"llama-3-8b" in p.stderr


def test_serve_smoke_script(pagoda_bin):
    """scripts/serve-smoke, what scripts/gpu-check runs against `serve` on a GPU, passes here on
    the CPU (so a GPU session never finds it broken) and reports its measurements."""
    p = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "serve-smoke"), pagoda_bin,
                        "--device", "cpu", "--load-format", "dummy", "--model-preset",
                        "smollm2-135m"], capture_output=True, text=True, timeout=300)
    out = json.loads(p.stdout)
    assert p.returncode == 0 and out["failures"] == [], out
    assert out["concurrent_ok"] == 16 and out["stream_chunks"] >= 2 and out["exit_status"] == 0
    assert out["chat_tokens"] == 16 and out["metrics_series"] > 0
    assert out["embedding_dim"] == 576 and out["embedding_cos_alone"] > 0.999, out
    assert 0 <= out["warmup_s"] <= out["ready_s"], out


def test_cuda_build_starts_without_cuda_libraries(pagoda_bin):
    """A build with the CUDA backend runs where CUDA is not installed (a CPU-only machine, a
    container without the GPU runtime): it links the CUDA runtime statically, opens cuBLASLt on
    first use and the driver through the runtime, so it needs no CUDA library at start, and
    `--device auto` takes the CPU and says why. Run here through the dynamic loader told to use
    only the directories of the binary's own libraries that hold no CUDA library."""
    syms = subprocess.run(["nm", pagoda_bin], capture_output=True, text=True).stdout
    if "pgd_backend_cuda_create" not in syms:
        pytest.skip("built without the CUDA backend")
    needed = subprocess.run(["readelf", "-d", pagoda_bin], capture_output=True, text=True).stdout
    libs = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", needed)
    assert libs and not [n for n in libs if re.match(r"lib(cudart|cublas|cuda)\b", n)], libs
    interp = re.search(r"program interpreter: ([^\]]+)\]",
                       subprocess.run(["readelf", "-l", pagoda_bin], capture_output=True,
                                      text=True).stdout).group(1)
    dirs = []
    ldd = subprocess.run(["ldd", pagoda_bin], capture_output=True, text=True).stdout
    for line in ldd.splitlines():
        m = re.search(r"=> (/\S+)", line)
        d = os.path.dirname(m.group(1)) if m else None
        if d and d not in dirs and not glob.glob(os.path.join(d, "libcud*")) \
                and not glob.glob(os.path.join(d, "libcublas*")):
            dirs.append(d)
    base = [interp, "--inhibit-cache", "--library-path", ":".join(dirs), pagoda_bin]
    p = subprocess.run(base + ["bench", "--load-format", "dummy", "--model-preset",
                               "smollm2-135m", "--batch", "1", "--prompt-len", "8", "--gen-len",
                               "2", "--json"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)[0]["decode_tokens_per_s"] > 0
    if "on the CPU" in p.stderr:  # no GPU here (else it ran on the GPU, and says nothing)
        assert "pagoda bench: on the CPU (--device auto: no CUDA device is visible: " in p.stderr
        p = subprocess.run(base + ["generate", "--device", "cuda", "--load-format", "dummy",
                                   "--model-preset", "smollm2-135m", "--prompt", "x"],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 1
        assert "--device cuda: no CUDA device is visible: " in p.stderr, p.stderr
