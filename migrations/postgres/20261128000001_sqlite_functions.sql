-- The store writes each statement once for SQLite and PostgreSQL
-- (src/store/backend.rs). The few SQLite functions its statements use are
-- given to PostgreSQL here, in a schema of their own that the store puts in
-- its connections' search_path before pg_catalog
-- (search_path = public, helmbench_sqlite, pg_catalog): a `psql` session
-- or another program sees PostgreSQL's own functions only.
CREATE SCHEMA IF NOT EXISTS helmbench_sqlite;

-- SQLite's SUM of integers is an integer; PostgreSQL's sum(bigint) is a
-- numeric, which no integer column decodes from. Same rules otherwise: NULLs
-- skipped, NULL over no rows, an error on overflow (SQLite's too).
CREATE AGGREGATE helmbench_sqlite.sum(bigint) (SFUNC = int8pl, STYPE = bigint);

-- julianday(text): the Julian day number of an ISO-8601 UTC timestamp as the
-- store writes them ('2026-11-22T10:00:00.123Z'), or of 'now' (the
-- statement's time, as SQLite's 'now').
CREATE FUNCTION helmbench_sqlite.julianday(t text) RETURNS double precision
LANGUAGE sql STABLE AS $$
    SELECT extract(epoch FROM CASE WHEN t = 'now' THEN statement_timestamp() ELSE t::timestamptz END) / 86400.0
           + 2440587.5
$$;

-- strftime(format, time) for the one format the store writes,
-- '%Y-%m-%dT%H:%M:%fZ' (milliseconds), of 'now' or of a stored time; any
-- other format is an error, not a silently different string.
CREATE FUNCTION helmbench_sqlite.strftime(fmt text, t text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF fmt <> '%Y-%m-%dT%H:%M:%fZ' THEN
        RAISE EXCEPTION 'strftime: format % is not supported on PostgreSQL', fmt;
    END IF;
    RETURN to_char(CASE WHEN t = 'now' THEN statement_timestamp() ELSE t::timestamptz END AT TIME ZONE 'UTC',
                   'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"');
END
$$;

-- Scalar max and min of two integers (SQLite's max(a, b); PostgreSQL's
-- GREATEST, which SQLite lacks). NULL when either is NULL, as in SQLite.
CREATE FUNCTION helmbench_sqlite.max(a bigint, b bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT CASE WHEN a IS NULL OR b IS NULL THEN NULL WHEN a > b THEN a ELSE b END $$;
CREATE FUNCTION helmbench_sqlite.min(a bigint, b bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT CASE WHEN a IS NULL OR b IS NULL THEN NULL WHEN a < b THEN a ELSE b END $$;

-- group_concat(value [, separator]): SQLite's string_agg (',' by default).
CREATE FUNCTION helmbench_sqlite.group_concat_step(acc text, v text, sep text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN v IS NULL THEN acc WHEN acc IS NULL THEN v ELSE acc || sep || v END
$$;
CREATE FUNCTION helmbench_sqlite.group_concat_step(acc text, v text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN v IS NULL THEN acc WHEN acc IS NULL THEN v ELSE acc || ',' || v END
$$;
CREATE AGGREGATE helmbench_sqlite.group_concat(text, text) (SFUNC = helmbench_sqlite.group_concat_step, STYPE = text);
CREATE AGGREGATE helmbench_sqlite.group_concat(text) (SFUNC = helmbench_sqlite.group_concat_step, STYPE = text);
