#!/usr/bin/env python3
"""bench/structured.py — what constrained output costs: decode ms per token of free text, JSON
mode (response_format json_object) and structured output (json_schema: a pydantic model's strict
schema, as the openai SDK sends it), alternated round by round in one period (this machine's
speed drifts), at each concurrency.

    build/pagoda serve --model "$(scripts/fetch-model)" --port 8000 &
    .venv/bin/python bench/structured.py --base-url http://127.0.0.1:8000 \\
        --rounds 5 --concurrency 1,8 --markdown bench/results/structured.md

Each request streams a chat answer (temperature 0.8, its own seed, --max-tokens); its decode
time per token is (last token's arrival - first token's) / (tokens - 1), from the client's clock.
Per format and concurrency the table gives the median over every request of every round, and the
tokens per request (a constrained answer may end sooner: JSON closes).
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Optional

import openai
from openai.lib._pydantic import to_strict_json_schema
from pydantic import BaseModel


class Cat(BaseModel):
    name: str
    age: int
    breed: Optional[str]
    description: str
    toys: list[str]


FORMATS = {
    "text": None,
    "json_object": {"type": "json_object"},
    "json_schema": {"type": "json_schema",
                    "json_schema": {"name": "cat", "strict": True,
                                    "schema": to_strict_json_schema(Cat)}},
}
MESSAGES = [{"role": "user", "content": "Describe a cat in detail, as JSON with a name, an age, "
                                        "a breed, a long description and a list of toys."}]


def one(client, model, fmt, seed, max_tokens, out):
    kw = dict(model=model, messages=MESSAGES, max_tokens=max_tokens, temperature=0.8, seed=seed,
              stream=True, stream_options={"include_usage": True})
    if fmt:
        kw["response_format"] = fmt
    first = last = None
    tokens = 0
    for ch in client.chat.completions.create(**kw):
        if ch.choices and ch.choices[0].delta.content:
            last = time.perf_counter()
            first = first or last
        if ch.usage:
            tokens = ch.usage.completion_tokens
    if first and tokens > 1:
        out.append(((last - first) * 1000 / (tokens - 1), tokens))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base-url", default="http://127.0.0.1:8000")
    ap.add_argument("--api-key", default="none")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--concurrency", default="1,8")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--markdown")
    a = ap.parse_args()
    client = openai.OpenAI(base_url=a.base_url.rstrip("/") + "/v1", api_key=a.api_key)
    model = client.models.list().data[0].id
    levels = [int(x) for x in a.concurrency.split(",")]
    res = {(f, c): [] for f in FORMATS for c in levels}
    seed = 0
    for r in range(a.rounds):
        for c in levels:
            for f, fmt in FORMATS.items():
                threads = []
                for _ in range(c):
                    seed += 1
                    t = threading.Thread(target=one, args=(client, model, fmt, seed,
                                                           a.max_tokens, res[(f, c)]))
                    t.start()
                    threads.append(t)
                for t in threads:
                    t.join()
        print(f"round {r + 1}/{a.rounds} done", flush=True)
    lines = [f"model `{model}`, {a.rounds} rounds alternating the formats, temperature 0.8, "
             f"max_tokens {a.max_tokens}", "",
             "| concurrency | format | decode ms/token (median) | tokens/request (median) | "
             "requests |", "|---|---|---|---|---|"]
    for c in levels:
        for f in FORMATS:
            v = res[(f, c)]
            if not v:
                continue
            lines.append(f"| {c} | {f} | {statistics.median(x[0] for x in v):.2f} | "
                         f"{statistics.median(x[1] for x in v):.0f} | {len(v)} |")
    text = "\n".join(lines)
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as fh:
            fh.write("# Constrained output: decode cost per token\n\n" + text + "\n")


if __name__ == "__main__":
    main()
