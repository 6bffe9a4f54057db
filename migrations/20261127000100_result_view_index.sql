-- `helmbench view` (issue 32): the results matrix's index. A page of a
-- filtered view reads one run's results in test code order until it has 50
-- that pass the filter, and counts those that pass; with the verdict, the
-- error kind and the severity in the index, neither reads a result row
-- (about 2 KB with its reply) for a result it does not show: a failed-only
-- or severity view of a 110,000-result run reads about 4 MB of index
-- instead of 200 MB of rows. Writes add one entry of about 40 bytes a
-- result, at the end of its run's range (results are written in run
-- order), like the unique key's.
CREATE INDEX result_view ON result (run_id, test_code, repeat_index, passed, error_kind, base_severity);
