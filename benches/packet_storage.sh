#!/bin/sh
# What a chat exchange costs in the library: the same scripted chat (a card with a
# 400-entry lorebook, 30 of them constant, so each packet carries ~20 KB of lore; the
# scripted provider, no embedding model) played by a binary, then the stored packet
# bytes per exchange and the library's size. Session 18 (BENCHMARKS.md).
#
#   sh benches/packet_storage.sh [BINARY] [EXCHANGES]
#
# BINARY defaults to target/debug/lorekeeper, EXCHANGES to 100. Needs python3 and sqlite3.
set -eu
BIN=${1:-target/debug/lorekeeper}
N=${2:-100}
DIR=$(mktemp -d /tmp/packet-storage.XXXXXX)
[ -n "${KEEP:-}" ] && echo "library kept in $DIR" || trap 'rm -rf "$DIR"' EXIT

python3 - "$DIR" <<'EOF'
import json, random, sys
out = sys.argv[1]
rng = random.Random(18)
words = "harbor lantern thorn vale wren oak crow silver bridge fen dagger willow shard tower hollow copper ash glass moss orchard".split()
text = lambda n: " ".join(rng.choice(words) for _ in range(n)).capitalize() + "."
entries = [{"keys": [f"orchard{i}"], "content": text(30), "enabled": True, "insertion_order": i, "id": i,
            "constant": i < 30, "extensions": {}} for i in range(400)]
card = {"spec": "chara_card_v2", "spec_version": "2.0", "data": {
    "name": "Bram Holloway", "description": "{{char}} keeps the salt store. " + " ".join(text(20) for _ in range(8)),
    "personality": text(20), "scenario": text(25), "first_mes": "The door creaks. " + text(15),
    "mes_example": "<START>\n{{user}}: Hello.\n{{char}}: " + text(20), "creator_notes": "", "system_prompt": "",
    "post_history_instructions": "", "alternate_greetings": [], "tags": [], "creator": "bench", "character_version": "1",
    "extensions": {}, "character_book": {"name": "Holloway lore", "entries": entries}}}
json.dump(card, open(f"{out}/card.json", "w"))
json.dump({"rules": [], "default": {"text": "[Bram Holloway]: " + text(60)}}, open(f"{out}/script.json", "w"))
EOF
cat > "$DIR/config.toml" <<EOF
default_profile = "script"

[[profile]]
name = "script"
kind = "scripted"
model = "s"
path = "$DIR/script.json"
max_context_tokens = 32768

[memory.embedding]
model_dir = "$DIR/no-model"
EOF
LK="$BIN --library $DIR/lib.sqlite --config $DIR/config.toml"
$LK import "$DIR/card.json" > /dev/null
sqlite3 "$DIR/lib.sqlite" "PRAGMA wal_checkpoint(TRUNCATE);" > /dev/null
EMPTY=$(stat -c %s "$DIR/lib.sqlite")
i=1
while [ "$i" -le "$N" ]; do
    echo "Message $i: tell me about orchard$((i % 400)) and the harbor lantern by the willow bridge."
    i=$((i + 1))
done > "$DIR/messages.txt"
$LK chat repl --character "Bram Holloway" < "$DIR/messages.txt" > "$DIR/repl.log" 2>&1
sqlite3 "$DIR/lib.sqlite" "PRAGMA wal_checkpoint(TRUNCATE);" > /dev/null
sqlite3 "$DIR/lib.sqlite" "SELECT 'exchanges', count(*), 'packet bytes per exchange', sum(length(packet_json)) / count(*), \
    'hits bytes per exchange', sum(length(hits_json)) / count(*) FROM companion_turns;" | tr '|' ' '
FULL=$(stat -c %s "$DIR/lib.sqlite")
echo "library bytes $EMPTY before the chat, $FULL after: $(( (FULL - EMPTY) / N )) per exchange"
