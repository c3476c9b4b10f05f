#!/usr/bin/env python3
"""bench/moe.py — CPU decode and prefill of a mixture-of-experts model, pagoda against
llama.cpp on the same GGUF file.

No MoE checkpoint can be fetched here (no model hub), so the file is written by this script:
a built-in preset's shapes (configs/models/qwen3-30b-a3b.json by default) with fewer layers
(--layers; the per-layer work is the model's own), random Q8_0 weights (random int8 values and
scales, written as raw blocks: no float quantization step, so a 4 GB file takes seconds) and a
byte-level vocabulary padded to the preset's size. The weights are random, so the text is
noise; the routing is live (random router weights spread the tokens over the experts) and the
speed is what it would be with trained weights of that type.

Prints markdown: the file, pagoda's `bench` (offline: batch 1 and 16; f32 activations, the
default, and --int8-activations), and, with --llama-python (a python where
`pip install llama-cpp-python` built llama.cpp), llama.cpp on the same file with the same thread
count: llama-cpp-python's Llama.eval (llama_decode) of the prompt in one batch, then one-token
greedy decode steps, timed with time.perf_counter. The engines alternate, --rounds times.

Usage: .venv/bin/python bench/moe.py [--preset qwen3-30b-a3b] [--layers 8] [--out FILE]
           [--pagoda build/pagoda] [--threads 2] [--prompt-len 128] [--gen-len 64] [--rounds 2]
           [--llama-python /path/to/python-with-llama_cpp [--llama-no-extra-bufts]]
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "reference"))
import gguf  # noqa: E402
from tiny_gguf import start_model  # noqa: E402

Q8 = gguf.GGMLQuantizationType.Q8_0


def q8_blocks(rng, shape, std):
    """Random Q8_0 bytes for a float tensor `shape` (last dim a multiple of 32) of about `std`:
    int8 values uniform in [-127, 127] (std ~73.6), scale std / 73.6 (f16)."""
    n_blocks = int(np.prod(shape)) // 32
    b = np.empty((n_blocks, 34), dtype=np.uint8)
    b[:, :2] = np.full(n_blocks, std / 73.6, dtype=np.float16).view(np.uint8).reshape(-1, 2)
    b[:, 2:] = rng.integers(-127, 128, size=(n_blocks, 32), dtype=np.int8).view(np.uint8)
    return b.reshape(*shape[:-1], shape[-1] // 32 * 34)


def write_model(path, cfg, layers, seed=0):
    rng = np.random.default_rng(seed)
    moe = cfg["model_type"] in ("qwen3_moe", "mixtral")
    arch = {"qwen3_moe": "qwen3moe", "mixtral": "llama"}.get(cfg["model_type"], cfg["model_type"])
    E, H = cfg["hidden_size"], cfg["num_attention_heads"]
    HKV = cfg.get("num_key_value_heads", H)
    D = cfg.get("head_dim", E // H)
    V, FF = cfg["vocab_size"], cfg["intermediate_size"]
    NX = cfg.get("num_experts", cfg.get("num_local_experts", 0))
    FX = cfg.get("moe_intermediate_size", FF)
    qwen3 = arch.startswith("qwen3")
    w = start_model(path, arch, embd=E, ff=FF, heads=H, heads_kv=HKV, layers=layers,
                    ctx=cfg.get("max_position_embeddings", 4096),
                    rope_base=float(cfg.get("rope_theta", 10000.0)),
                    rms_eps=float(cfg.get("rms_norm_eps", 1e-6)),
                    pre="qwen2" if qwen3 else "llama-bpe", vocab=V)
    w.add_key_length(D)
    w.add_value_length(D)
    if moe:
        w.add_expert_count(NX)
        w.add_expert_used_count(cfg["num_experts_per_tok"])
        if arch == "qwen3moe":
            w.add_expert_feed_forward_length(FX)
    ones = lambda n: np.ones(n, dtype=np.float32)
    mat = lambda name, shape, cols: w.add_tensor(name, q8_blocks(rng, shape, cols ** -0.5),
                                                 raw_dtype=Q8)
    mat("token_embd.weight", (V, E), 4.0)  # std 0.5
    mat("output.weight", (V, E), E)
    w.add_tensor("output_norm.weight", ones(E))
    for l in range(layers):
        p = f"blk.{l}."
        w.add_tensor(p + "attn_norm.weight", ones(E))
        mat(p + "attn_q.weight", (H * D, E), E)
        mat(p + "attn_k.weight", (HKV * D, E), E)
        mat(p + "attn_v.weight", (HKV * D, E), E)
        mat(p + "attn_output.weight", (E, H * D), H * D)
        if qwen3:
            w.add_tensor(p + "attn_q_norm.weight", ones(D))
            w.add_tensor(p + "attn_k_norm.weight", ones(D))
        w.add_tensor(p + "ffn_norm.weight", ones(E))
        if moe:
            w.add_tensor(p + "ffn_gate_inp.weight",
                         (rng.standard_normal((NX, E)) * E ** -0.5).astype(np.float32))
            mat(p + "ffn_gate_exps.weight", (NX, FX, E), E)
            mat(p + "ffn_up_exps.weight", (NX, FX, E), E)
            mat(p + "ffn_down_exps.weight", (NX, E, FX), FX)
        else:
            mat(p + "ffn_gate.weight", (FF, E), E)
            mat(p + "ffn_up.weight", (FF, E), E)
            mat(p + "ffn_down.weight", (E, FF), FF)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def active_bytes(cfg, layers):
    """Weight bytes one decoded token reads (Q8_0: 34 bytes per 32 values)."""
    E, H = cfg["hidden_size"], cfg["num_attention_heads"]
    HKV = cfg.get("num_key_value_heads", H)
    D = cfg.get("head_dim", E // H)
    FX = cfg.get("moe_intermediate_size", cfg["intermediate_size"])
    K = cfg.get("num_experts_per_tok", 1)
    per_layer = (2 * H * D + 2 * HKV * D) * E + K * 3 * FX * E
    return (layers * per_layer + cfg["vocab_size"] * E) * 34 / 32


LLAMA_TIMER = r"""
import json, random, sys, time
import numpy as np
import llama_cpp.llama_cpp as llama_cpp
from llama_cpp import Llama
path, threads, n_prompt, n_gen = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
if sys.argv[5] == "0":  # no extra buffer types (AMX / repacked weights)
    _defaults = llama_cpp.llama_model_default_params
    def _no_extra_bufts():
        p = _defaults()
        p.use_extra_bufts = False
        return p
    llama_cpp.llama_model_default_params = _no_extra_bufts
