-- `helmbench view` (issue 32): the results matrix's index. A page of a
-- filtered view reads one run's results in test code order until it has 50
-- that pass the filter, and counts those that pass; with the verdict, the
-- error kind and the severity in the index, neither reads a result row
-- (about 2 KB with its reply) for a result it does not show: a failed-only
-- or severity view of a 110,000-result run reads about 4 MB of index
-- instead of 200 MB of rows. About 40 bytes a result (1.6 % of the
-- benchmark database), written at its run's place like the unique key's.
--
-- Partial on a condition every row meets: SQLite uses a partial index only
-- for a statement whose WHERE implies its condition, here one that names
-- the run (every statement of the view does). Without it, the totals kept
-- at every write (`error_kind = 'provider' AND id > ?`, no run) were
-- planned as a scan of this whole index instead of the new rows' id range,
-- and bench/scale.sh's write took 45 % longer.
CREATE INDEX result_view ON result (run_id, test_code, repeat_index, passed, error_kind, base_severity)
    WHERE run_id IS NOT NULL;
