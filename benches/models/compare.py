# Reproduce: see BENCHMARKS.md, "Session 7: what the embedded default writes".
"""Speed + content comparison of small GGUF models. Usage: bench.py NAME PATH MODE OUT.json
MODE: chat (use the GGUF chat template via create_chat_completion) or transcript
(no template: Lorekeeper-style plain transcript, plus a Gemma turn-format probe)."""
import json, sys, time, os
import llama_cpp
from llama_cpp import Llama, LlamaGrammar

name, path, mode, out = sys.argv[1:5]
SEEDS = [int(x) for x in os.environ.get("SEEDS","42,1234").split(",")]
TEMP = 0.7
res = {"name": name, "path": path, "mode": mode, "size_bytes": os.path.getsize(path)}

def load():
    t = time.perf_counter()
    llm = Llama(model_path=path, n_threads=1, n_threads_batch=1, n_ctx=2048, verbose=False, seed=42)
    return llm, time.perf_counter() - t

llm, t1 = load(); del llm
llm, t2 = load()
res["load_s"] = [round(t1, 3), round(t2, 3)]

# ---------------- speed ----------------
LORE = ("The Saltmarsh lighthouse stands on a spur of black rock at the northern edge of the Varn "
        "archipelago. Its keeper, Ilse Marrow, has tended the lamp for nineteen winters, the last six "
        "of them alone since her husband drowned while rowing out to a wreck. The island has no trees, "
        "only heather, gulls and a stone cottage joined to the tower by a covered walk. Supply ships "
        "come from the mainland once a month when the weather allows, bringing oil, flour, letters and "
        "news. In the long storms of autumn they often do not come at all, and the keeper must ration "
        "the oil so that the light burns through every night. Smugglers use the channel below the "
        "rocks, running brandy, tobacco and sometimes people between the islands and the southern "
        "ports. Ilse knows their boats by the shape of their sails and the rhythm of their oars. She "
        "has an arrangement with a captain called Tomas Venn: he leaves casks of lamp oil in a cave "
        "below the tower, and she tells him when the customs cutter is in the sound. The customs men "
        "suspect something, and a new inspector is due on the next supply ship. Ilse keeps a logbook "
        "in which every ship, every storm and every visitor is written down in a small careful hand, "
        "and a second logbook, hidden under the floor of the lamp room, in which she writes the truth. ")
SPEED_PROMPT = LORE + "\nWrite the next entry in the keeper's logbook, describing tonight's storm:\n"
ntok = len(llm.tokenize(SPEED_PROMPT.encode(), add_bos=True))
eos = llm.token_eos()
speed = []
for rep in range(2):
    llm.reset()
    llama_cpp.llama_perf_context_reset(llm._ctx.ctx)
    t = time.perf_counter()
    r = llm.create_completion(SPEED_PROMPT, max_tokens=64, temperature=0.0, seed=1,
                              logit_bias={eos: -1e9})
    wall = time.perf_counter() - t
    p = llama_cpp.llama_perf_context(llm._ctx.ctx)
    speed.append({"prompt_tokens": p.n_p_eval, "gen_tokens": p.n_eval,
                  "pp_tok_s": round(p.n_p_eval / (p.t_p_eval_ms / 1000), 1),
                  "tg_tok_s": round(p.n_eval / (p.t_eval_ms / 1000), 1),
                  "wall_s": round(wall, 2), "completion_tokens": r["usage"]["completion_tokens"]})
res["speed_prompt_tokens"] = ntok
res["speed"] = speed

# ---------------- content ----------------
SEED = {"name": "Ilse Marrow", "role": "lighthouse keeper",
        "concept": "A widowed keeper on a northern island who trades secrets with smugglers to keep the light burning"}
PROFILE_SYS = ("You are a character designer for a roleplay game. You answer with one JSON object and nothing else.")
PROFILE_USER = (
    "Create a character profile from this seed:\n" + json.dumps(SEED) + "\n\n"
    "Answer with JSON of exactly this shape:\n"
    '{"narrative": "...two paragraphs about the character...", "structured": {"core_traits": [4-6 traits], '
    '"fears": [2-4], "secrets": [2-3], "emotional_baseline": "...", "triggers": [3-5]}}')
