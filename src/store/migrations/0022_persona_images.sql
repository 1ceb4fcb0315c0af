-- Owned by the character module: a persona's optional picture (PNG bytes, checked to
-- decode when set), shown where the user chooses who they play.
ALTER TABLE personas ADD COLUMN image_png BLOB;
