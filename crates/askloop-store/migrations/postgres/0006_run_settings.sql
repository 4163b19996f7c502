-- What a run was started with beyond its agent's configuration (narrower
-- limits, other instructions): a JSON object, `{}` for none. Only added:
-- rows written before read as "no settings". A row with settings is
-- written at layout version 2, so an askloop that does not know this
-- column refuses the run instead of driving it past its limits.

ALTER TABLE runs ADD COLUMN settings JSONB NOT NULL DEFAULT '{}'::jsonb;
