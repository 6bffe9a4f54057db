-- The viewer's text search on PostgreSQL (issue 45): word indexes of the
-- texts it searches, kept by PostgreSQL as results are written (SQLite's
-- view keeps an FTS5 index of its own beside the database instead). The
-- expressions are the ones src/store/view_pg_search.rs and view.rs query.
CREATE INDEX result_reply_words ON result
    USING gin (to_tsvector('simple'::regconfig, COALESCE(response, '')));
CREATE INDEX prompt_text_words ON prompt_text
    USING gin (to_tsvector('simple'::regconfig, text));
CREATE INDEX judgement_words ON judgement
    USING gin (to_tsvector('simple'::regconfig, COALESCE(justification, '')));
CREATE INDEX judge_vote_words ON judge_vote
    USING gin (to_tsvector('simple'::regconfig, COALESCE(justification, '')));
