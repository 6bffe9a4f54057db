-- Issue 45: the reply cache finds a stored reply by the first 16 hex
-- characters of its request hash (then compares the whole hash), not by
-- the whole 64. Hashes are random, so every commit of a large run inserts
-- all over this index: at 1,100,000 results the full-hash index was 86 MB
-- and a commit of 8,192 results rewrote about half its pages (most of the
-- 6.9 bytes written per byte kept). The prefix makes it a third of the size;
-- 64 bits tell hashes apart as well for a lookup that checks the whole one.
DROP INDEX result_request_hash;
CREATE INDEX result_request_prefix ON result (substr(request_hash, 1, 16));
