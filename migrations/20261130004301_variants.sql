-- Issue 43: a run's variants of the user's words are perturbation rows of
-- their own (full code `P1-B1-S1-C1-PT1~typos`, the varied text verbatim in
-- `prompt`), with the variant's name and the seed they were drawn with, so
-- a report reads the text that was sent and never draws it again. NULL for
-- the perturbations as written.
ALTER TABLE perturbation ADD COLUMN variant TEXT;
ALTER TABLE perturbation ADD COLUMN variant_seed INTEGER;
