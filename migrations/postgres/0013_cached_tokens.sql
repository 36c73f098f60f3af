-- agora store, schema 13: prompt tokens the endpoint took from its cache (postgres dialect;
-- migrations/sqlite/0013_cached_tokens.sql is the same schema). Conventions as in 0001_init.sql.

-- Of a call's prompt_tokens, those the endpoint reported reading from its prompt cache
-- (llama-server's cache_n, a hosted API's cached_tokens) rather than evaluating; 0 where it did
-- not say, and for every call recorded before this column.
ALTER TABLE llm_calls ADD COLUMN cached_prompt_tokens BIGINT NOT NULL DEFAULT 0;
