-- docker-compose.yml only: Temporal's two databases, created on the first start of an empty data
-- directory; the temporal-schema one-shot then creates and upgrades their schemas.
CREATE DATABASE temporal;
CREATE DATABASE temporal_visibility;
