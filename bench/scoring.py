#!/usr/bin/env python3
"""bench/scoring.py — what scoring prompts costs (echo + logprobs: the prompt tokens' logprobs,
as lm-eval's loglikelihood tasks ask for them) against computing the same prompts without,
alternated round by round in one period (this machine's speed drifts).

    build/pagoda serve --model "$(scripts/fetch-model)" --port 8000 &
    .venv/bin/python bench/scoring.py --base-url http://127.0.0.1:8000 \\
        --rounds 5 --prompts 32 --length 256 --batch 8 --concurrency 2 \\
        --markdown bench/results/scoring.md

Each mode sends the same number of prompts of random token ids (fresh ones per mode and round,
so no prefix-cache hit favours a mode), --batch prompts per request as lm-eval batches them,
--concurrency requests at a time, max_tokens 1 and temperature 0:

    prefill    no echo, no logprobs: the prompts computed, one token sampled
    score      echo, logprobs 1: lm-eval's loglikelihood request
    score-top5 echo, logprobs 5

The table gives the prompt tokens per second of each mode (the median over the rounds: all its
prompt tokens over the wall time from the first request to the last answer).
"""
from __future__ import annotations

import argparse
import random
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import openai

MODES = {
    "prefill": {},
    "score": {"echo": True, "logprobs": 1},
    "score-top5": {"echo": True, "logprobs": 5},
}


def run_mode(client, model, prompts, batch, concurrency, extra):
    """Prompt tokens per second for `prompts` sent in batches."""
    groups = [prompts[i:i + batch] for i in range(0, len(prompts), batch)]

    def one(g):
        r = client.completions.create(model=model, prompt=g, max_tokens=1, temperature=0,
                                      **extra)
        if extra:
            for c, p in zip(sorted(r.choices, key=lambda c: c.index), g):
                assert len(c.logprobs.token_logprobs) == len(p) + 1
        return r.usage.prompt_tokens

    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as ex:
        tokens = sum(ex.map(one, groups))
    return tokens / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8000")
    ap.add_argument("--api-key", default="none")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--prompts", type=int, default=32, help="prompts per mode and round")
    ap.add_argument("--length", type=int, default=256, help="tokens per prompt")
    ap.add_argument("--batch", type=int, default=8, help="prompts per request")
    ap.add_argument("--concurrency", type=int, default=2, help="requests at a time")
    ap.add_argument("--vocab", type=int, default=32000, help="ids drawn from [100, vocab)")
    ap.add_argument("--markdown")
    a = ap.parse_args()
    client = openai.OpenAI(base_url=a.base_url.rstrip("/") + "/v1", api_key=a.api_key,
                           timeout=600)
    model = client.models.list().data[0].id
    rng = random.Random(1)
    res = {m: [] for m in MODES}
    for r in range(a.rounds):
        for m, extra in MODES.items():
            prompts = [[rng.randrange(100, a.vocab) for _ in range(a.length)]
                       for _ in range(a.prompts)]
            res[m].append(run_mode(client, model, prompts, a.batch, a.concurrency, extra))
        print(f"round {r + 1}/{a.rounds}: " +
              ", ".join(f"{m} {v[-1]:.0f} tok/s" for m, v in res.items()), flush=True)
    base = statistics.median(res["prefill"])
    lines = [f"model `{model}`, {a.rounds} rounds alternating the modes; per mode and round "
             f"{a.prompts} prompts of {a.length} random token ids, {a.batch} per request, "
             f"{a.concurrency} requests at a time, max_tokens 1, temperature 0", "",
             "| mode | prompt tokens/s (median) | min | max | vs prefill |",
             "|---|---|---|---|---|"]
    for m, v in res.items():
        med = statistics.median(v)
        lines.append(f"| {m} | {med:.0f} | {min(v):.0f} | {max(v):.0f} | {med / base:.2f} |")
    text = "\n".join(lines)
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as fh:
            fh.write("# Scoring prompts: echo + logprobs\n\n" + text + "\n")


if __name__ == "__main__":
    main()
