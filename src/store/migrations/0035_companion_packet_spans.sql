-- Owned by the companion module: a stored packet keeps each block as a span of the
-- message it was cut from (`span`: [message, start byte, end byte] of that message's
-- `content`) instead of a second copy of its text (see `companion::stored_packet`).
-- The exchanges' packets and those of the chats put aside are rewritten so; a block
-- whose text is not in a message keeps it, a row that is not valid JSON is left alone
-- (readers take both shapes). The freed pages are reused by later writes.
CREATE TEMP TABLE packets_0035 (
    owner  TEXT NOT NULL,
    -- -1: companion_turns.packet_json; n: companion_saved_chats.chat_json's turn n.
    turn   INTEGER NOT NULL,
    packet TEXT NOT NULL,
    PRIMARY KEY (owner, turn)
);
INSERT INTO packets_0035 (owner, turn, packet)
    SELECT id, -1, packet_json FROM companion_turns WHERE json_valid(packet_json) AND json_type(packet_json, '$.blocks') = 'array';
INSERT INTO packets_0035 (owner, turn, packet)
    SELECT c.id, t.key, json_extract(t.value, '$.packet')
    FROM companion_saved_chats c, json_each(c.chat_json, '$.turns') t
    WHERE json_valid(c.chat_json) AND json_type(t.value, '$.packet.blocks') = 'array';

CREATE TEMP TABLE blocks_0035 AS
    SELECT p.owner AS owner, p.turn AS turn, b.key AS k, b.value AS block, json_extract(b.value, '$.text') AS text,
           NULL AS m, NULL AS start
    FROM packets_0035 p, json_each(p.packet, '$.blocks') b;
-- The first message holding the block's text, and where (bytes, from 0).
UPDATE blocks_0035 SET m = (
    SELECT mm.key FROM packets_0035 p, json_each(p.packet, '$.messages') mm
    WHERE p.owner = blocks_0035.owner AND p.turn = blocks_0035.turn
      AND instr(CAST(json_extract(mm.value, '$.content') AS BLOB), CAST(blocks_0035.text AS BLOB)) > 0
    ORDER BY mm.key LIMIT 1)
WHERE typeof(text) = 'text' AND length(text) > 0;
UPDATE blocks_0035 SET start = instr(
    CAST((SELECT json_extract(p.packet, '$.messages[' || blocks_0035.m || '].content') FROM packets_0035 p
          WHERE p.owner = blocks_0035.owner AND p.turn = blocks_0035.turn) AS BLOB),
    CAST(text AS BLOB)) - 1
WHERE m IS NOT NULL;

UPDATE packets_0035 SET packet = json_set(packet, '$.blocks', json((
    SELECT json_group_array(json(CASE
        WHEN b.m IS NULL THEN b.block
        ELSE json_set(json_remove(b.block, '$.text'), '$.span', json_array(b.m, b.start, b.start + length(CAST(b.text AS BLOB))))
        END) ORDER BY b.k)
    FROM blocks_0035 b WHERE b.owner = packets_0035.owner AND b.turn = packets_0035.turn)))
WHERE EXISTS (SELECT 1 FROM blocks_0035 b WHERE b.owner = packets_0035.owner AND b.turn = packets_0035.turn AND b.m IS NOT NULL);

UPDATE companion_turns SET packet_json = (SELECT p.packet FROM packets_0035 p WHERE p.owner = companion_turns.id AND p.turn = -1)
WHERE id IN (SELECT owner FROM packets_0035 WHERE turn = -1);
UPDATE companion_saved_chats SET chat_json = json_set(chat_json, '$.turns', json((
    SELECT json_group_array(json(CASE WHEN p.packet IS NULL THEN t.value ELSE json_set(t.value, '$.packet', json(p.packet)) END) ORDER BY t.key)
    FROM json_each(companion_saved_chats.chat_json, '$.turns') t
    LEFT JOIN packets_0035 p ON p.owner = companion_saved_chats.id AND p.turn = t.key)))
WHERE id IN (SELECT owner FROM packets_0035 WHERE turn >= 0);

DROP TABLE blocks_0035;
DROP TABLE packets_0035;
