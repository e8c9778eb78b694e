-- dsh session store, schema version 1. Applied once per database, in one transaction, by the
-- first dshd that connects (see postgres/schema.rs); never edited once released: a change is a
-- new file with the next number.

-- One row per session: the header exactly as dsh serialises it (text, not jsonb, so it reads
-- back byte for byte), the listing key, the filters, and who created it.
CREATE TABLE sessions (
    id          text PRIMARY KEY,
    header      text NOT NULL,
    created_at  bigint NOT NULL,
    cwd         text NOT NULL,
    -- The machine (host name) and the daemon (its instance id) that created the session.
    host        text NOT NULL,
    daemon      text NOT NULL,
    -- How many events are stored: the next seq. Kept in the row so the tail check of an append
    -- is one primary-key read.
    events      bigint NOT NULL DEFAULT 0
);

-- Keyset pages (CONTRACTS 4.3): every listing is a range scan of one of these, in index order.
CREATE INDEX sessions_by_created ON sessions (created_at, id);
CREATE INDEX sessions_by_cwd ON sessions (cwd, created_at, id);
CREATE INDEX sessions_by_host ON sessions (host, created_at, id);

-- The log: one row per event, its data as the JSON text of the log line's `data`.
CREATE TABLE events (
    session_id  text NOT NULL REFERENCES sessions (id),
    seq         bigint NOT NULL,
    type        text NOT NULL,
    time        bigint NOT NULL,
    data        text NOT NULL,
    PRIMARY KEY (session_id, seq)
);

-- One writer per session: the daemon that has the session live holds its lease and renews it;
-- a lease not renewed by `expires_at` (database time) may be taken by another daemon.
CREATE TABLE leases (
    session_id  text PRIMARY KEY,
    daemon      text NOT NULL,
    host        text NOT NULL,
    pid         bigint NOT NULL,
    expires_at  timestamptz NOT NULL
);
CREATE INDEX leases_by_daemon ON leases (daemon);
