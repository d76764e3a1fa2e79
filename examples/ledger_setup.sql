-- The demo's own table: created by `cronwarden dev` after the migrations, and by the compose
-- stack's Postgres on its first start. The demo owns it, cronwarden does not.
CREATE TABLE IF NOT EXISTS public.demo_ledger (
    id           bigserial   PRIMARY KEY,
    logical_key  text        NOT NULL,
    account      text        NOT NULL,
    amount_cents bigint      NOT NULL,
    posted_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS demo_ledger_logical_key ON public.demo_ledger (logical_key);
