#!/usr/bin/env python3
"""Load on an OpenAI-compatible server (infokv serve, llama.cpp's llama-server): N concurrent clients, each a
streamed multi-turn chat (a long shared system prompt, then questions), greedy. Reports completed and failed
requests, wall time, completed requests and generated tokens per second, time to first token (p50/p95), and, with
--check, how many answers differ from the same request sent alone afterwards (lost, duplicated or reordered tokens
show up there). Needs the `openai` package.

  packaging/tools/serve_load.py --base http://127.0.0.1:8080 --clients 32 --turns 2 --max-tokens 48 --check

--document FILE: the first --document-clients clients' first question carries a long passage (a long prompt
arriving among short chats); the report adds its time to first token and the other streams' gaps and stalls.
"""
import argparse
import concurrent.futures
import json
import statistics
import sys
import time

import openai

SYSTEM = ("You are a patient tutor for a reading group. The group reads Jane Austen's novels together, chapter by "
          "chapter, and asks you short questions about characters, places and events. Answer in one or two plain "
          "sentences, without lists, and say so when the text does not tell. ") * 4
TOPICS = ["Emma", "Mr. Knightley", "Harriet", "Highbury", "Mr. Elton", "Frank Churchill", "Jane Fairfax", "Miss Bates"]


def pct(v, p):
    if not v:
        return 0.0
    v = sorted(v)
    k = (len(v) - 1) * p
    lo = int(k)
    hi = min(len(v) - 1, lo + 1)
    return v[lo] + (v[hi] - v[lo]) * (k - lo)


def chat(client, model, messages, max_tokens, gaps=None):
    """One streamed request: (text, ttft seconds); the seconds between its later chunks with content go to gaps."""
    t0 = time.time()
    ttft = None
    last = None
    out = []
    for ch in client.chat.completions.create(model=model, messages=messages, max_tokens=max_tokens, temperature=0,
                                             stream=True):
        if ch.choices and ch.choices[0].delta.content:
            now = time.time()
            if ttft is None:
                ttft = now - t0
            elif gaps is not None:
                gaps.append(now - last)
            last = now
            out.append(ch.choices[0].delta.content)
    return "".join(out), (ttft if ttft is not None else time.time() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", required=True, help="server URL, e.g. http://127.0.0.1:8080")
    ap.add_argument("--model", default="model")
    ap.add_argument("--api-key", default="none")
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--check", action="store_true", help="send every request alone afterwards and compare")
    ap.add_argument("--label", default="")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--document", help="a text file: the first --document-clients clients ask about its start in "
                    "their first turn (a long prompt arriving among short ones)")
    ap.add_argument("--document-chars", type=int, default=6000, help="how much of --document (default 6000 chars)")
    ap.add_argument("--document-clients", type=int, default=1)
    ap.add_argument("--document-delay", type=float, default=2.0,
                    help="seconds the document clients wait before their first turn (the others are streaming)")
    a = ap.parse_args()
    document = None
    if a.document:
        with open(a.document, encoding="utf-8") as f:
            document = f.read()[:a.document_chars]
    client = openai.OpenAI(base_url=a.base.rstrip("/") + "/v1", api_key=a.api_key, max_retries=0, timeout=1800)

    def conversation(i):
        msgs = [{"role": "system", "content": SYSTEM}]
        log = []
        if document is not None and i < a.document_clients:
            time.sleep(a.document_delay)
        for t in range(a.turns):
            q = f"In one sentence: who is {TOPICS[(i + t) % len(TOPICS)]}? (reader {i}, question {t + 1})"
            if document is not None and t == 0 and i < a.document_clients:
                q = f"Reader {i} brings this passage:\n\n{document}\n\n{q}"
            msgs.append({"role": "user", "content": q})
            sent = [dict(m) for m in msgs]
            gaps = []
            try:
                text, ttft = chat(client, a.model, sent, a.max_tokens, gaps)
            except Exception as e:  # counted, reported
                log.append({"messages": sent, "error": f"{type(e).__name__}: {e}"})
                break
            log.append({"messages": sent, "text": text, "ttft": ttft, "turn": t, "gaps": gaps,
                        "document": document is not None and t == 0 and i < a.document_clients})
            msgs.append({"role": "assistant", "content": text})
        return log

    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(a.clients) as ex:
        logs = list(ex.map(conversation, range(a.clients)))
    wall = time.time() - t0
    reqs = [r for log in logs for r in log]
    ok = [r for r in reqs if "text" in r]
    failed = [r for r in reqs if "error" in r]
    out = {"label": a.label, "clients": a.clients, "turns": a.turns, "requests": a.clients * a.turns,
           "completed": len(ok), "failed": len(failed), "wall_s": round(wall, 2),
           "completed_per_s": round(len(ok) / wall, 3),
           "ttft_p50_ms": round(pct([r["ttft"] for r in ok], 0.5) * 1e3, 1),
           "ttft_p95_ms": round(pct([r["ttft"] for r in ok], 0.95) * 1e3, 1),
           # The first turns alone (a long prompt each, arriving together) and the gaps between a stream's tokens:
           # every gap (p50) and each request's longest (p95 over requests: how long a stream stalls).
           "ttft_first_turn_mean_ms": round(statistics.mean([r["ttft"] for r in ok if r["turn"] == 0] or [0]) * 1e3, 1),
           "gap_p50_ms": round(pct([g for r in ok for g in r["gaps"]], 0.5) * 1e3, 1),
           "stall_p95_ms": round(pct([max(r["gaps"]) for r in ok if r["gaps"]], 0.95) * 1e3, 1)}
    if document is not None:
        # The short chats beside the long prompts: how long their streams stall while a document is prefilled.
        short = [r for r in ok if not r["document"]]
        docs = [r for r in ok if r["document"]]
        out["document_ttft_mean_ms"] = round(statistics.mean([r["ttft"] for r in docs] or [0]) * 1e3, 1)
        out["others_gap_p50_ms"] = round(pct([g for r in short for g in r["gaps"]], 0.5) * 1e3, 1)
        out["others_stall_p95_ms"] = round(pct([max(r["gaps"]) for r in short if r["gaps"]], 0.95) * 1e3, 1)
        out["others_stall_max_ms"] = round(max([max(r["gaps"]) for r in short if r["gaps"]] or [0]) * 1e3, 1)
    if failed:
        out["first_failure"] = failed[0]["error"][:300]
    if a.check:
        diff = 0
        for r in ok:
            alone, _ = chat(client, a.model, r["messages"], a.max_tokens)
            if alone != r["text"]:
                diff += 1
                out.setdefault("first_difference", {"together": r["text"], "alone": alone})
        out["differ_from_alone"] = diff
    if a.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k}: {v}")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
