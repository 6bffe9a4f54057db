-- One random pseudonym per database, sent as `user` on every chat request
-- (OpenRouter asks applications for a stable, pseudonymous user id). Made
-- on first use; never derived from the API key.
CREATE TABLE pseudonym (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    user_id TEXT NOT NULL
);
