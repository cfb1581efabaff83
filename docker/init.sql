-- Runs once, when the compose quickstart's PostgreSQL starts with an empty
-- data directory: the application's outbox table, the publication, and the
-- least-privilege role outboxrelay connects as.

CREATE TABLE public.outbox (
  id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  aggregatetype varchar(255) NOT NULL,
  aggregateid   varchar(255) NOT NULL,
  type          varchar(255) NOT NULL,
  payload       jsonb
);

-- Adding a table to a publication needs its owner, so the owner makes it
-- and outboxrelay finds it (cdc.create_publication stays harmless).
CREATE PUBLICATION outboxrelay FOR TABLE public.outbox WITH (publish = 'insert');

-- LOGIN REPLICATION to stream from the slot, SELECT to check the table.
CREATE ROLE outboxrelay LOGIN REPLICATION PASSWORD 'relay-secret';
GRANT SELECT ON public.outbox TO outboxrelay;
