# Reproduce: see BENCHMARKS.md, "Session 8: the embedded engine against llama.cpp".
"""The raw llama.cpp speed that `lorekeeper bench local` is compared with.

Usage: engine_ref.py MODEL.gguf [PROMPT_TOKENS] [GEN_TOKENS] [RUNS]

Evaluates the same story prompt as `lorekeeper bench local` (its system text, user line
and narration prefill in Gemma's turn format), cut or padded to exactly PROMPT_TOKENS
tokens, with one thread and a 512-token batch like Lorekeeper's context; then generates
exactly GEN_TOKENS tokens, stops ignored. Times are wall-clock around the calls (what
Lorekeeper's timings measure too), this thread's CPU time (llama.cpp computes on the
calling thread with one thread; Lorekeeper reports its model thread's the same way) and
llama.cpp's own counters. Medians over RUNS runs,
after one warm-up. Prints one JSON object.
"""
import json, statistics, sys, time

import llama_cpp
from llama_cpp import Llama

path = sys.argv[1]
want_prompt = int(sys.argv[2]) if len(sys.argv) > 2 else 318
want_gen = int(sys.argv[3]) if len(sys.argv) > 3 else 64
runs = int(sys.argv[4]) if len(sys.argv) > 4 else 3

SETTING = ("The river city of Vell is built on nine islands joined by rope bridges. "
           "Its ferrymen keep a guild older than the city council, and they remember every debt. "
           "Mira, the ferryman's daughter, has found a sealed letter in the bilge of her father's boat, "
           "addressed to a councillor who drowned eleven years ago. The guild wants the letter; "
           "the council wants it burned; Mira wants to know why her father kept it. ")
SYSTEM = "You are the narrator of a slow, atmospheric story. Write long, vivid paragraphs. " + SETTING * 3
USER = "Describe, in detail, the night Mira opens the letter on the ninth bridge."
PREFILL = "It was past midnight when Mira reached the ninth bridge."
PROMPT = f"<start_of_turn>user\n{SYSTEM}\n\n{USER}<end_of_turn>\n<start_of_turn>model\n{PREFILL}"

llm = Llama(model_path=path, n_ctx=2048, n_batch=512, n_ubatch=512, n_threads=1, n_threads_batch=1,
            verbose=False, seed=1)
tokens = llm.tokenize(PROMPT.encode(), add_bos=True, special=True)
natural = len(tokens)
while len(tokens) < want_prompt:
    tokens += tokens[1:want_prompt - len(tokens) + 1]
tokens = tokens[:want_prompt]


def clear():
    llm.reset()
    llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(llm.ctx), True)


def one_run():
    clear()
    llama_cpp.llama_perf_context_reset(llm.ctx)
    t0, c0 = time.perf_counter(), time.thread_time()
    llm.eval(tokens)
    t1, c1 = time.perf_counter(), time.thread_time()
    for _ in range(want_gen):
        token = llm.sample(temp=0.8, top_k=40, top_p=0.95, min_p=0.05)
        llm.eval([token])
    t2, c2 = time.perf_counter(), time.thread_time()
    perf = llama_cpp.llama_perf_context(llm.ctx)
    return {
        "prompt_wall": want_prompt / (t1 - t0),
        "gen_wall": want_gen / (t2 - t1),
        "prompt_cpu": want_prompt / (c1 - c0),
        "gen_cpu": want_gen / (c2 - c1),
        "prompt_engine": perf.n_p_eval / (perf.t_p_eval_ms / 1000.0),
        "gen_engine": perf.n_eval / (perf.t_eval_ms / 1000.0),
    }


# Warm-up: first-touch page faults of the mmapped weights are not inference.
clear()
llm.eval(tokens[:8])
results = [one_run() for _ in range(runs)]
out = {"llama_cpp_python": llama_cpp.__version__, "prompt_tokens": want_prompt, "natural_prompt_tokens": natural,
       "generated_tokens": want_gen, "runs": runs}
for key in results[0]:
    out[key + "_tok_s"] = round(statistics.median(r[key] for r in results), 1)
print(json.dumps(out))
