-- Least-privilege Postgres roles for cronwarden. Run it as a superuser (or a role with CREATEROLE
-- that owns the database), in the database cronwarden uses:
--
--   psql "$ADMIN_DATABASE_URL" -v ON_ERROR_STOP=1 -f deploy/sql/roles.sql
--
-- It is safe to run again, and on a database that was migrated before the roles existed.
--
--   cronwarden_migrator  owns schema `cronwarden` and everything in it; `cronwarden migrate`
--                        (the migrate Job) connects as this role and nothing else does.
--   cronwarden_runtime   SELECT/INSERT/UPDATE/DELETE on cronwarden's tables and use of its
--                        sequences: no CREATE, ALTER or DROP. Two exceptions: the migration
--                        ledger `schema_migrations` is read-only (so `migrate --check` cannot be
--                        made to lie), and `outbox` is append-only: INSERT and SELECT, no UPDATE
--                        or DELETE (a deleted or rewritten record would let its fire apply
--                        again, or misreport it; nothing in cronwarden changes one). The deploy
--                        files give it to the workers, the monitor and `schedules apply`; run
--                        the other CLI commands with it too (`schedules delete` removes
--                        heartbeat rows, hence DELETE there).
--
-- Neither role gets a password here: set one (ALTER ROLE cronwarden_runtime PASSWORD '...') or
-- use your platform's IAM authentication. Your jobs' own tables are yours: grant the runtime role
-- DML on the tables they write, e.g.
--   GRANT SELECT, INSERT, UPDATE, DELETE ON public.invoices TO cronwarden_runtime;

DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'cronwarden_migrator') THEN
        CREATE ROLE cronwarden_migrator LOGIN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'cronwarden_runtime') THEN
        CREATE ROLE cronwarden_runtime LOGIN;
    END IF;
    -- `cronwarden migrate` says CREATE SCHEMA IF NOT EXISTS, which needs CREATE on the database
    -- even when the schema exists.
    EXECUTE format('GRANT CONNECT, CREATE ON DATABASE %I TO cronwarden_migrator', current_database());
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO cronwarden_runtime', current_database());
END
$$;

CREATE SCHEMA IF NOT EXISTS cronwarden AUTHORIZATION cronwarden_migrator;
ALTER SCHEMA cronwarden OWNER TO cronwarden_migrator;

-- The ledger, as `cronwarden migrate` creates it (same statement), so it exists before any
-- migration ran and its read-only grant below holds whichever runs first.
CREATE TABLE IF NOT EXISTS cronwarden.schema_migrations (
    version    integer PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- Objects created before the roles existed pass to the migrator, so later migrations can alter
-- them. A table hands its indexes and serial sequences over with it.
DO $$
DECLARE
    obj record;
BEGIN
    FOR obj IN
        SELECT c.relname,
               CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW'
                              WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END AS kind
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'cronwarden'
          AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
          AND c.relowner <> 'cronwarden_migrator'::regrole::oid
          -- sequences owned by a column follow their table
          AND NOT EXISTS (
              SELECT FROM pg_depend d
              WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype IN ('a', 'i')
          )
        ORDER BY c.relkind DESC
    LOOP
        EXECUTE format('ALTER %s cronwarden.%I OWNER TO cronwarden_migrator', obj.kind, obj.relname);
    END LOOP;
END
$$;

REVOKE ALL ON SCHEMA cronwarden FROM PUBLIC;
GRANT USAGE ON SCHEMA cronwarden TO cronwarden_runtime;
GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA cronwarden TO cronwarden_runtime;
GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA cronwarden TO cronwarden_runtime;
-- The exceptions; `cronwarden migrate` applies the same ones (store/migrate.py) to an outbox
-- created after this script ran.
REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON cronwarden.schema_migrations FROM cronwarden_runtime;
DO $$
BEGIN
    IF to_regclass('cronwarden.outbox') IS NOT NULL THEN
        REVOKE UPDATE, DELETE, TRUNCATE ON cronwarden.outbox FROM cronwarden_runtime;
    END IF;
END
$$;

-- Tables and sequences that later migrations create (as the migrator) get the same grants.
ALTER DEFAULT PRIVILEGES FOR ROLE cronwarden_migrator IN SCHEMA cronwarden
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO cronwarden_runtime;
ALTER DEFAULT PRIVILEGES FOR ROLE cronwarden_migrator IN SCHEMA cronwarden
    GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO cronwarden_runtime;
