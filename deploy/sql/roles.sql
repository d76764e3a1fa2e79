-- Least-privilege Postgres roles for cronwarden. Run it, in the database cronwarden uses, as a
-- superuser or as what managed Postgres gives you instead: a role with CREATEROLE that owns the
-- database (RDS's master user, Cloud SQL's `postgres`, Azure's admin):
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
--                        heartbeat rows, hence DELETE there). `change_log`, who changed
--                        what, is append-only the same way.
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
    -- Handing an object to the migrator (CREATE SCHEMA ... AUTHORIZATION, ALTER ... OWNER TO) and
    -- SET ROLE below need the right to become it, which a superuser has and a CREATEROLE admin
    -- does not: since Postgres 16 it only holds ADMIN OPTION on the roles it created. It may
    -- grant itself SET (not INHERIT: the admin does not silently act with the migrator's rights).
    IF NOT (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
        IF current_setting('server_version_num')::int >= 160000 THEN
            IF NOT pg_has_role(current_user, 'cronwarden_migrator', 'SET') THEN
                EXECUTE format('GRANT cronwarden_migrator TO %I WITH INHERIT FALSE, SET TRUE',
                               current_user);
            END IF;
        ELSIF NOT pg_has_role(current_user, 'cronwarden_migrator', 'MEMBER') THEN
            EXECUTE format('GRANT cronwarden_migrator TO %I', current_user);
        END IF;
    END IF;
END
$$;

CREATE SCHEMA IF NOT EXISTS cronwarden AUTHORIZATION cronwarden_migrator;
-- A schema someone else created (a `cronwarden migrate` run before the roles existed): its new
-- owner-to-be needs CREATE in it to receive its objects, and the schema itself changes hands
-- last, because without INHERIT the admin can no longer reach the objects once it has.
DO $$
BEGIN
    IF (SELECT nspowner FROM pg_namespace WHERE nspname = 'cronwarden')
       <> 'cronwarden_migrator'::regrole::oid THEN
        GRANT USAGE, CREATE ON SCHEMA cronwarden TO cronwarden_migrator;
    END IF;
END
$$;

-- Objects created before the roles existed pass to the migrator, so later migrations can alter
-- or replace them. A table hands its indexes, triggers and serial sequences over with it;
-- functions (the heartbeat trigger's) and types are separate objects with their own owner.
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
          -- sequences owned by a column follow their table (a partitioned table's dependency
          -- on its own partition key is no such link)
          AND NOT EXISTS (
              SELECT FROM pg_depend d
              WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid AND d.deptype IN ('a', 'i')
                AND d.refobjid <> c.oid
          )
        ORDER BY c.relkind DESC
    LOOP
        EXECUTE format('ALTER %s cronwarden.%I OWNER TO cronwarden_migrator', obj.kind, obj.relname);
    END LOOP;
    FOR obj IN
        SELECT CASE p.prokind WHEN 'p' THEN 'PROCEDURE' WHEN 'a' THEN 'AGGREGATE'
                              ELSE 'FUNCTION' END AS kind,
               p.oid::regprocedure::text AS signature
        FROM pg_proc p
        WHERE p.pronamespace = 'cronwarden'::regnamespace
          AND p.proowner <> 'cronwarden_migrator'::regrole::oid
    LOOP
        EXECUTE format('ALTER %s %s OWNER TO cronwarden_migrator', obj.kind, obj.signature);
    END LOOP;
    FOR obj IN
        SELECT CASE t.typtype WHEN 'd' THEN 'DOMAIN' ELSE 'TYPE' END AS kind,
               t.oid::regtype::text AS signature
        FROM pg_type t
        WHERE t.typnamespace = 'cronwarden'::regnamespace
          AND t.typtype IN ('d', 'e', 'r')
          AND t.typowner <> 'cronwarden_migrator'::regrole::oid
    LOOP
        EXECUTE format('ALTER %s %s OWNER TO cronwarden_migrator', obj.kind, obj.signature);
    END LOOP;
END
$$;
-- The outbox's partitions (migration 0019) live in a schema of their own, which the runtime role
-- never reaches: the migrator owns it and them, so the partition upkeep (run as the migrator by
-- its SECURITY DEFINER functions) may create and drop them. Same order as above.
DO $$
DECLARE
    obj record;
BEGIN
    IF to_regnamespace('cronwarden_outbox') IS NOT NULL THEN
        IF (SELECT nspowner FROM pg_namespace WHERE nspname = 'cronwarden_outbox')
           <> 'cronwarden_migrator'::regrole::oid THEN
            GRANT USAGE, CREATE ON SCHEMA cronwarden_outbox TO cronwarden_migrator;
        END IF;
        FOR obj IN
            SELECT c.relname FROM pg_class c
             WHERE c.relnamespace = 'cronwarden_outbox'::regnamespace AND c.relkind IN ('r', 'p')
               AND c.relowner <> 'cronwarden_migrator'::regrole::oid
        LOOP
            EXECUTE format('ALTER TABLE cronwarden_outbox.%I OWNER TO cronwarden_migrator',
                           obj.relname);
        END LOOP;
        ALTER SCHEMA cronwarden_outbox OWNER TO cronwarden_migrator;
    END IF;
END
$$;
ALTER SCHEMA cronwarden OWNER TO cronwarden_migrator;

-- The rest is the owner's to do: a CREATEROLE admin may neither create in nor grant on what the
-- migrator owns, so it acts as the migrator (a superuser may too).
SET ROLE cronwarden_migrator;

-- The ledger, as `cronwarden migrate` creates it (same statement), so it exists before any
-- migration ran and its read-only grant below holds whichever runs first.
CREATE TABLE IF NOT EXISTS cronwarden.schema_migrations (
    version    integer PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

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
    IF to_regclass('cronwarden.change_log') IS NOT NULL THEN
        REVOKE UPDATE, DELETE, TRUNCATE ON cronwarden.change_log FROM cronwarden_runtime;
    END IF;
END
$$;

-- Tables and sequences that later migrations create (as the migrator) get the same grants.
ALTER DEFAULT PRIVILEGES FOR ROLE cronwarden_migrator IN SCHEMA cronwarden
    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO cronwarden_runtime;
ALTER DEFAULT PRIVILEGES FOR ROLE cronwarden_migrator IN SCHEMA cronwarden
    GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO cronwarden_runtime;

RESET ROLE;
