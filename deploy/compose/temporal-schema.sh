#!/bin/sh
# docker-compose.yml only: Temporal's schemas in Postgres, created on the first boot and upgraded
# on later ones. Safe to repeat: `setup-schema -v 0.0` leaves a database that already has a
# version alone, and `update-schema` applies only what is newer.
set -eu
for db in temporal temporal_visibility; do
    dir=temporal
    [ "$db" = temporal_visibility ] && dir=visibility
    temporal-sql-tool --plugin postgres12 --ep postgres -p 5432 -u "$POSTGRES_USER" --db "$db" \
        setup-schema -v 0.0
    temporal-sql-tool --plugin postgres12 --ep postgres -p 5432 -u "$POSTGRES_USER" --db "$db" \
        update-schema -d "/etc/temporal/schema/postgresql/v12/$dir/versioned"
done
