# Reproduce: see BENCHMARKS.md, "Session 7: what the embedded default writes".
import json,re
FIELDS={"core_traits","fears","secrets","emotional_baseline","triggers","narrative","structured","traits"}
def parse(t):
    t=t.strip()
    m=re.search(r"```(?:json)?\s*(.*?)```",t,re.S)
    if m: t=m.group(1)
    try:
        return json.JSONDecoder().raw_decode(t.lstrip())[0]
    except Exception: return None
def good_list(v,lo,hi):
    return isinstance(v,list) and lo<=len(v)<=hi and all(isinstance(x,str) and len(x.strip(' ,."[]{}:'))>2 and x.strip().lower() not in FIELDS and not re.fullmatch(r"[\W\d_]+",x) for x in v)
rows={}
for model,files in [("gemma3-270m",["res_gemma.json","res2_gemma.json"]),("qwen2.5-coder-0.5b",["res_qwen.json","res2_qwen.json"]),("smollm2-135m",["res_smollm2.json","res2_smollm2.json"])]:
    agg={}
    for f in files:
        for c in json.load(open(f))["content"]:
            if c["format"]=="gemma_turns": continue
            k=c["task"]; a=agg.setdefault(k,{"n":0,"json":0,"name":0,"traits":0,"narr":0,"real_char":0})
            a["n"]+=1
            j=parse(c["text"])
            if k.startswith("profile"):
                if isinstance(j,dict) and isinstance(j.get("structured"),dict):
                    a["json"]+=1
                    s=j["structured"]; n=j.get("narrative","") if isinstance(j.get("narrative"),str) else ""
                    if "Ilse Marrow" in n: a["name"]+=1
                    if good_list(s.get("core_traits"),4,6) and good_list(s.get("fears"),2,4): a["traits"]+=1
                    if len(n)>=150 and "..." not in n[:5] and "paragraph" not in n.lower(): a["narr"]+=1
            if k.startswith("director"):
                if isinstance(j,dict) and "next_character" in j:
                    a["json"]+=1
                    if j["next_character"] in ("Ilse Marrow","Tomas Venn"): a["real_char"]+=1
    rows[model]=agg
json.dump(rows,open("scores.json","w"),indent=1)
for m,agg in rows.items():
    for k,a in agg.items():
        if k=="chat": continue
        print(m,k,a)
