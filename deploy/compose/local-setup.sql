-- docker-compose.yml only: passwords for the two roles of roles.sql (local stack, not for
-- production), and the table the demo jobs write, which the runtime role may change.
ALTER ROLE cronwarden_migrator PASSWORD 'migrator';
ALTER ROLE cronwarden_runtime PASSWORD 'runtime';

CREATE TABLE IF NOT EXISTS public.demo_ledger (
    id           bigserial   PRIMARY KEY,
    logical_key  text        NOT NULL,
    account      text        NOT NULL,
    amount_cents bigint      NOT NULL,
    posted_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS demo_ledger_logical_key ON public.demo_ledger (logical_key);
GRANT SELECT, INSERT, UPDATE, DELETE ON public.demo_ledger TO cronwarden_runtime;
GRANT USAGE ON SEQUENCE public.demo_ledger_id_seq TO cronwarden_runtime;
