-- docker-compose.yml only: passwords for the two roles of roles.sql (local stack, not for
-- production), and the runtime role's grant on the table the demo jobs write.
ALTER ROLE cronwarden_migrator PASSWORD 'migrator';
ALTER ROLE cronwarden_runtime PASSWORD 'runtime';

GRANT SELECT, INSERT, UPDATE, DELETE ON public.demo_ledger TO cronwarden_runtime;
GRANT USAGE ON SEQUENCE public.demo_ledger_id_seq TO cronwarden_runtime;