PROFILE_SCHEMA = {
    "type": "object",
    "properties": {
        "narrative": {"type": "string"},
        "structured": {
            "type": "object",
            "properties": {
                "core_traits": {"type": "array", "items": {"type": "string"}, "minItems": 4, "maxItems": 6},
                "fears": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 4},
                "secrets": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 3},
                "emotional_baseline": {"type": "string"},
                "triggers": {"type": "array", "items": {"type": "string"}, "minItems": 3, "maxItems": 5},
            },
            "required": ["core_traits", "fears", "secrets", "emotional_baseline", "triggers"],
        },
    },
    "required": ["narrative", "structured"],
}
CHAT_SYS = (
    "You are Ilse Marrow. Stay in character and reply as Ilse only, in one or two short paragraphs.\n\n"
    "Character: Ilse Marrow\n"
    "Description: A widowed lighthouse keeper in her fifties on a storm-beaten northern island. Weathered hands, "
    "a grey braid, an oilskin coat. Dry, guarded, fiercely devoted to the light; she trades secrets with "
    "smugglers to get the oil that keeps it burning.\n"
    "Example dialogue:\nIlse: \"The lamp doesn't care who pays for its oil, and neither do I. Shut the door, you're letting the weather in.\"")
CHAT_USER = "The storm is getting worse. Will the light hold tonight?"
DIR_SYS = (
    "You are the scene director of a roleplay campaign. You do not write dialogue. You decide which character "
    "acts next and what they should do. Only name characters listed below. Answer with one JSON object and nothing else.\n\n"
    "Scene: Midnight in the lamp room of the Saltmarsh lighthouse. A storm batters the glass; the oil is running low.\n\n"
    "Characters present:\n"
    "- Ilse Marrow: the widowed lighthouse keeper; guarded, stubborn about the light; owes the smugglers a favour.\n"
    "- Tomas Venn: a smuggler captain, charming and calculating; has brought oil and wants news of the customs cutter.")
DIR_USER = ('Round 1. The user says: "A lantern is signalling from the rocks below." '
            'Answer with JSON: {"next_character": "<name of the character who acts next>", "action": "<what they should do, one sentence>"}')
DIR_SCHEMA = {"type": "object", "properties": {"next_character": {"type": "string"}, "action": {"type": "string"}},
              "required": ["next_character", "action"]}

STOPS = ["\nUser:", "\nAssistant:", "\nSystem:"]

def transcript(sys_msg, user):
    return f"{sys_msg}\n\nUser: {user}\n\nAssistant:"

def gemma_turns(sys_msg, user):
    return f"<start_of_turn>user\n{sys_msg}\n\n{user}<end_of_turn>\n<start_of_turn>model\n"

def run(sys_msg, user, max_tokens, seed, schema=None, fmt=None):
    llm.reset()
    g = LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False) if schema else None
    t = time.perf_counter()
    if fmt is None:  # chat template
        r = llm.create_chat_completion(messages=[{"role": "system", "content": sys_msg}, {"role": "user", "content": user}],
                                       max_tokens=max_tokens, temperature=TEMP, seed=seed, grammar=g)
        text = r["choices"][0]["message"]["content"]
    else:
        prompt = fmt(sys_msg, user)
        stops = STOPS if fmt is transcript else ["<end_of_turn>"]
        r = llm.create_completion(prompt, max_tokens=max_tokens, temperature=TEMP, seed=seed, grammar=g, stop=stops)
        text = r["choices"][0]["text"]
    return {"text": text, "finish": r["choices"][0]["finish_reason"], "usage": r["usage"],
            "secs": round(time.perf_counter() - t, 1)}

fmts = [("chat_template", None)] if mode == "chat" else [("transcript", transcript), ("gemma_turns", gemma_turns)][:int(os.environ.get("NFMT","2"))]
content = []
for fname, fmt in fmts:
    for seed in SEEDS:
        for task, s, u, mt, sch in [
            ("profile", PROFILE_SYS, PROFILE_USER, 700, None),
            ("profile_grammar", PROFILE_SYS, PROFILE_USER, 700, PROFILE_SCHEMA),
            ("chat", CHAT_SYS, CHAT_USER, 200, None),
            ("director", DIR_SYS, DIR_USER, 200, None),
            ("director_grammar", DIR_SYS, DIR_USER, 200, DIR_SCHEMA),
        ]:
            o = run(s, u, mt, seed, sch, fmt)
            o.update(task=task, seed=seed, format=fname)
            content.append(o)
            print(name, fname, seed, task, o["secs"], "s", repr(o["text"][:120]), flush=True)
            res["content"] = content
            json.dump(res, open(out, "w"), indent=1)
res["content"] = content
json.dump(res, open(out, "w"), indent=1)
print("done", name, res["load_s"], res["speed"])
