-- PostgreSQL twin of ../20261123000004_verdict_as_written.sql (the same
-- re-evaluation, for a database that got its rows some other way before
-- this migration ran; on a new database it changes nothing).
ALTER TABLE result ADD COLUMN inverted_passed BIGINT;

UPDATE result
   SET inverted_passed = passed,
       passed = matched
 WHERE base_severity < 0
   AND matched IS NOT NULL
   AND error_kind IS NULL
   AND scenario_id IN (
       SELECT id FROM scenario
        WHERE evaluation::jsonb ->> 'type' IN ('category_match', 'list_includes', 'tag_threshold'));

UPDATE evaluation_run
   SET passed_test_cases = passed_test_cases + d.delta,
       passed_evaluations = passed_evaluations + d.delta
  FROM (SELECT run_id, SUM(passed - inverted_passed)::BIGINT AS delta
          FROM result WHERE inverted_passed IS NOT NULL GROUP BY run_id) AS d
 WHERE evaluation_run.id = d.run_id;
