#!/usr/bin/env python3
"""bench/embeddings.py — embeddings throughput of an OpenAI-compatible server: inputs and prompt
tokens per second for /v1/embeddings requests of --batch inputs each, --concurrency requests in
flight, through the openai SDK (its default base64 encoding).

    build/pagoda serve --model "$(scripts/fetch-model)" --port 8000 &
    .venv/bin/python bench/embeddings.py --base-url http://127.0.0.1:8000 \\
        --inputs 256 --words 64 --batch 1,16 --concurrency 1,4 --markdown bench/results/embeddings.md

The inputs are --inputs distinct texts of about --words words each (seeded, so runs compare);
every (batch, concurrency) setting sends all of them once after one untimed warm-up request, and
the settings alternate over --rounds rounds (this machine's speed drifts): the table gives each
setting's median over the rounds. Tokens are the server's usage.prompt_tokens.
"""
from __future__ import annotations

import argparse
import random
import statistics
import threading
import time

import openai

WORDS = ("the a of river stone light quiet market engine winter garden signal paper orbit "
         "copper lantern harbor meadow canyon violet thunder ledger compass velvet ember").split()


def texts(n: int, words: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [f"{i}: " + " ".join(rng.choice(WORDS) for _ in range(words)) for i in range(n)]


def run_setting(client, model, inputs, batch, conc):
    """All inputs once, in requests of `batch`, `conc` in flight: (seconds, prompt tokens)."""
    groups = [inputs[i:i + batch] for i in range(0, len(inputs), batch)]
    lock = threading.Lock()
    tokens = [0]
    nxt = [0]

    def worker():
        while True:
            with lock:
                if nxt[0] >= len(groups):
                    return
                g = groups[nxt[0]]
                nxt[0] += 1
            r = client.embeddings.create(model=model, input=g)
            assert len(r.data) == len(g)
            with lock:
                tokens[0] += r.usage.prompt_tokens

    t = time.perf_counter()
    threads = [threading.Thread(target=worker) for _ in range(conc)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.perf_counter() - t, tokens[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8000")
    ap.add_argument("--model", default=None)
    ap.add_argument("--inputs", type=int, default=256)
    ap.add_argument("--words", type=int, default=64)
    ap.add_argument("--batch", default="1,16")
    ap.add_argument("--concurrency", default="1,4")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--markdown", default=None)
    ap.add_argument("--label", default="pagoda")
    a = ap.parse_args()
    client = openai.OpenAI(base_url=a.base_url + "/v1", api_key="none", timeout=600)
    model = a.model or client.models.list().data[0].id
    inputs = texts(a.inputs, a.words)
    client.embeddings.create(model=model, input=inputs[:4])  # warm-up, untimed
    settings = [(int(b), int(c)) for b in a.batch.split(",") for c in a.concurrency.split(",")]
    res = {s: [] for s in settings}
    for _ in range(a.rounds):
        for s in settings:
            res[s].append(run_setting(client, model, inputs, *s))
    lines = [f"| server | inputs a request | requests in flight | inputs/s | prompt tokens/s |",
             "|---|---:|---:|---:|---:|"]
    for (b, c), runs in res.items():
        ips = statistics.median(len(inputs) / t for t, _ in runs)
        tps = statistics.median(n / t for t, n in runs)
        lines.append(f"| {a.label} | {b} | {c} | {ips:.1f} | {tps:.0f} |")
    table = "\n".join(lines)
    print(table)
    if a.markdown:
        with open(a.markdown, "a") as f:
            f.write(table + "\n")


if __name__ == "__main__":
    main()
