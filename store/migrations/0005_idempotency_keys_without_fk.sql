-- An idempotency key is one user's cache entry, kept for a day: it needs no
-- foreign key. Checking it cost every keyed mutation a lookup of its user and
-- a KEY SHARE lock on the user's row, about a seventh of what Postgres spends
-- on the key (its claim and its record; bench/README.md). TaskFlow deletes no
-- users; code that ever does must delete their keys in the same transaction.
ALTER TABLE idempotency_keys DROP CONSTRAINT IF EXISTS idempotency_keys_user_id_fkey;
