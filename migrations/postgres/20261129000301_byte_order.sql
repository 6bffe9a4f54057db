-- Every text column compares and sorts in byte order, as SQLite's do (its
-- BINARY collation), whatever the database's own collation (issue 41, item
-- 11). The store's statements rest on it: the viewer takes a pillar's,
-- behaviour's or scenario's results as the test-code range [P1-B1, P1-B1.)
-- and merges its runs' pages by comparing codes in Rust; under a collation
-- that ignores punctuation (en_US.UTF-8) such a range held nothing and
-- pages skipped rows. Declared on the columns, it holds in every statement
-- and index, including those written later: tests/it/postgres.rs checks
-- that every text column of the schema has it.
DO $$
DECLARE
    c record;
BEGIN
    FOR c IN
        SELECT table_name, column_name FROM information_schema.columns
         WHERE table_schema = current_schema() AND data_type = 'text'
           AND table_name <> '_sqlx_migrations'
           AND collation_name IS DISTINCT FROM 'C'
         ORDER BY table_name, column_name
    LOOP
        EXECUTE format('ALTER TABLE %I ALTER COLUMN %I TYPE text COLLATE "C"',
                       c.table_name, c.column_name);
    END LOOP;
END
$$;
