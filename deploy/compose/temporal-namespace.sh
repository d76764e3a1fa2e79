#!/bin/sh
# docker-compose.yml only: registers namespace `default`, then waits until the frontend serves
# it. A namespace is usable only once the frontend's namespace cache has picked it up, seconds
# after registration: a worker started before that fails with "namespace default is not found".
# Everything that talks to Temporal waits for this one-shot to succeed.
set -eu
if ! temporal operator namespace describe --namespace default >/dev/null 2>&1; then
    temporal operator namespace create --namespace default --retention 72h
fi
tries=0
until temporal workflow list --namespace default --limit 1 >/dev/null 2>&1; do
    tries=$((tries + 1))
    if [ "$tries" -ge 60 ]; then
        echo "namespace default registered but not served after 60 tries" >&2
        exit 1
    fi
    echo "waiting for the frontend to serve namespace default ($tries)"
    sleep 1
done
echo "namespace default is ready"
