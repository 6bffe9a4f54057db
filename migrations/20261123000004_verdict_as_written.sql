-- Verdicts are the check exactly as the author wrote it (issue 16). Versions
-- before this one stored deterministic verdicts inverted when the test
-- case's base severity was negative. Re-evaluate those results from what is
-- already stored: `matched` is the check as it held on the stored reply, so
-- the verdict as written is `matched` itself. No request is sent, and the
-- old verdict is kept beside it, so nothing stored is lost.
ALTER TABLE result ADD COLUMN inverted_passed INTEGER; -- the pre-fix verdict, where it changed

UPDATE result
   SET inverted_passed = passed,
       passed = matched
 WHERE base_severity < 0
   AND matched IS NOT NULL
   AND error_kind IS NULL
   AND scenario_id IN (
       SELECT id FROM scenario
        WHERE json_extract(evaluation, '$.type') IN ('category_match', 'list_includes', 'tag_threshold'));

-- Each run's stored totals follow (deterministic results count one
-- evaluation each, so both pass counts move by the same amount).
UPDATE evaluation_run
   SET passed_test_cases = passed_test_cases + d.delta,
       passed_evaluations = passed_evaluations + d.delta
  FROM (SELECT run_id, SUM(passed - inverted_passed) AS delta
          FROM result WHERE inverted_passed IS NOT NULL GROUP BY run_id) AS d
 WHERE evaluation_run.id = d.run_id;
