-- The title's search vector is computed when the title is written, not on every update of the
-- chat row (issue 40). As a stored generated column (0014) PostgreSQL 15 evaluated
-- to_tsvector for every UPDATE of chats, whatever it changed: about ten per turn (the version
-- bump of each bundle, ownership, status). A trigger on INSERT and UPDATE OF title runs only
-- when a statement sets the title; the column, its index, its statistics and every query
-- that reads it stay as they were, and the values already stored are kept.
ALTER TABLE chats ALTER COLUMN title_search DROP EXPRESSION;

CREATE FUNCTION set_chat_title_search() RETURNS trigger AS $$
BEGIN
    NEW.title_search = to_tsvector('english'::regconfig, NEW.title);
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER trigger_set_chat_title_search
    BEFORE INSERT OR UPDATE OF title ON chats
    FOR EACH ROW EXECUTE FUNCTION set_chat_title_search();