llm = Llama(model_path=path, n_ctx=n_prompt + n_gen + 16, n_batch=max(n_prompt, 32),
            n_threads=threads, n_threads_batch=threads, verbose=False)
rnd = random.Random(0)
prompt = [rnd.randrange(0, 256) for _ in range(n_prompt)]
llm.eval(prompt[:8])  # warm-up
llm.reset()
t0 = time.perf_counter()
llm.eval(prompt)
t1 = time.perf_counter()
for i in range(n_gen):
    last = np.ctypeslib.as_array(llm._ctx.get_logits(), shape=(llm.n_vocab(),))
    llm.eval([int(np.argmax(last))])
t2 = time.perf_counter()
print(json.dumps({"prefill_tok_s": n_prompt / (t1 - t0), "decode_tok_s": n_gen / (t2 - t1)}))
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--preset", default="qwen3-30b-a3b")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--out", default=None, help="GGUF path (default /tmp/pgd-moe-PRESET-L.gguf)")
    ap.add_argument("--pagoda", default=str(ROOT / "build" / "pagoda"))
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen-len", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--llama-python", default=None,
                    help="a python with llama_cpp installed (default: skip llama.cpp)")
    ap.add_argument("--llama-no-extra-bufts", action="store_true",
                    help="llama.cpp without its extra buffer types (a build with AMX crashed in "
                         "them on multi-token batches on this machine's CPU)")
    a = ap.parse_args()
    cfg = json.loads((ROOT / "configs" / "models" / f"{a.preset}.json").read_text())
    out = pathlib.Path(a.out or f"/tmp/pgd-moe-{a.preset}-{a.layers}.gguf")
    if not out.exists():
        t = time.time()
        write_model(out, cfg, a.layers)
        print(f"<!-- wrote {out} in {time.time() - t:.0f} s -->")
    print(f"# {a.preset} with {a.layers} of {cfg['num_hidden_layers']} layers, Q8_0, random "
          f"weights\n")
    print(f"- file: {out.stat().st_size / 2**30:.2f} GiB; weights read per decoded token: "
          f"{active_bytes(cfg, a.layers) / 2**20:.0f} MiB")
    print(f"- commit: {subprocess.run(['git', '-C', str(ROOT), 'rev-parse', '--short', 'HEAD'], capture_output=True, text=True).stdout.strip()}")
    print(f"- threads: {a.threads}; load average before: {open('/proc/loadavg').read().split()[:3]}")
    print()
    cmd = [a.pagoda, "bench", "--model", str(out), "--prompt-len", str(a.prompt_len), "--gen-len",
           str(a.gen_len), "--batch", "1,16", "--threads", str(a.threads), "--json"]
    print("| round | engine | batch | prefill tok/s | decode tok/s |\n|---|---|---|---|---|")
    for rnd in range(1, a.rounds + 1):  # the engines alternate: this VM's speed drifts
        for mode in ([], ["--int8-activations"]):
            res = json.loads(subprocess.run(cmd + mode, capture_output=True, text=True,
                                            check=True).stdout)
            name = "pagoda" + (" --int8-activations" if mode else "")
            for r in res:
                print(f"| {rnd} | {name} | {r['batch']} | {r['prefill_tokens_per_s']:.1f} | "
                      f"{r['decode_tokens_per_s']:.1f} |", flush=True)
        if not a.llama_python:
            continue
        p = subprocess.run([a.llama_python, "-c", LLAMA_TIMER, str(out), str(a.threads),
                            str(a.prompt_len), str(a.gen_len),
                            "0" if a.llama_no_extra_bufts else "1"],
                           capture_output=True, text=True)
        if p.returncode:
            print(f"| {rnd} | llama.cpp failed (exit {p.returncode}) | | | |")
        else:
            r = json.loads(p.stdout.strip().splitlines()[-1])
            print(f"| {rnd} | llama.cpp | 1 | {r['prefill_tok_s']:.1f} | "
                  f"{r['decode_tok_s']:.1f} |", flush=True)
    print(f"\n`{' '.join(cmd)} [--int8-activations]`")

if __name__ == "__main__":
    main()
