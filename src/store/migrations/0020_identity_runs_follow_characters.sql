-- Owned by the identity module: a run's id is its character's id, so when the character
-- is deleted from the library its run goes too (checkpoints and versions cascade).
CREATE TRIGGER identity_runs_follow_characters AFTER DELETE ON characters
BEGIN
    DELETE FROM identity_runs WHERE id = old.id;
END;
